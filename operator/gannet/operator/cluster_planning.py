"""Rolling restarts and revive-queue roll-out of a GannetCluster (pure; no IO).

Called by :mod:`gannet.operator.cluster_handling`, which gathers the inputs (StatefulSet, pods,
the leader's ``GetRaftStatus``, ``GetReviveQueues``) and carries out the step. Scaling is not
here: members are added and removed through the admin API, one change at a time
(:mod:`gannet.operator.membership_planning`).

Rolling. With ``updateStrategy: OnDelete`` nothing restarts by itself. One pass deletes at most
one outdated pod (its controller-revision-hash differs from the StatefulSet's update revision),
and only when every member is ready. Followers go first, highest ordinal first; the leader goes
last, after its leadership has been transferred away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gannet.operator import conditions
from gannet.operator.conditions import Condition


@dataclasses.dataclass(frozen=True, slots=True)
class PeerView:
    node_id: str
    reachable: bool
    lag_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class RaftView:
    """The leader's view of the group (from GetRaftStatus on the leader); ids are Raft node ids
    (the roster ConfigMap says which pod runs which, :mod:`gannet.operator.member_pods`)."""

    leader_id: str
    term: int
    peers: tuple[PeerView, ...]
    node_id: str = ""  # the member that answered
    leader_client_endpoint: str = ""  # host:port, as the leader advertises it


def ordinal(pod: str) -> int:
    """The StatefulSet ordinal at the end of a pod name; -1 when there is none."""
    _, _, tail = pod.rpartition("-")
    return int(tail) if tail.isdigit() else -1


@dataclasses.dataclass(frozen=True, slots=True)
class PodView:
    name: str
    revision: str  # metadata.labels["controller-revision-hash"]
    ready: bool
    terminating: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeadership:
    away_from: str


@dataclasses.dataclass(frozen=True, slots=True)
class DeletePod:
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    pass


RollStep = Wait | TransferLeadership | DeletePod | Done


def next_roll_step(
    pods: list[PodView], *, update_revision: str, replicas: int, leader_pod: str | None
) -> RollStep:
    """The one thing to do now to bring every pod to ``update_revision``."""
    outdated = [p for p in pods if p.revision != update_revision]
    if not outdated:
        return Done()
    if len(pods) < replicas:
        return Wait(f"{replicas - len(pods)} of {replicas} pods do not exist yet")
    unready = sorted(p.name for p in pods if not p.ready or p.terminating)
    if unready:
        return Wait(f"waiting for {', '.join(unready)} to be ready")
    outdated.sort(key=lambda p: (p.name == leader_pod, -ordinal(p.name)))
    victim = outdated[0]
    if victim.name == leader_pod and len(pods) > 1:
        return TransferLeadership(victim.name)
    return DeletePod(victim.name)


def roll_condition(step: RollStep) -> Condition:
    if isinstance(step, Done):
        return Condition("RollingUpdate", False, "UpToDate", "every pod runs the current template")
    if isinstance(step, Wait):
        return Condition("RollingUpdate", True, "Waiting", step.reason)
    if isinstance(step, TransferLeadership):
        return Condition(
            "RollingUpdate",
            True,
            "TransferringLeadership",
            f"moving leadership off {step.away_from}",
        )
    return Condition("RollingUpdate", True, "RestartingPod", f"restarting {step.name}")


@dataclasses.dataclass(frozen=True, slots=True)
class ReviveView:
    active_count: int
    draining: tuple[int, ...]


def revive_change(desired: int, observed: ReviveView | None) -> int | None:
    """The count to send with SetReviveQueueCount, or None when the brokers already use it."""
    if observed is not None and observed.active_count == desired:
        return None
    return desired


GROUP_WITHOUT_LEADER = "GroupWithoutLeader"


def ready_condition(
    *, desired: int, ready: int, groups: Sequence[Mapping[str, Any]] = ()
) -> Condition:
    """``Ready``: group 0's members are ready and, for a cluster of more than one broker group
    (``groups``: the ``status.brokerGroups`` rows), every group has a leader (a group without
    one answers none of its queues' requests); False names the groups without one."""
    if ready < desired:
        return Condition(conditions.READY, False, "MembersNotReady", f"{ready}/{desired} ready")
    unled = [row for row in groups if not row.get("leader")] if len(groups) > 1 else []
    if unled:
        names = ", ".join(f"{r.get('brokerName')} ({r.get('phase')})" for r in unled)
        return Condition(
            conditions.READY,
            False,
            GROUP_WITHOUT_LEADER,
            f"{ready}/{desired} ready; no leader in broker group {names}",
        )
    return Condition(conditions.READY, True, conditions.RECONCILED, f"{ready}/{desired} ready")
