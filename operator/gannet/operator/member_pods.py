"""The roster ConfigMap: which pod runs which Raft node id, and how each pod starts (pure).

Written by :mod:`gannet.operator.membership_handling`, read by every broker pod at start. Node
ids no longer equal pod ordinals once a member was replaced, and the StatefulSet's pod template
is shared by all pods, so the per-pod part of the command line lives here:

- ConfigMap ``<cluster>-members`` (owned by the GannetCluster), mounted read-only at
  :data:`~gannet.operator.manifests.MEMBERS_DIR` in every broker pod;
- key ``roster.json``: the operator's record (:class:`~gannet.operator.membership_planning.Roster`:
  ``nextNodeId``, ``sealed`` and per pod its ordinal, node id, start mode, data directory, the
  removal in progress, the identity of its volume and a stale pod uid);
- key ``<cluster>-<ordinal>`` (the pod name): that pod's arguments, e.g.
  ``--node-id 4 --data-dir /var/lib/gannet/node-4 --join`` or, for the first members of a
  brand-new group, ``--node-id 1 --data-dir /var/lib/gannet/node-1 --peers 1=...,2=...,3=...``.

The entrypoint (:data:`~gannet.operator.manifests.BROKER_COMMAND`) waits for its key, then runs
``gannet broker run $(cat /etc/gannet/members/$POD_NAME) <common arguments>``. The operator
writes a pod's key before it raises the StatefulSet's replicas (and before it deletes a pod
whose node id changed), so a pod always starts with the id the roster gives it. A running pod
never re-reads the file: changing the roster restarts nothing. Values contain only characters
the shell does not expand (digits, letters, ``=,.:/-``), so the unquoted ``$(cat ...)`` splits
into exactly the arguments written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gannet.operator import manifests
from gannet.operator.membership_planning import Record, Roster
from gannet.operator.resources import CLIENT_PORT, PEER_PORT

ROSTER_KEY = "roster.json"
_SAFE = re.compile(r"^[A-Za-z0-9=,.:/ -]*$")


class RosterError(ValueError):
    """The roster ConfigMap cannot be read (edited by hand?)."""


def config_map_name(cluster: str) -> str:
    return f"{cluster}-members"


def peer_address(cluster: str, namespace: str, ordinal: int) -> str:
    return f"{manifests.pod_host(cluster, namespace, ordinal)}:{PEER_PORT}"


def client_address(cluster: str, namespace: str, ordinal: int) -> str:
    return f"{manifests.pod_host(cluster, namespace, ordinal)}:{CLIENT_PORT}"


def bootstrap_peers(cluster: str, namespace: str, roster: Roster) -> str:
    """``--peers`` of a brand-new group: its bootstrap members, ``id=host:peer/client``."""
    return ",".join(
        f"{r.node_id}={manifests.pod_host(cluster, namespace, r.ordinal)}:{PEER_PORT}/{CLIENT_PORT}"
        for r in roster.records
        if r.mode == "bootstrap"
    )


def pod_args(cluster: str, namespace: str, roster: Roster, record: Record) -> str:
    args = ["--node-id", record.node_id, "--data-dir", record.data_dir]
    if record.mode == "bootstrap":
        args += ["--peers", bootstrap_peers(cluster, namespace, roster)]
    else:
        own = f"{record.node_id}={peer_address(cluster, namespace, record.ordinal)}/{CLIENT_PORT}"
        args += ["--join", "--peers", own]
    line = " ".join(args)
    if not _SAFE.match(line):
        raise RosterError(f"pod arguments {line!r} hold characters the shell would expand")
    return line


def encode(roster: Roster) -> dict[str, Any]:
    return {
        "version": 1,
        "nextNodeId": roster.next_node_id,
        "sealed": roster.sealed,
        "members": [
            {
                "ordinal": r.ordinal,
                "nodeId": r.node_id,
                "mode": r.mode,
                "dataDir": r.data_dir,
                "leaving": r.leaving,
                "volume": r.volume,
                "stalePod": r.stale_pod,
            }
            for r in roster.records
        ],
    }


def decode(data: Mapping[str, str] | None) -> Roster | None:
    """The roster in a ConfigMap's data; None when there is none yet."""
    text = (data or {}).get(ROSTER_KEY)
    if not text:
        return None
    where = f"{ROSTER_KEY} of the members ConfigMap"
    try:
        doc = json.loads(text)
        records = tuple(
            Record(
                ordinal=int(m["ordinal"]),
                node_id=str(m["nodeId"]),
                mode=m["mode"],
                data_dir=str(m["dataDir"]),
                leaving=m.get("leaving") or "",
                volume=str(m.get("volume") or ""),
                stale_pod=str(m.get("stalePod") or ""),
            )
            for m in doc["members"]
        )
        roster = Roster(records, int(doc["nextNodeId"]), bool(doc.get("sealed")))
    except (ValueError, KeyError, TypeError) as exc:
        raise RosterError(f"{where} is malformed ({exc}); restore it from status.members") from None
    if [r.ordinal for r in records] != list(range(len(records))):
        raise RosterError(f"{where}: ordinals are not 0..{len(records) - 1}")
    for r in records:
        if not r.node_id.isdigit() or r.mode not in ("bootstrap", "join"):
            raise RosterError(f"{where}: bad member {r}")
    return roster


def config_map(
    cluster: str,
    namespace: str,
    uid: str,
    roster: Roster,
    *,
    owner: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """The roster ConfigMap of the group whose base name is ``cluster``; ``owner`` is the
    GannetCluster's name and the group number for groups other than 0."""
    data = {ROSTER_KEY: json.dumps(encode(roster), sort_keys=True)}
    for record in roster.records:
        data[manifests.pod_name(cluster, record.ordinal)] = pod_args(
            cluster, namespace, roster, record
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": manifests.owned_metadata(
            config_map_name(cluster), cluster, namespace, uid, *(owner or (None, 0))
        ),
        "data": data,
    }


def ordinal_of(roster: Roster | None, node_id: str) -> int:
    """The pod ordinal running ``node_id``; without a roster the old rule (id - 1); -1 unknown."""
    if roster is None:
        return int(node_id) - 1 if node_id.isdigit() and int(node_id) >= 1 else -1
    record = roster.by_node(node_id)
    return -1 if record is None else record.ordinal


def pod_of_node(cluster: str, roster: Roster | None, node_id: str) -> str:
    ordinal = ordinal_of(roster, node_id)
    return manifests.pod_name(cluster, ordinal) if ordinal >= 0 else f"node {node_id}"


def ordinal_of_endpoint(cluster: str, endpoint: str) -> int:
    """The pod ordinal of an advertised ``<cluster>-<i>.<cluster>-peers...:port``; -1 if not."""
    host = endpoint.rpartition(":")[0] or endpoint
    prefix, _, tail = host.split(".")[0].rpartition("-")
    return int(tail) if prefix == cluster and tail.isdigit() else -1
