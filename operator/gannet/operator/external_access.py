"""Access from outside the Kubernetes cluster (``spec.external``; pure, no IO).

As Strimzi's external listeners: one Service per pod, ``<cluster>-<i>-external`` (type NodePort
or LoadBalancer, selecting the pod by ``statefulset.kubernetes.io/pod-name``), and an address
book, the ConfigMap ``<cluster>-external`` (key :data:`BOOK_KEY`, mounted at
:data:`BOOK_DIR`, passed as ``--external-addresses``), naming for every pod's internal client
endpoint (``<pod>.<cluster>-peers.<ns>.svc:8081``, as the Raft members name each other) the
address a client outside reaches it at: ``advertised host : client port`` and, with remoting,
``advertised host : remoting port``. NodePort: pod ``i``'s ports are ``nodePorts.client + i``
and ``nodePorts.remoting + i``; LoadBalancer: the Service ports, 8081 and
:data:`~gannet.operator.resources.EXTERNAL_REMOTING_PORT`, at ``advertisedHosts[i]``.

The book covers every pod up to ``replicas``; it is not hashed into the pod template (the
brokers re-read it), so a change (a pod added) restarts nothing. The book's format is the
broker's (``gannet.node.api.external_routes``; the operator may not import it, and
``tests/operator/test_external_access.py`` checks the broker reads what is written here).
"""

from __future__ import annotations

import json
from typing import Any

from gannet.operator.resources import CLIENT_PORT, EXTERNAL_REMOTING_PORT
from gannet.operator.specs import ClusterSpec, ExternalSpec

BOOK_DIR = "/etc/gannet/external"
BOOK_KEY = "addresses.json"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"

Manifest = dict[str, Any]


def service_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}-external"


def book_config_map_name(cluster: str) -> str:
    return f"{cluster}-external"


def client_address(external: ExternalSpec, ordinal: int) -> tuple[str, int]:
    """Where a client outside reaches pod ``ordinal``'s client (gRPC) port."""
    port = CLIENT_PORT if external.client_node_port is None else external.client_node_port + ordinal
    return external.advertised_host(ordinal), port


def remoting_address(external: ExternalSpec, ordinal: int) -> tuple[str, int]:
    """Where a client outside reaches pod ``ordinal``'s external remoting listener."""
    port = (
        EXTERNAL_REMOTING_PORT
        if external.remoting_node_port is None
        else external.remoting_node_port + ordinal
    )
    return external.advertised_host(ordinal), port


def _text(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def book_text(internal_endpoints: list[str], spec: ClusterSpec) -> str:
    """The book of the pods whose internal client endpoints are ``internal_endpoints`` (by
    ordinal), as ``gannet.node.api.external_routes.parse`` reads it."""
    external = spec.external
    assert external is not None
    out: dict[str, dict[str, str]] = {}
    for ordinal, internal in enumerate(internal_endpoints):
        entry = {"client": _text(*client_address(external, ordinal))}
        if spec.remoting:
            entry["remoting"] = _text(*remoting_address(external, ordinal))
        out[internal] = entry
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


def pod_service(cluster: str, ordinal: int, spec: ClusterSpec) -> dict[str, Any]:
    """The ``spec`` of pod ``ordinal``'s external Service (metadata is the caller's)."""
    external = spec.external
    assert external is not None
    ports: list[dict[str, Any]] = [
        {"name": "client", "port": CLIENT_PORT, "targetPort": "client", "protocol": "TCP"}
    ]
    if spec.remoting:
        ports.append(
            {
                "name": "remoting",
                "port": EXTERNAL_REMOTING_PORT,
                "targetPort": "ext-remoting",
                "protocol": "TCP",
            }
        )
    if external.type == "NodePort":
        ports[0]["nodePort"] = client_address(external, ordinal)[1]
        if spec.remoting:
            ports[1]["nodePort"] = remoting_address(external, ordinal)[1]
    return {
        "type": external.type,
        "selector": {POD_NAME_LABEL: f"{cluster}-{ordinal}"},
        "ports": ports,
    }
