"""The cluster key and cluster CA of a GannetCluster's brokers: what lets broker groups poll
each other when ``spec.security.auth`` or ``tls`` is on (docs/security.md, Broker groups).

With auth on, the operator creates the Secret ``<cluster>-cluster-key`` once (owned by the
GannetCluster, never rotated by the operator): ``accessKey``, ``secretKey`` and
:data:`ACCOUNTS_FILE`, a credentials file granting that key ``admin``. Every member's auth
directory is a projected volume of the user's credentials Secret plus that one file, and the
member signs its polls of the other groups with the key (env ``GANNET_CLUSTER_ACCESS_KEY`` /
``GANNET_CLUSTER_SECRET_KEY`` from the Secret). With TLS on, ``ca.crt`` of the client TLS
Secret is the cluster CA (``GANNET_CLUSTER_TLS_CA``). Pure: :mod:`gannet.operator.manifests`
puts these into the pod template, :mod:`gannet.operator.cluster_handling` creates the Secret.
"""

from __future__ import annotations

import json
from typing import Any

from gannet.operator.specs import ClusterSpec

ACCESS_KEY = "gannet-cluster-key"
"""Access key of every cluster key (one per namespace-scoped Secret, so no clash)."""
ACCOUNTS_FILE = "gannet-cluster-key.json"
"""Key of the Secret projected into the auth directory; a user Secret must not use it."""
ACCESS_KEY_ENV = "GANNET_CLUSTER_ACCESS_KEY"
SECRET_KEY_ENV = "GANNET_CLUSTER_SECRET_KEY"
TLS_CA_ENV = "GANNET_CLUSTER_TLS_CA"


def secret_name(cluster: str) -> str:
    return f"{cluster}-cluster-key"


def needed(spec: ClusterSpec) -> bool:
    """Whether the cluster has a cluster key: with auth on, whatever ``brokerGroups`` is, so
    that growing or draining groups never changes the pod template."""
    return spec.security.auth.enabled


def secret_data(secret_key: str) -> dict[str, str]:
    """``stringData`` of the cluster key Secret: the key and its credentials file (admin)."""
    accounts = {
        "accounts": [
            {
                "access_key": ACCESS_KEY,
                "secret_key": secret_key,
                "allow": [{"actions": ["admin"], "topics": ["*"], "groups": ["*"]}],
            }
        ]
    }
    return {
        "accessKey": ACCESS_KEY,
        "secretKey": secret_key,
        ACCOUNTS_FILE: json.dumps(accounts, sort_keys=True),
    }


def env(cluster: str, spec: ClusterSpec, tls_ca_path: str) -> list[dict[str, Any]]:
    """Environment of every member: the cluster key from its Secret, the cluster CA path."""
    found: list[dict[str, Any]] = []
    if needed(spec):
        for name, key in ((ACCESS_KEY_ENV, "accessKey"), (SECRET_KEY_ENV, "secretKey")):
            ref = {"secretKeyRef": {"name": secret_name(cluster), "key": key}}
            found.append({"name": name, "valueFrom": ref})
    if spec.security.tls.enabled:
        found.append({"name": TLS_CA_ENV, "value": tls_ca_path})
    return found


def auth_volume(cluster: str, credentials: str, mode: int) -> dict[str, Any]:
    """The auth directory: every key of the user's credentials Secret and the cluster key's
    credentials file, one projected volume (the broker reads every ``*.json``/``*.yaml``)."""
    item = {"key": ACCOUNTS_FILE, "path": ACCOUNTS_FILE}
    return {
        "name": "auth",
        "projected": {
            "defaultMode": mode,
            "sources": [
                {"secret": {"name": credentials}},
                {"secret": {"name": secret_name(cluster), "items": [item]}},
            ],
        },
    }
