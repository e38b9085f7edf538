"""Kubernetes objects for one GannetCluster (pure; no IO).

:func:`build` turns a cluster's name, namespace, uid and :class:`~gannet.operator.specs.ClusterSpec`
into the objects the operator keeps applied (``handlers`` → ``kube.apply``):

- ``<name>-peers``: headless Service (``publishNotReadyAddresses``) giving each pod the stable
  DNS name ``<name>-<i>.<name>-peers.<ns>.svc`` that the Raft peers list uses;
- ``<name>-client``: the client Service (8081, RocketMQ 5 clients and the admin API; 5557
  metrics);
- ``<name>-config``: ConfigMap with the broker settings (flush mode, file size); its hash is a
  pod-template annotation, so a change rolls the pods. The Raft members are not in it: they
  change through the admin API, and each pod's node id and ``--join``/``--peers`` come from the
  roster ConfigMap ``<name>-members`` (:mod:`gannet.operator.member_pods`), mounted at
  :data:`MEMBERS_DIR`, which is not hashed (changing it restarts nothing);
- ``<name>``: StatefulSet, one Raft group. ``podManagementPolicy: Parallel`` because a Raft group
  needs a majority up before any member is ready; ``updateStrategy: OnDelete`` because the
  operator rolls pods itself, one at a time, after moving leadership away
  (:mod:`gannet.operator.cluster_planning`);
- ``<name>``: PodDisruptionBudget allowing at most a minority of members down;
- ``<name>``: ServiceMonitor (``monitoring.coreos.com/v1``) when enabled in the spec;
- ``<name>-client-tls`` / ``<name>-peer-tls``: cert-manager ``Certificate`` objects
  (``cert-manager.io/v1``) when ``spec.security.tls`` / ``peerTls`` name an issuer; they fill the
  Secrets of the same names with ``tls.crt``, ``tls.key`` and ``ca.crt``.

Security (``spec.security``): the credentials Secret is mounted read-only at
:data:`AUTH_DIR` and passed as ``--auth-file`` (the broker reads every ``*.json``/``*.yaml`` key
of the directory); the client TLS Secret at :data:`TLS_DIR` (``--tls-cert``/``--tls-key``) and
the peer TLS Secret at :data:`PEER_TLS_DIR` (``--peer-tls-cert``/``--peer-tls-key``/
``--peer-tls-ca``, the cluster CA being the Secret's ``ca.crt``).

Tiered storage (``spec.tier``): the one key of the user's Secret that holds an AWS
shared-credentials file is projected to :data:`TIER_DIR`/``credentials``
(``--tier-credentials-file``); every ``--tier-*`` setting is an argument, with the group's own
prefix, so a change rolls the pods like any other template change.

Every object carries the cluster as controlling ownerReference, so deleting the GannetCluster
garbage-collects them. The broker command line is ``gannet broker run <the pod's roster line>
--peer-listen 0.0.0.0:8091 --listen 0.0.0.0:8081 --metrics-listen 0.0.0.0:5557 ...``, the roster
line being ``--node-id N --data-dir /var/lib/gannet/node-N`` plus ``--join`` (or, for the first
members of a new group, ``--peers``) (:data:`BROKER_COMMAND`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gannet.operator import cluster_key, external_access, resources, specs
from gannet.operator.resources import (
    CLIENT_PORT,
    EXTERNAL_REMOTING_PORT,
    METRICS_PORT,
    NAMESERVER_PORT,
    PEER_PORT,
    REMOTING_PORT,
)
from gannet.operator.specs import BROKER_GROUPS_MAX, ClusterSpec, TlsSpec

DATA_DIR = "/var/lib/gannet"
AUTH_DIR = "/etc/gannet/auth"
TLS_DIR = "/etc/gannet/tls"
PEER_TLS_DIR = "/etc/gannet/peer-tls"
PEER_SECRET_DIR = "/etc/gannet/peer-secret"
MEMBERS_DIR = "/etc/gannet/members"
TIER_DIR = "/etc/gannet/tier"
TIER_CREDENTIALS_FILE = "credentials"
"""The file (in :data:`TIER_DIR`) the tier Secret's key is projected to."""
GROUPS_DIR = "/etc/gannet/groups"
CLUSTER_LABEL = "gannet.io/cluster"
GROUP_LABEL = "gannet.io/broker-group"
PEER_SECRET_KEY = "secret"
# Secret files readable by the pod's group only (fsGroup), never written.
SECRET_MODE = 0o440
CERT_MANAGER_API_VERSION = "cert-manager.io/v1"
RUN_AS_USER = 10001
CONFIG_HASH_ANNOTATION = "gannet.io/config-hash"

Manifest = dict[str, Any]


def group_base(cluster: str, group: int) -> str:
    """The name a broker group's objects derive from: the cluster's own name for group 0 (so a
    1-group cluster keeps every name it had), ``<cluster>-g<group>`` for the others."""
    return cluster if group == 0 else f"{cluster}-g{group}"


def broker_name(group: int) -> str:
    """The RocketMQ broker name every member of ``group`` runs with (``--broker-name``)."""
    return f"broker-{group}"


def groups_config_map_name(cluster: str) -> str:
    """ConfigMap with one key per broker name: the ``--cluster-seeds`` of that group's pods."""
    return f"{cluster}-groups"


def peers_service_name(cluster: str) -> str:
    return f"{cluster}-peers"


def client_service_name(cluster: str) -> str:
    return f"{cluster}-client"


def config_map_name(cluster: str) -> str:
    return f"{cluster}-config"


def pod_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def client_tls_secret_name(cluster: str, spec: ClusterSpec) -> str | None:
    """The Secret with the client port's certificate (None: no TLS)."""
    return _tls_secret(cluster, spec.security.tls, "client")


def peer_tls_secret_name(cluster: str, spec: ClusterSpec) -> str | None:
    """The Secret with the peers' certificate and the cluster CA (None: no peer TLS)."""
    return _tls_secret(cluster, spec.security.peer_tls, "peer")


def peer_secret_name(cluster: str, spec: ClusterSpec) -> str | None:
    """The Secret with the peers' shared secret (key ``secret``): the one named in the spec,
    else ``<cluster>-peer-secret`` (generated by the operator, :func:`generated_peer_secret`);
    None with peer TLS and no Secret named (the certificates authenticate the peers)."""
    if spec.security.peer_secret is not None:
        return spec.security.peer_secret
    if spec.security.peer_tls.enabled:
        return None
    return f"{cluster}-peer-secret"


def generated_peer_secret(cluster: str, namespace: str, uid: str, token: str) -> Manifest:
    """The generated shared secret of a cluster that names none (created once, never
    re-applied: a new value would split the group)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(f"{cluster}-peer-secret", cluster, namespace, uid),
        "type": "Opaque",
        "stringData": {PEER_SECRET_KEY: token},
    }


def generated_cluster_key(cluster: str, namespace: str, uid: str, secret_key: str) -> Manifest:
    """The cluster key Secret (``cluster_key``), created once, owned by the cluster."""
    name = cluster_key.secret_name(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(name, cluster, namespace, uid),
        "type": "Opaque",
        "stringData": cluster_key.secret_data(secret_key),
    }


def peer_network_policy(
    cluster: str, namespace: str, uid: str, group: int = 0, spec: ClusterSpec | None = None
) -> Manifest:
    """Only the group's own pods reach its peer port (Raft stays inside a group); clients and
    metrics stay open (other groups poll and forward through the client port)."""
    owner, cluster = cluster, group_base(cluster, group)
    pods = {"matchLabels": selector_labels(cluster)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(f"{cluster}-peers", cluster, namespace, uid, owner, group),
        "spec": {
            "podSelector": pods,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": pods}], "ports": [{"port": PEER_PORT}]},
                {"ports": [{"port": port} for port in _open_ports(spec)]},
            ],
        },
    }


def _open_ports(spec: ClusterSpec | None) -> list[int]:
    """The pod ports anyone may reach: client and metrics, and remoting when served."""
    ports = [CLIENT_PORT, METRICS_PORT]
    if spec is not None and spec.remoting:
        ports += [REMOTING_PORT, NAMESERVER_PORT]
        if spec.external is not None:
            ports.append(EXTERNAL_REMOTING_PORT)
    return ports


def _tls_secret(cluster: str, tls: TlsSpec, purpose: str) -> str | None:
    if not tls.enabled:
        return None
    return tls.secret_name or f"{cluster}-{purpose}-tls"


def pod_host(cluster: str, namespace: str, ordinal: int) -> str:
    return f"{pod_name(cluster, ordinal)}.{peers_service_name(cluster)}.{namespace}.svc"


def client_endpoint(cluster: str, namespace: str) -> str:
    return f"{client_service_name(cluster)}.{namespace}.svc:{CLIENT_PORT}"


def pod_endpoint(cluster: str, namespace: str, ordinal: int) -> str:
    return f"{pod_host(cluster, namespace, ordinal)}:{CLIENT_PORT}"


def selector_labels(cluster: str) -> dict[str, str]:
    return {
        resources.NAME_LABEL: "gannet",
        resources.INSTANCE_LABEL: cluster,
        resources.COMPONENT_LABEL: "broker",
    }


def selector_text(cluster: str) -> str:
    """The label selector as text, for ``status.selector`` (scale subresource)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(cluster).items()))


def _labels(cluster: str, owner: str | None = None, group: int = 0) -> dict[str, str]:
    """Labels of an object of group base name ``cluster`` (:func:`group_base`) of the
    GannetCluster ``owner`` (default: ``cluster`` itself, group 0)."""
    return {
        **selector_labels(cluster),
        resources.MANAGED_BY_LABEL: "gannet-operator",
        CLUSTER_LABEL: owner or cluster,
        GROUP_LABEL: str(group),
    }


def _metadata(
    name: str, cluster: str, namespace: str, uid: str, owner: str | None = None, group: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": _labels(cluster, owner, group),
        "ownerReferences": [
            {
                "apiVersion": resources.API_VERSION,
                "kind": resources.CLUSTER_KIND,
                "name": owner or cluster,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def owned_metadata(
    name: str, cluster: str, namespace: str, uid: str, owner: str | None = None, group: int = 0
) -> dict[str, Any]:
    """Metadata of an object owned by the GannetCluster ``owner`` (default ``cluster``) whose
    group base name is ``cluster`` (labels and controlling owner)."""
    return _metadata(name, cluster, namespace, uid, owner, group)


def max_unavailable(replicas: int) -> int:
    """Members that may be down while a majority stays up (at least 1, so drains can proceed)."""
    return max(1, (replicas - 1) // 2)


def config_data(cluster: str, namespace: str, spec: ClusterSpec, replicas: int) -> dict[str, str]:
    return {
        "GANNET_FLUSH": spec.flush_mode,
        "GANNET_FILE_SIZE_MB": str(spec.commitlog_file_size_mb),
        "GANNET_CLUSTER": cluster,
        "GANNET_METRICS_LISTEN": f"0.0.0.0:{METRICS_PORT}" if spec.metrics_enabled else "",
    }


def config_hash(data: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# The pod's node id, data directory and --join/--peers come from its key in the roster
# ConfigMap (gannet.operator.member_pods), written before the pod is created: the StatefulSet's
# template is shared by all pods. `$$` is Kubernetes' escape for a literal `$` in a command.
BROKER_COMMAND = [
    "/bin/sh",
    "-c",
    f'f="{MEMBERS_DIR}/$$POD_NAME"; '
    'while [ ! -s "$$f" ]; do echo "waiting for $$f (the operator writes it)"; sleep 2; done; '
    f's="{GROUPS_DIR}/$$GANNET_BROKER_NAME"; '
    'if [ -s "$$s" ]; then set -- --cluster-seeds "$$(cat "$$s")" "$@"; fi; '
    'exec gannet broker run $$(cat "$$f") "$@"',
    "gannet",
]


def _args(spec: ClusterSpec) -> list[str]:
    """Arguments after ``gannet broker run <roster line>`` (see :data:`BROKER_COMMAND`)."""
    args = [
        "--peer-listen",
        f"0.0.0.0:{PEER_PORT}",
        "--listen",
        f"0.0.0.0:{CLIENT_PORT}",
        "--metrics-listen",
        "$(GANNET_METRICS_LISTEN)",
        "--flush",
        "$(GANNET_FLUSH)",
        "--file-size-mb",
        "$(GANNET_FILE_SIZE_MB)",
        "--cluster",
        "$(GANNET_CLUSTER)",
        "--broker-name",
        "$(GANNET_BROKER_NAME)",
    ]
    if spec.index_hash_slots is not None:
        args += ["--index-hash-slots", str(spec.index_hash_slots)]
    if spec.auto_create_topics:
        args.append("--auto-create-topics")
    if spec.auto_create_groups:
        args.append("--auto-create-groups")
    if spec.security.auth.enabled:
        args += ["--auth-file", AUTH_DIR]
    if spec.security.tls.enabled:
        args += ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"]
    if peer_secret_name("", spec) is not None:
        args += ["--peer-secret-file", f"{PEER_SECRET_DIR}/{PEER_SECRET_KEY}"]
    if spec.remoting:
        args += ["--remoting-port", str(REMOTING_PORT), "--nameserver-port", str(NAMESERVER_PORT)]
    if spec.external is not None:
        book = f"{external_access.BOOK_DIR}/{external_access.BOOK_KEY}"
        args += ["--external-addresses", book]
        if spec.remoting:
            args += ["--external-remoting-port", str(EXTERNAL_REMOTING_PORT)]
    if spec.security.peer_tls.enabled:
        args += [
            "--peer-tls-cert",
            f"{PEER_TLS_DIR}/tls.crt",
            "--peer-tls-key",
            f"{PEER_TLS_DIR}/tls.key",
            "--peer-tls-ca",
            f"{PEER_TLS_DIR}/ca.crt",
        ]
    return args


def tier_args(spec: ClusterSpec, cluster: str, namespace: str, group: int) -> list[str]:
    """The ``--tier-*`` arguments of broker group ``group`` (none without ``spec.tier``): every
    setting given explicitly, and the group's own prefix (:func:`specs.tier_prefix`)."""
    tier = spec.tier
    if tier is None:
        return []
    args = [
        "--tier-endpoint",
        tier.endpoint,
        "--tier-bucket",
        tier.bucket,
        "--tier-prefix",
        specs.tier_prefix(tier, cluster, namespace, broker_name(group)),
        "--tier-credentials-file",
        f"{TIER_DIR}/{TIER_CREDENTIALS_FILE}",
    ]
    if tier.region is not None:
        args += ["--tier-region", tier.region]
    args += [
        "--tier-offload-after-s",
        f"{tier.offload_after_s:.15g}",
        "--tier-offload-disk-ratio",
        f"{tier.offload_disk_ratio:.15g}",
        "--tier-local-retention-bytes",
        str(tier.local_retention_bytes),
        "--tier-uploads-per-pass",
        str(tier.uploads_per_pass),
        "--tier-pass-interval-s",
        f"{tier.pass_interval_s:.15g}",
        "--tier-remote-retention-s",
        f"{tier.remote_retention_s:.15g}",
        "--tier-remote-bytes-max",
        str(tier.remote_bytes_max),
    ]
    return args


def tier_volume(spec: ClusterSpec) -> dict[str, Any] | None:
    """The Secret volume holding the tier's credentials file: only the named key, projected to
    :data:`TIER_CREDENTIALS_FILE` (the Secret may hold other keys; they stay out of the pod)."""
    if spec.tier is None:
        return None
    return {
        "name": "tier-credentials",
        "secret": {
            "secretName": spec.tier.credentials_secret,
            "defaultMode": SECRET_MODE,
            "items": [{"key": spec.tier.credentials_key, "path": TIER_CREDENTIALS_FILE}],
        },
    }


def _secret_volumes(cluster: str, spec: ClusterSpec) -> list[tuple[str, str, str]]:
    """``(volume name, Secret name, mount path)`` of every Secret the brokers read."""
    found: list[tuple[str, str, str]] = []
    credentials = spec.security.auth.credentials_secret
    if spec.security.auth.enabled and credentials:
        found.append(("auth", credentials, AUTH_DIR))
    client = client_tls_secret_name(cluster, spec)
    if client:
        found.append(("tls", client, TLS_DIR))
    peer = peer_tls_secret_name(cluster, spec)
    if peer:
        found.append(("peer-tls", peer, PEER_TLS_DIR))
    shared = peer_secret_name(cluster, spec)
    if shared:
        found.append(("peer-secret", shared, PEER_SECRET_DIR))
    return found


READINESS_PERIOD_S = 1
READINESS_FAILURES_MAX = 1
"""The broker's readinessProbe: a member that knows no Raft leader (cut off from the majority)
says not ready on ``/readyz`` and closes its client port 0.5 s later (tcpSocket probes see
that); the client Service must stop drawing it for new connections before a client reconnects
a second time. kube-proxy sends each new connection to a ready pod at random and passes a
refusal on: the official Node.js client (one address: the Service) then fails its sends for
grpc-js's reconnect backoff (1 s, then 1.6 s, ...) and draws again. With 5 s x 3 the cut
member stayed listed 12-14 s after a cut and a Node.js client went 5.9 s without a successful
send (``make e2e-partition-clients``, ``node-service``; docs/architecture.md). A healthy member
knows a leader all along but for the gap of an election, so one failed probe is enough."""


def _probes(spec: ClusterSpec) -> dict[str, Any]:
    if spec.metrics_enabled:
        live: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": "metrics"}}
        ready: dict[str, Any] = {"httpGet": {"path": "/readyz", "port": "metrics"}}
    else:
        live = ready = {"tcpSocket": {"port": "client"}}
    return {
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 6},
        "readinessProbe": {
            **ready,
            "periodSeconds": READINESS_PERIOD_S,
            "failureThreshold": READINESS_FAILURES_MAX,
        },
        "startupProbe": {**live, "periodSeconds": 5, "failureThreshold": 120},
    }


def _container(spec: ClusterSpec, group: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "broker",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": BROKER_COMMAND,
        "args": _args(spec),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "GANNET_BROKER_NAME", "value": broker_name(group)},
        ],
        "envFrom": [],  # filled with the ConfigMap by stateful_set()
        "ports": [
            {"name": "client", "containerPort": CLIENT_PORT, "protocol": "TCP"},
            {"name": "peer", "containerPort": PEER_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        # The root filesystem is read-only; /tmp is a small scratch volume.
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "members", "mountPath": MEMBERS_DIR, "readOnly": True},
            {"name": "groups", "mountPath": GROUPS_DIR, "readOnly": True},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        **_probes(spec),
    }
    if spec.remoting:
        container["ports"] += [
            {"name": "remoting", "containerPort": REMOTING_PORT, "protocol": "TCP"},
            {"name": "nameserver", "containerPort": NAMESERVER_PORT, "protocol": "TCP"},
        ]
        if spec.external is not None:
            container["ports"].append(
                {"name": "ext-remoting", "containerPort": EXTERNAL_REMOTING_PORT, "protocol": "TCP"}
            )
    if spec.external is not None:
        container["volumeMounts"].append(
            {"name": "external", "mountPath": external_access.BOOK_DIR, "readOnly": True}
        )
    if spec.resources:
        container["resources"] = {k: dict(v) for k, v in spec.resources.items()}
    return container


def stateful_set(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, *, replicas: int, group: int = 0
) -> Manifest:
    """The StatefulSet of broker group ``group`` with ``replicas`` members (which may lag
    spec.replicas while a scale-down is refused)."""
    data = config_data(cluster, namespace, spec, replicas)
    owner, cluster = cluster, group_base(cluster, group)
    container = _container(spec, group)
    container["envFrom"] = [{"configMapRef": {"name": config_map_name(owner)}}]
    container["env"] += cluster_key.env(owner, spec, f"{TLS_DIR}/ca.crt")
    secrets = _secret_volumes(owner, spec)
    container["volumeMounts"] += [
        {"name": volume, "mountPath": path, "readOnly": True} for volume, _, path in secrets
    ]
    container["args"] += tier_args(spec, owner, namespace, group)
    tier = tier_volume(spec)
    if tier is not None:
        container["volumeMounts"].append(
            {"name": tier["name"], "mountPath": TIER_DIR, "readOnly": True}
        )
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "enableServiceLinks": False,
    }
    sts_spec: dict[str, Any] = {
        "replicas": replicas,
        "serviceName": peers_service_name(cluster),
        "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "OnDelete"},
        "selector": {"matchLabels": selector_labels(cluster)},
        "template": {
            "metadata": {
                "labels": _labels(cluster, owner, group),
                "annotations": {CONFIG_HASH_ANNOTATION: config_hash(data)},
            },
            "spec": pod_spec,
        },
    }
    storage = spec.storage
    pod_spec["volumes"] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        {"name": "members", "configMap": {"name": f"{cluster}-members"}},
        {
            "name": "groups",
            "configMap": {"name": groups_config_map_name(owner), "optional": True},
        },
    ]
    if spec.external is not None:
        book = {"name": external_access.book_config_map_name(owner), "optional": True}
        pod_spec["volumes"].append({"name": "external", "configMap": book})
    pod_spec["volumes"] += [
        cluster_key.auth_volume(owner, secret, SECRET_MODE)
        if volume == "auth" and cluster_key.needed(spec)
        else {"name": volume, "secret": {"secretName": secret, "defaultMode": SECRET_MODE}}
        for volume, secret, _ in secrets
    ]
    if tier is not None:
        pod_spec["volumes"].append(tier)
    if storage.type == "ephemeral":
        pod_spec["volumes"].append({"name": "data", "emptyDir": {}})
    else:
        claim_spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage.size}},
        }
        if storage.storage_class:
            claim_spec["storageClassName"] = storage.storage_class
        sts_spec["volumeClaimTemplates"] = [
            {"metadata": {"name": "data", "labels": selector_labels(cluster)}, "spec": claim_spec}
        ]
        policy = "Delete" if storage.delete_claim else "Retain"
        sts_spec["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": policy,
            "whenScaled": policy,
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(cluster, cluster, namespace, uid, owner, group),
        "spec": sts_spec,
    }


def config_map(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, *, replicas: int
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(config_map_name(cluster), cluster, namespace, uid),
        "data": config_data(cluster, namespace, spec, replicas),
    }


def peers_service(cluster: str, namespace: str, uid: str, group: int = 0) -> Manifest:
    owner, cluster = cluster, group_base(cluster, group)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(peers_service_name(cluster), cluster, namespace, uid, owner, group),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(cluster),
            "ports": [
                {"name": "peer", "port": PEER_PORT, "targetPort": "peer", "protocol": "TCP"},
                {"name": "client", "port": CLIENT_PORT, "targetPort": "client", "protocol": "TCP"},
            ],
        },
    }


def client_service(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, group: int = 0
) -> Manifest:
    owner, cluster = cluster, group_base(cluster, group)
    ports = [{"name": "client", "port": CLIENT_PORT, "targetPort": "client", "protocol": "TCP"}]
    if spec.remoting:
        ports += [
            {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
            for name, port in (("remoting", REMOTING_PORT), ("nameserver", NAMESERVER_PORT))
        ]
    if spec.metrics_enabled:
        ports.append(
            {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(client_service_name(cluster), cluster, namespace, uid, owner, group),
        "spec": {"type": "ClusterIP", "selector": selector_labels(cluster), "ports": ports},
    }


def disruption_budget(
    cluster: str, namespace: str, uid: str, *, replicas: int, group: int = 0
) -> Manifest:
    owner, cluster = cluster, group_base(cluster, group)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(cluster, cluster, namespace, uid, owner, group),
        "spec": {
            "maxUnavailable": max_unavailable(replicas),
            "selector": {"matchLabels": selector_labels(cluster)},
        },
    }


def service_monitor(cluster: str, namespace: str, uid: str, spec: ClusterSpec) -> Manifest:
    metadata = _metadata(cluster, cluster, namespace, uid)
    metadata["labels"] = {**metadata["labels"], **spec.service_monitor.labels}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata,
        "spec": {
            # Every group's client Service (group 0 keeps its own labels as before).
            "selector": {
                "matchLabels": {
                    resources.NAME_LABEL: "gannet",
                    resources.COMPONENT_LABEL: "broker",
                    CLUSTER_LABEL: cluster,
                }
            },
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": spec.service_monitor.interval,
                    # The dashboards and alert rules select job=~"gannet.*" and a cluster label.
                    "relabelings": [
                        {"targetLabel": "job", "replacement": "gannet-broker"},
                        {"targetLabel": "cluster", "replacement": cluster},
                    ],
                }
            ],
        },
    }


def tls_dns_names(cluster: str, namespace: str, replicas: int) -> list[str]:
    """Names a broker certificate covers: every pod of the headless Service (and a wildcard over
    it, so a scale-up needs no new certificate), the headless Service's own name (it resolves to
    every pod: the one address a Node.js client should dial, docs/architecture.md) and the
    client Service; then, for every broker
    group a cluster may have, the names other groups dial it at (its pods through the wildcard
    over its headless Service, its client Service), so growing or draining groups never needs
    a new certificate."""
    peers = f"{peers_service_name(cluster)}.{namespace}.svc"
    client = f"{client_service_name(cluster)}.{namespace}.svc"
    names = [pod_host(cluster, namespace, i) for i in range(replicas)]
    names += [f"*.{peers}", f"*.{peers}.cluster.local", peers, f"{peers}.cluster.local"]
    names += [client, f"{client}.cluster.local"]
    names += [client_service_name(cluster), f"{client_service_name(cluster)}.{namespace}"]
    for group in range(1, BROKER_GROUPS_MAX):
        base = group_base(cluster, group)
        names += [f"*.{peers_service_name(base)}.{namespace}.svc"]
        names += [f"{client_service_name(base)}.{namespace}.svc"]
    return names


def certificates(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, *, replicas: int
) -> list[Manifest]:
    """cert-manager ``Certificate`` objects for the TLS settings that name an issuer. Peer
    certificates serve and dial (server and client auth); ``ca.crt`` in their Secret is the
    cluster CA that every peer checks the others against. Client certificates have client auth
    too: a member presents its own when it dials another group's mutual-TLS client port."""
    found: list[Manifest] = []
    both = ["server auth", "client auth", "digital signature", "key encipherment"]
    for tls, purpose, usages in (
        (spec.security.tls, "client", both),
        (
            spec.security.peer_tls,
            "peer",
            both,
        ),
    ):
        if not tls.enabled or tls.issuer is None:
            continue
        name = f"{cluster}-{purpose}-tls"
        found.append(
            {
                "apiVersion": CERT_MANAGER_API_VERSION,
                "kind": "Certificate",
                "metadata": _metadata(name, cluster, namespace, uid),
                "spec": {
                    "secretName": name,
                    "commonName": f"{cluster}-{purpose}",
                    "dnsNames": tls_dns_names(cluster, namespace, replicas),
                    "duration": "2160h",
                    "renewBefore": "360h",
                    "privateKey": {
                        "algorithm": "ECDSA",
                        "size": 256,
                        "encoding": "PKCS8",
                        "rotationPolicy": "Always",
                    },
                    "usages": usages,
                    "issuerRef": {
                        "name": tls.issuer.name,
                        "kind": tls.issuer.kind,
                        "group": tls.issuer.group,
                    },
                },
            }
        )
    return found


def external_objects(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, *, replicas: int
) -> list[Manifest]:
    """The address book ConfigMap and one Service per pod (:mod:`external_access`), for every
    pod up to ``replicas``; none without ``spec.external``."""
    if spec.external is None:
        return []
    internal = [pod_endpoint(cluster, namespace, i) for i in range(replicas)]
    book = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(
            external_access.book_config_map_name(cluster), cluster, namespace, uid
        ),
        "data": {external_access.BOOK_KEY: external_access.book_text(internal, spec)},
    }
    services = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(
                external_access.service_name(cluster, i), cluster, namespace, uid
            ),
            "spec": external_access.pod_service(cluster, i, spec),
        }
        for i in range(replicas)
    ]
    return [book, *services]


def build(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, *, replicas: int
) -> list[Manifest]:
    """Every object of the cluster, in apply order (Services, config and certificates before
    the pods)."""
    objects = [
        *certificates(cluster, namespace, uid, spec, replicas=replicas),
        peers_service(cluster, namespace, uid),
        peer_network_policy(cluster, namespace, uid, spec=spec),
        client_service(cluster, namespace, uid, spec),
        *external_objects(cluster, namespace, uid, spec, replicas=max(replicas, spec.replicas)),
        config_map(cluster, namespace, uid, spec, replicas=replicas),
        stateful_set(cluster, namespace, uid, spec, replicas=replicas),
        disruption_budget(cluster, namespace, uid, replicas=replicas),
    ]
    if spec.metrics_enabled and spec.service_monitor.enabled:
        objects.append(service_monitor(cluster, namespace, uid, spec))
    return objects
