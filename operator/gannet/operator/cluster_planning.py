"""Scaling, rolling restarts and revive-queue roll-out of a GannetCluster (pure; no IO).

Called by the GannetCluster handlers in :mod:`gannet.operator.handlers`, which gather the inputs
(StatefulSet, pods, the leader's ``GetRaftStatus``, ``GetReviveQueues``) and carry out the step.

Scaling. The StatefulSet is one Raft group whose members are named in every pod's ``--peers``.
Scale-up is always accepted: the new members start empty and catch up from the leader.
Scale-down removes the highest ordinals and is accepted only when it cannot lose committed data
or quorum: the leader answers, every member is reachable and fully caught up
(``lag_bytes == 0``), and the leader is not among the removed members (if it is, leadership is
transferred to a remaining member first, and the scale-down waits for the next pass). While it
is refused, the StatefulSet keeps its size and condition ``Scaling=False
reason=ScaleDownBlocked`` says why.

Rolling. With ``updateStrategy: OnDelete`` nothing restarts by itself. One pass deletes at most
one outdated pod (its controller-revision-hash differs from the StatefulSet's update revision),
and only when every member is ready. Followers go first, highest ordinal first; the leader goes
last, after its leadership has been transferred away.
"""

from __future__ import annotations

import dataclasses

from gannet.operator import conditions
from gannet.operator.conditions import Condition

SCALING = "Scaling"
SCALE_DOWN_BLOCKED = "ScaleDownBlocked"


@dataclasses.dataclass(frozen=True, slots=True)
class PeerView:
    node_id: str
    reachable: bool
    lag_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class RaftView:
    """The leader's view of the group (from GetRaftStatus on the leader); ids are Raft node ids
    ("1", "2", ...: pod ordinal + 1)."""

    leader_id: str
    term: int
    peers: tuple[PeerView, ...]
    node_id: str = ""  # the member that answered


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaDecision:
    replicas: int  # what the StatefulSet gets now
    condition: Condition
    transfer_away_from: str | None = None  # the leader's pod, to move leadership off first


def ordinal(pod: str) -> int:
    """The StatefulSet ordinal at the end of a pod name; -1 when there is none."""
    _, _, tail = pod.rpartition("-")
    return int(tail) if tail.isdigit() else -1


def node_id(pod_ordinal: int) -> str:
    """Raft node ids are 1-based integers: pod ``<cluster>-<i>`` runs node ``i + 1``."""
    return str(pod_ordinal + 1)


def node_ordinal(node: str) -> int:
    """The pod ordinal of Raft node ``node`` ("3" runs in pod ``<cluster>-2``); -1 if unknown."""
    return int(node) - 1 if node.isdigit() and int(node) >= 1 else -1


def pod_of_node(cluster: str, node: str) -> str:
    return f"{cluster}-{node_ordinal(node)}" if node_ordinal(node) >= 0 else f"node {node}"


def decide_replicas(
    *, desired: int, current: int | None, raft: RaftView | None, cluster: str
) -> ReplicaDecision:
    if current is None or desired >= current:
        message = (
            f"{desired} members"
            if current in (None, desired)
            else (f"scaling up from {current} to {desired} members")
        )
        return ReplicaDecision(desired, Condition(SCALING, True, "AtDesiredSize", message))

    def blocked(why: str) -> ReplicaDecision:
        return ReplicaDecision(
            current,
            Condition(
                SCALING,
                False,
                SCALE_DOWN_BLOCKED,
                f"scale-down from {current} to {desired} refused: {why}",
            ),
        )

    if raft is None or not raft.leader_id:
        return blocked("no leader answers GetRaftStatus")
    lagging = [
        pod_of_node(cluster, p.node_id)
        for p in raft.peers
        if p.node_id != raft.leader_id and (not p.reachable or p.lag_bytes != 0)
    ]
    if lagging:
        return blocked(f"members not caught up: {', '.join(sorted(lagging))}")
    if node_ordinal(raft.leader_id) >= desired:
        leader = pod_of_node(cluster, raft.leader_id)
        decision = blocked(f"leader {leader} is being removed; transferring leadership")
        return dataclasses.replace(decision, transfer_away_from=leader)
    return ReplicaDecision(
        desired,
        Condition(SCALING, True, "ScalingDown", f"scaling down from {current} to {desired}"),
    )


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


def ready_condition(*, desired: int, ready: int) -> Condition:
    if ready >= desired:
        return Condition(conditions.READY, True, conditions.RECONCILED, f"{ready}/{desired} ready")
    return Condition(conditions.READY, False, "MembersNotReady", f"{ready}/{desired} ready")
