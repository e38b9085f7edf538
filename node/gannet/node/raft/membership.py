"""Group membership of the Raft core: who votes, who only learns, and how that changes.

Used by ``core.RaftCore`` (which owns one :class:`MembershipLog`), by the replication driver
(which encodes configuration records and persists :meth:`MembershipLog.entries`) and by the
simulator. Pure: no IO.

**Design: single-server changes, not joint consensus.** Every configuration entry differs from
the one before it by at most one voter (a voter added — usually a caught-up learner promoted —
or removed); learners may be added or dropped freely because they never count. Any majority of
the old voter set and any majority of the new one then share a node, so two leaders cannot be
elected in one term by the two configurations (Ongaro, *Consensus: Bridging Theory and
Practice*, §4.1). We chose it over joint consensus because it needs no second kind of quorum,
no two-phase entry and no "joint" state to persist and reset, it is what etcd's ``ConfChange``
(v1), Consul and NATS do, and Gannet only ever adds or removes one broker at a time anyway
(the operator scales one pod at a time). The known flaw of single-server changes (a change
made by a leader that has not yet committed anything in its term can be lost, and a second
change can then form a disjoint majority, raft-dev 2015 "bug in single-server membership
changes") is closed by the rule that also appears in the dissertation's errata: **a leader
proposes a configuration entry only after it committed an entry of its own term** (the no-op
it appends on election) **and only when the previous configuration entry is committed** (one
change at a time).

Rules the core follows:

* A configuration takes effect on every node as soon as its entry is in the node's log,
  committed or not (the latest entry in the log is in force); cutting the entry off (a
  divergent suffix) falls back to the entry before it.
* Only voters campaign, with one exception the simulation found necessary for liveness (and
  Ongaro's §4.2.2 prescribes): a node removed from the voters by an entry not yet known to be
  committed still campaigns — without counting its own vote — because it may hold entries the
  remaining voters lack (a leader that removed itself and crashed before the removal
  committed). Joining nodes and learners never campaign, but their lease on a leader ends like
  anyone's, so they grant votes to a candidate whose configuration already promoted them. A
  leader outside its configuration does not count itself in majorities and steps down once
  the entry removing it commits, handing over with ``TimeoutNow`` to the most caught-up voter.
* Each entry carries the whole membership (voters and learners, plus an opaque ``body`` the
  driver uses for node addresses), so a node that starts replicating anywhere learns the whole
  group from one entry.
* The configuration before the first entry is the *bootstrap* configuration (``--peers`` of
  a brand-new group, at offset 0); a node started to join has an empty bootstrap (no voters:
  it never campaigns and waits to be added).
* Retention and log resets keep the configuration: entries older than the log start fold
  into the base entry, and ``ResetLogStart`` carries the configuration in force at the start
  offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from gannet.node.invariants import InvariantViolation, invariant
from gannet.node.raft.ids import ZERO_OFFSET, ByteOffset, NodeId


@dataclass(frozen=True, slots=True)
class Membership:
    """One configuration: the voters (quorum) and learners (replicated to, never counted)."""

    voters: frozenset[NodeId]
    learners: frozenset[NodeId] = frozenset()
    body: bytes = b""
    """The driver's own encoding (node addresses); the core never reads it."""

    def __post_init__(self) -> None:
        invariant(not (self.voters & self.learners), "a node is a voter or a learner, not both")

    def members(self) -> frozenset[NodeId]:
        return self.voters | self.learners

    def is_voter(self, node: NodeId) -> bool:
        return node in self.voters


@dataclass(frozen=True, slots=True)
class MembershipEntry:
    """A configuration and where its record lies in the log (``[0, 0)`` for the bootstrap)."""

    start_offset: ByteOffset
    end_offset: ByteOffset
    membership: Membership

    def __post_init__(self) -> None:
        if not (0 <= self.start_offset <= self.end_offset):
            raise InvariantViolation(
                f"a configuration record at [{self.start_offset}, {self.end_offset})"
            )


def change_refusal(old: Membership, new: Membership) -> str | None:
    """Why ``new`` may not follow ``old`` directly, or None when it may (single-server rule)."""
    if not new.voters:
        return "a configuration needs at least one voter"
    changed = old.voters ^ new.voters
    if len(changed) > 1:
        return (
            f"voters {sorted(old.voters)} -> {sorted(new.voters)} change {len(changed)} voters;"
            " change one voter at a time"
        )
    return None


class MembershipLog:
    """The configuration entries of one node's log, oldest first, on top of a base entry.

    Invariant: ``entries[0]`` is the base (the bootstrap, or the configuration in force at the
    log start); later entries lie inside the log, in increasing offsets.
    """

    def __init__(self, entries: tuple[MembershipEntry, ...]) -> None:
        invariant(len(entries) >= 1, "a membership log starts with its base entry")
        for i in range(1, len(entries)):
            invariant(
                entries[i - 1].end_offset <= entries[i].start_offset,
                "membership entries out of order",
            )
        self._entries = list(entries)

    @classmethod
    def bootstrap(cls, voters: tuple[NodeId, ...]) -> MembershipLog:
        return cls((MembershipEntry(ZERO_OFFSET, ZERO_OFFSET, Membership(frozenset(voters))),))

    def entries(self) -> tuple[MembershipEntry, ...]:
        return tuple(self._entries)

    def latest(self) -> MembershipEntry:
        return self._entries[-1]

    @property
    def current(self) -> Membership:
        """The configuration in force: the latest entry in the log, committed or not."""
        return self._entries[-1].membership

    def committed(self, committed_offset: ByteOffset) -> MembershipEntry:
        """The latest entry whose record is committed."""
        return self.at(committed_offset)

    def append(self, entry: MembershipEntry) -> None:
        invariant(entry.start_offset >= self._entries[-1].end_offset, "entry before the last")
        self._entries.append(entry)

    def truncate(self, offset: ByteOffset) -> bool:
        """The log was cut at ``offset``: drop entries not wholly below it. True if any was."""
        kept = [e for e in self._entries[1:] if e.end_offset <= offset]
        changed = len(kept) != len(self._entries) - 1
        self._entries[1:] = kept
        return changed

    def compact(self, start_offset: ByteOffset) -> None:
        """The bytes before ``start_offset`` are gone: the newest entry below it becomes base."""
        below = [i for i, e in enumerate(self._entries) if e.end_offset <= start_offset]
        if below:
            del self._entries[: below[-1]]

    def at(self, offset: ByteOffset) -> MembershipEntry:
        """The entry in force for a log that ends at ``offset``."""
        for entry in reversed(self._entries):
            if entry.end_offset <= offset:
                return entry
        return self._entries[0]

    def reset(self, entry: MembershipEntry) -> None:
        """The log restarts empty at the leader's log start, where ``entry`` is in force."""
        self._entries = [entry]
