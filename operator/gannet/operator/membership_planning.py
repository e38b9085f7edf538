"""Membership changes of a GannetCluster's Raft group: the next single step (pure; no IO).

Called by :mod:`gannet.operator.membership_handling`, which gathers the inputs (the roster from
the ``<cluster>-members`` ConfigMap, the pods and their claims, ``ListMembers`` from the leader)
and carries the step out. The roster (:class:`Roster`, stored by :mod:`gannet.operator.member_pods`)
is the operator's record of which pod runs which Raft node id; node ids are never reused and no
longer equal pod ordinals once a member has been replaced.

One change at a time. :func:`next_step` returns exactly one :data:`Step`. A new membership
change (:class:`AddLearner`, :class:`RemoveMember`) is only returned when the broker reports no
change in flight and no learner waits; :class:`Promote` only finishes the one learner there is.
Each call returns after the broker committed the change, and every step is planned from a fresh
``ListMembers``, so two changes never overlap.
The order of a pass:

1. no roster: :class:`Bootstrap` (a brand-new cluster: node ids 1..n, started with ``--peers``;
   a cluster made before rosters existed is adopted with its pods' ids, ordinal + 1);
2. no leader answers ``ListMembers``: :class:`Wait`;
3. bootstrap members not yet all voters: :class:`Wait`; then :class:`Seal` (every pod restarts
   with ``--join`` from then on, so a member whose disk is lost never bootstraps a second group);
4. a learner of ours: :class:`Promote` once it is reachable and caught up, else :class:`Wait`
   (the broker counts a waiting learner as a change in flight: this finishes that change);
5. another change in flight on the broker: :class:`Wait`;
6. a member being removed (``leaving``): :class:`RemoveMember` again (idempotent) until the
   broker no longer lists it, then :class:`DeletePod` (scale-down) or :class:`Reassign`
   (volume lost: a new node id for the same pod);
7. a pod still running a replaced node's arguments: :class:`RestartPod`;
8. a member whose volume was lost (its claim or, with ephemeral storage, its pod is not the one
   recorded): :class:`RemoveMember` with ``replace=True``;
9. a pod created to join whose node is not a member yet: :class:`AddLearner` once the pod runs
   (or :class:`DeletePod` when the last pod is no longer wanted and never joined);
10. fewer members than desired: :class:`CreatePod` (the next ordinal, a new node id, ``--join``);
    more: :class:`TransferLeadership` when the last pod's node leads, else
    :class:`RemoveMember`; equal: :class:`Done`.

Safety checks, refused with :class:`Blocked` (condition ``Scaling=False``): a removal needs every
remaining voter reachable and within ``max_lag_bytes`` of the leader (so the remaining group can
commit at once), which also keeps a reachable majority; a promotion needs a reachable majority of
the configuration it creates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

MAX_LAG_BYTES = 1 << 20  # "caught up": at most 1 MiB behind the leader's commit offset
DATA_ROOT = "/var/lib/gannet"

Mode = Literal["bootstrap", "join"]
Leaving = Literal["", "scale-down", "replace"]


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One pod's member: pod ``<cluster>-<ordinal>`` runs Raft node ``node_id``."""

    ordinal: int
    node_id: str
    mode: Mode  # how the pod starts: "bootstrap" (--peers of the first members) or "join"
    data_dir: str  # --data-dir (a subdirectory per node id; the volume root for adopted pods)
    leaving: Leaving = ""  # being removed from the group, and why
    volume: str = ""  # identity of the volume its data is on (claim uid, or pod uid when
    # ephemeral); "" until first seen
    stale_pod: str = ""  # uid of a pod still running an older node's arguments


@dataclasses.dataclass(frozen=True, slots=True)
class Roster:
    records: tuple[Record, ...]  # ordinals 0..n-1, in order
    next_node_id: int  # ids are never reused
    sealed: bool = False  # bootstrap over: every pod starts with --join

    def by_node(self, node_id: str) -> Record | None:
        return next((r for r in self.records if r.node_id == node_id), None)


@dataclasses.dataclass(frozen=True, slots=True)
class PodState:
    ordinal: int
    uid: str
    up: bool  # running, not terminating
    volume: str  # identity of its data volume now ("" unknown)
    volume_lost: bool = False  # the claim's phase is Lost


@dataclasses.dataclass(frozen=True, slots=True)
class MemberState:
    """One member as the leader's ``ListMembers`` reports it."""

    node_id: str
    voter: bool
    lag_bytes: int  # -1 unknown
    reachable: bool
    leader: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    members: tuple[MemberState, ...]
    leader_id: str
    change_in_flight: bool = False

    def member(self, node_id: str) -> MemberState | None:
        return next((m for m in self.members if m.node_id == node_id), None)

    @property
    def voters(self) -> tuple[MemberState, ...]:
        return tuple(m for m in self.members if m.voter)


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    desired: int
    roster: Roster | None
    pods: tuple[PodState, ...]
    group: Group | None  # None: no leader answers ListMembers
    current_replicas: int | None = None  # the StatefulSet's, when it exists (adoption)
    max_lag_bytes: int = MAX_LAG_BYTES

    def pod(self, ordinal: int) -> PodState | None:
        return next((p for p in self.pods if p.ordinal == ordinal), None)


# ---------------------------------------------------------------------------------------- steps
@dataclasses.dataclass(frozen=True, slots=True)
class Bootstrap:
    roster: Roster
    adopted: bool  # pods made before rosters: their ids are ordinal + 1


@dataclasses.dataclass(frozen=True, slots=True)
class Seal:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class CreatePod:
    record: Record


@dataclasses.dataclass(frozen=True, slots=True)
class AddLearner:
    record: Record


@dataclasses.dataclass(frozen=True, slots=True)
class Promote:
    record: Record


@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeadership:
    away_from: Record


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveMember:
    record: Record
    replace: bool  # True: its volume was lost (it comes back under a new id)


@dataclasses.dataclass(frozen=True, slots=True)
class DeletePod:
    record: Record  # the last pod; its claim goes too with deleteClaim


@dataclasses.dataclass(frozen=True, slots=True)
class Reassign:
    record: Record  # the new record (new node id) for the same pod


@dataclasses.dataclass(frozen=True, slots=True)
class RestartPod:
    record: Record
    pod_uid: str


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Blocked:
    reason: str  # a refused change: why and what to do


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    pass


Step = (
    Bootstrap
    | Seal
    | CreatePod
    | AddLearner
    | Promote
    | TransferLeadership
    | RemoveMember
    | DeletePod
    | Reassign
    | RestartPod
    | Wait
    | Blocked
    | Done
)
MEMBERSHIP_CHANGES = (AddLearner, Promote, RemoveMember)


def node_data_dir(node_id: str) -> str:
    return f"{DATA_ROOT}/node-{node_id}"


def bootstrap_roster(replicas: int) -> Roster:
    records = tuple(
        Record(i, str(i + 1), "bootstrap", node_data_dir(str(i + 1))) for i in range(replicas)
    )
    return Roster(records, next_node_id=replicas + 1)


def adopted_roster(replicas: int) -> Roster:
    """The roster of pods started before rosters existed: node ``ordinal + 1``, data at the
    volume root, already a group (sealed at once would be wrong: they still run ``--peers``)."""
    records = tuple(Record(i, str(i + 1), "bootstrap", DATA_ROOT) for i in range(replicas))
    return Roster(records, next_node_id=replicas + 1)


def majority(voters: int) -> int:
    return voters // 2 + 1


def _lag_text(member: MemberState) -> str:
    if not member.reachable:
        return "unreachable"
    if member.lag_bytes < 0:
        return "lag unknown"
    return f"{member.lag_bytes:,} bytes behind"


def _name(record: Record) -> str:
    return f"pod {record.ordinal} (node {record.node_id})"


def next_step(observed: Observed) -> Step:
    """The one thing to do now to bring the group to ``observed.desired`` members."""
    roster = observed.roster
    if roster is None:
        if observed.current_replicas:
            return Bootstrap(adopted_roster(observed.current_replicas), adopted=True)
        return Bootstrap(bootstrap_roster(observed.desired), adopted=False)
    group = observed.group
    if group is None or not group.leader_id:
        return Wait("no leader answers ListMembers")
    if not roster.sealed:
        forming = [
            r for r in roster.records if r.mode == "bootstrap" and not _is_voter(group, r.node_id)
        ]
        if forming:
            names = ", ".join(_name(r) for r in forming)
            return Wait(f"the group is forming: {names} not a voter yet")
        return Seal()
    # A learner of ours is the second half of a change already begun: finish it first.
    step = _promote(observed, roster, group)
    if step is not None:
        return step
    if group.change_in_flight:
        return Wait("the broker reports a membership change in flight")
    step = _finish_leaving(observed, roster, group)
    if step is not None:
        return step
    for record in roster.records:
        pod = observed.pod(record.ordinal)
        if record.stale_pod and pod is not None and pod.uid == record.stale_pod:
            return RestartPod(record, pod.uid)
    step = _replace_lost(observed, roster, group)
    if step is not None:
        return step
    for record in roster.records:
        if group.member(record.node_id) is not None:
            continue
        if record.ordinal == len(roster.records) - 1 and record.ordinal >= observed.desired:
            return DeletePod(record)  # never added and no longer wanted (a scale-up undone)
        pod = observed.pod(record.ordinal)
        if pod is None or not pod.up or pod.uid == record.stale_pod:
            return Wait(f"waiting for pod {record.ordinal} to run (node {record.node_id} joins)")
        return AddLearner(record)
    return _scale(observed, roster, group)


def _is_voter(group: Group, node_id: str) -> bool:
    member = group.member(node_id)
    return member is not None and member.voter


def _finish_leaving(observed: Observed, roster: Roster, group: Group) -> Step | None:
    for record in roster.records:
        if not record.leaving:
            continue
        if group.member(record.node_id) is not None:
            refusal = _removal_refusal(observed, group, record)
            if refusal is not None:
                return Blocked(refusal)
            if group.leader_id == record.node_id:
                return TransferLeadership(record)
            return RemoveMember(record, replace=record.leaving == "replace")
        if record.leaving == "replace":
            pod = observed.pod(record.ordinal)
            new = dataclasses.replace(
                record,
                node_id=str(roster.next_node_id),
                mode="join",
                data_dir=node_data_dir(str(roster.next_node_id)),
                leaving="",
                volume="",
                stale_pod="" if pod is None else pod.uid,
            )
            return Reassign(new)
        if record.ordinal != len(roster.records) - 1:
            return Wait(f"{_name(record)} is removed; waiting for the pods after it")
        return DeletePod(record)
    return None


def _removal_refusal(observed: Observed, group: Group, record: Record) -> str | None:
    remaining = [m for m in group.voters if m.node_id != record.node_id]
    behind = [
        m
        for m in remaining
        if not m.leader
        and (not m.reachable or m.lag_bytes < 0 or m.lag_bytes > observed.max_lag_bytes)
    ]
    if not remaining:
        return f"removing {_name(record)} would leave no voter"
    if behind:
        names = ", ".join(f"node {m.node_id} {_lag_text(m)}" for m in behind)
        return (
            f"removing {_name(record)} needs every remaining voter caught up: {names}; "
            "wait for them to catch up or bring them back"
        )
    reachable = sum(1 for m in remaining if m.reachable or m.leader)
    if reachable < majority(len(remaining)):
        return (
            f"removing {_name(record)} would leave {reachable} of {len(remaining)} voters "
            "reachable; bring a member back first"
        )
    return None


def _promote(observed: Observed, roster: Roster, group: Group) -> Step | None:
    for member in group.members:
        if member.voter:
            continue
        record = roster.by_node(member.node_id)
        if record is None or record.leaving:
            continue
        if not member.reachable or member.lag_bytes < 0:
            return Wait(f"learner {_name(record)} is {_lag_text(member)}")
        if member.lag_bytes > observed.max_lag_bytes:
            return Wait(f"learner {_name(record)} is catching up: {_lag_text(member)}")
        voters = group.voters
        reachable = sum(1 for m in voters if m.reachable or m.leader) + 1
        if reachable < majority(len(voters) + 1):
            return Blocked(
                f"promoting {_name(record)} would leave {reachable} of {len(voters) + 1} voters "
                "reachable; bring a member back first"
            )
        return Promote(record)
    return None


def _volume_lost(record: Record, pod: PodState | None) -> bool:
    if pod is None or record.leaving:
        return False
    if pod.volume_lost:
        return True
    return bool(record.volume and pod.volume and record.volume != pod.volume)


def _replace_lost(observed: Observed, roster: Roster, group: Group) -> Step | None:
    for record in roster.records:
        if not _volume_lost(record, observed.pod(record.ordinal)):
            continue
        if group.member(record.node_id) is None:
            continue  # never added: its new volume is simply adopted
        refusal = _removal_refusal(observed, group, record)
        if refusal is not None:
            return Blocked(f"the volume of {_name(record)} was lost; {refusal}")
        if group.leader_id == record.node_id:
            return TransferLeadership(record)
        return RemoveMember(dataclasses.replace(record, leaving="replace"), replace=True)
    return None


def _scale(observed: Observed, roster: Roster, group: Group) -> Step:
    count = len(roster.records)
    if observed.desired > count:
        node = str(roster.next_node_id)
        return CreatePod(Record(count, node, "join", node_data_dir(node)))
    if observed.desired == count:
        return Done()
    victim = roster.records[-1]
    refusal = _removal_refusal(observed, group, victim)
    if refusal is not None:
        return Blocked(f"scale-down from {count} to {observed.desired} refused: {refusal}")
    if group.leader_id == victim.node_id:
        return TransferLeadership(victim)
    return RemoveMember(dataclasses.replace(victim, leaving="scale-down"), replace=False)


# ------------------------------------------------------------------------- roster bookkeeping
def with_volumes(roster: Roster, pods: Sequence[PodState]) -> Roster:
    """Records whose volume is not known yet take the one their pod runs on now."""
    by_ordinal = {p.ordinal: p for p in pods}
    records = []
    for found in roster.records:
        record, pod = found, by_ordinal.get(found.ordinal)
        if (
            not record.volume
            and not record.leaving
            and pod is not None
            and pod.up
            and pod.volume
            and pod.uid != record.stale_pod
        ):
            record = dataclasses.replace(record, volume=pod.volume, stale_pod="")
        records.append(record)
    return dataclasses.replace(roster, records=tuple(records))


def apply(roster: Roster, step: Step) -> Roster:
    """The roster to store before the step's broker or Kubernetes call is made."""
    if isinstance(step, Bootstrap):
        return step.roster
    if isinstance(step, Seal):
        records = tuple(dataclasses.replace(r, mode="join") for r in roster.records)
        return dataclasses.replace(roster, records=records, sealed=True)
    if isinstance(step, CreatePod):
        return Roster(
            (*roster.records, step.record),
            next_node_id=max(roster.next_node_id, int(step.record.node_id) + 1),
            sealed=roster.sealed,
        )
    if isinstance(step, RemoveMember):
        return _put(roster, step.record)
    if isinstance(step, DeletePod):
        return dataclasses.replace(
            roster, records=tuple(r for r in roster.records if r.ordinal != step.record.ordinal)
        )
    if isinstance(step, Reassign):
        updated = _put(roster, step.record)
        return dataclasses.replace(
            updated, next_node_id=max(roster.next_node_id, int(step.record.node_id) + 1)
        )
    if isinstance(step, RestartPod):
        return roster  # the stale uid stays until a new pod runs (with_volumes ignores it)
    return roster


def _put(roster: Roster, record: Record) -> Roster:
    records = tuple(record if r.ordinal == record.ordinal else r for r in roster.records)
    return dataclasses.replace(roster, records=records)
