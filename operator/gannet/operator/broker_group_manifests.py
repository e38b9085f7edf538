"""Kubernetes objects of the broker groups beyond group 0 (pure; no IO).

A GannetCluster of ``spec.brokerGroups`` G runs G broker groups; group 0's objects keep the
names a one-group cluster always had (:func:`gannet.operator.manifests.build`), group g >= 1's
are named ``<cluster>-g<g>...`` (:func:`~gannet.operator.manifests.group_base`). This module
builds what only the groups have: the seeds ConfigMap each member reads ``--cluster-seeds``
from, a group's objects, their keys for deleting a drained group, and the owner check that
keeps the operator off another cluster's objects. Called by
:mod:`gannet.operator.broker_group_handling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gannet.operator.manifests import (
    Manifest,
    broker_name,
    client_endpoint,
    client_service,
    client_service_name,
    disruption_budget,
    group_base,
    groups_config_map_name,
    owned_metadata,
    peer_network_policy,
    peers_service,
    peers_service_name,
    stateful_set,
)
from gannet.operator.specs import ClusterSpec


def group_seeds(cluster: str, namespace: str, groups: int, group: int) -> list[str]:
    """Client endpoints (the per-group client Services) of every group but ``group``."""
    return [client_endpoint(group_base(cluster, g), namespace) for g in range(groups) if g != group]


def groups_config_map(
    cluster: str, namespace: str, uid: str, groups: int, *, serving: int | None = None
) -> Manifest:
    """Seeds per group: each group of ``range(groups)`` points at the others, and only at the
    first ``serving`` groups (a draining group is still told about the others, the others are
    no longer told about it)."""
    live = groups if serving is None else serving
    data = {
        broker_name(g): ",".join(
            client_endpoint(group_base(cluster, i), namespace) for i in range(live) if i != g
        )
        for g in range(groups)
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(groups_config_map_name(cluster), cluster, namespace, uid),
        "data": data,
    }


def group_objects(
    cluster: str, namespace: str, uid: str, spec: ClusterSpec, *, group: int, replicas: int
) -> list[Manifest]:
    """The objects of broker group ``group`` >= 1 (group 0's are in :func:`build`): headless
    and client Services, NetworkPolicy, StatefulSet and PodDisruptionBudget, all named
    ``<cluster>-g<group>...`` and owned by the GannetCluster."""
    return [
        peers_service(cluster, namespace, uid, group),
        peer_network_policy(cluster, namespace, uid, group, spec),
        client_service(cluster, namespace, uid, spec, group),
        stateful_set(cluster, namespace, uid, spec, replicas=replicas, group=group),
        disruption_budget(cluster, namespace, uid, replicas=replicas, group=group),
    ]


def foreign_owner(obj: Mapping[str, Any] | None, uid: str) -> str | None:
    """The controlling owner of ``obj`` when it is not the GannetCluster ``uid`` (another
    cluster's object under a group's name: ``<a>-g1`` of cluster ``a`` vs a cluster named
    ``a-g1``); None when ``obj`` is absent or ours."""
    if obj is None:
        return None
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return None if ref.get("uid") == uid else f"{ref.get('kind')} {ref.get('name')}"
    return "no controlling owner"


def group_object_keys(cluster: str, group: int) -> list[tuple[str, str, str]]:
    """``(apiVersion, kind, name)`` of what :func:`group_objects` makes, for deleting a drained
    group (the roster ConfigMap too; claims are kept, see docs/operator.md)."""
    base = group_base(cluster, group)
    return [
        ("policy/v1", "PodDisruptionBudget", base),
        ("apps/v1", "StatefulSet", base),
        ("v1", "Service", client_service_name(base)),
        ("v1", "Service", peers_service_name(base)),
        ("networking.k8s.io/v1", "NetworkPolicy", f"{base}-peers"),
        ("v1", "ConfigMap", f"{base}-members"),
    ]
