"""A seeded, single-process simulator of whole Gannet Raft groups, and its checkers.

Used by ``tests/raft/test_simulation.py`` (hundreds of seeds per run) and, through
``raft_script``, by the transcript tests. Every node is a ``RaftCore`` driven exactly as the
real driver must drive it (``ready.py``): truncate, write, persist hard state, send, advance;
``report_durable`` after a sync. Around the cores:

* ``MemoryLog``: one node's commit log as bytes, its record index and leader-epoch list, and a
  synced offset. ``crash()`` loses every byte written after the last sync (power loss).
* the network: a bag of in-flight messages; delivery picks one at random (reordering and
  delay), may drop or duplicate it; partitions cut links both ways, ``cut_links`` one way.
* ``Checker``: after every event, the invariants of ``docs/architecture.md`` (Raft safety
  properties) — one leader per term, terms monotonic per node across restarts, committed
  prefixes identical everywhere, commit only on bytes durable on a majority, leader
  completeness, no acknowledged proposal lost, no node's commit offset beyond its log.

Records are real bytes: ``header(length u32, record_id u64, term u32)`` + filler derived from
the id, so replicas can be compared byte for byte and by record identity.
A failure raises ``SimulationFailure`` naming the seed and the event number.
"""

from __future__ import annotations

import bisect
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gannet.node.invariants import invariant
from gannet.node.raft import config as raft_config
from gannet.node.raft import core as raft_core
from gannet.node.raft.epochs import Epoch
from gannet.node.raft.membership import Membership, MembershipEntry, MembershipLog
from gannet.node.raft.messages import (
    AppendEntries,
    AppendResponse,
    ByteOffset,
    Heartbeat,
    HeartbeatResponse,
    Message,
    NodeId,
    PreVoteRequest,
    PreVoteResponse,
    Proposed,
    ResetLogStart,
    Term,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from gannet.node.raft.ready import AppendRange, HardState, Ready, Role

RECORD_HEADER = struct.Struct(">IQI")
RECORD_HEADER_BYTES = RECORD_HEADER.size
NOOP_RECORD_ID = 0
MEMBERSHIP_RECORD_ID_BASE = 1 << 60
"""Records with ids from here on are configuration entries: the body after the header is
``v=<voters>;l=<learners>`` (comma-separated node ids)."""


class SimulationFailure(AssertionError):
    """An invariant of the replicated log does not hold."""


def encode_record(record_id: int, term: int, length_bytes: int) -> bytes:
    """A record of exactly ``length_bytes`` (at least the header) naming its id and term."""
    invariant(length_bytes >= RECORD_HEADER_BYTES, "record shorter than its header")
    filler = bytes((record_id + i) & 0xFF for i in range(length_bytes - RECORD_HEADER_BYTES))
    return RECORD_HEADER.pack(length_bytes, record_id, term) + filler


def encode_membership(record_id: int, term: int, membership: Membership) -> bytes:
    """A configuration record (``record_id >= MEMBERSHIP_RECORD_ID_BASE``)."""
    invariant(record_id >= MEMBERSHIP_RECORD_ID_BASE, "membership record id below its base")
    body = (
        "v="
        + ",".join(map(str, sorted(membership.voters)))
        + ";l="
        + ",".join(map(str, sorted(membership.learners)))
    ).encode()
    return RECORD_HEADER.pack(RECORD_HEADER_BYTES + len(body), record_id, term) + body


def _ids(text: str) -> frozenset[NodeId]:
    return frozenset(NodeId(int(x)) for x in text.split(",") if x)


def memberships_in(start: ByteOffset, payload: bytes) -> tuple[MembershipEntry, ...]:
    """The core's ``memberships_in`` callback for simulated records."""
    found = []
    position = 0
    while position < len(payload):
        length, record_id, _term = RECORD_HEADER.unpack_from(payload, position)
        if record_id >= MEMBERSHIP_RECORD_ID_BASE:
            body = payload[position + RECORD_HEADER_BYTES : position + length].decode()
            voters, learners = (part.split("=", 1)[1] for part in body.split(";"))
            begin = ByteOffset(start + position)
            found.append(
                MembershipEntry(
                    begin, ByteOffset(begin + length), Membership(_ids(voters), _ids(learners))
                )
            )
        position += length
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Record:
    start_offset: int
    end_offset: int
    record_id: int
    term: int


class MemoryLog:
    """One node's commit log in memory: survives crashes only up to ``synced_offset``.

    Invariant: ``records`` tile ``data`` exactly; ``synced_offset <= len(data)``.
    """

    def __init__(self) -> None:
        self.data = bytearray()
        self.records: list[Record] = []
        self._record_starts: list[int] = []
        self.epochs: list[Epoch] = []
        self.synced_offset = 0
        self.hard_state = HardState()
        self.memberships: tuple[MembershipEntry, ...] = ()
        """The persisted ``Ready.memberships`` (durable at once, like the hard state)."""
        self.version = 0
        """Bumped by every truncation and crash: bytes below the end may have changed."""

    @property
    def end_offset(self) -> int:
        return len(self.data)

    def write(self, entry: AppendRange) -> None:
        invariant(entry.start_offset == len(self.data), "write not at the log end")
        invariant(len(entry.payload) == entry.length_bytes, "range without its bytes")
        position = 0
        while position < len(entry.payload):
            length, record_id, term = RECORD_HEADER.unpack_from(entry.payload, position)
            invariant(term == entry.term, f"record of term {term} in a range of {entry.term}")
            start = entry.start_offset + position
            self.records.append(Record(start, start + length, record_id, term))
            self._record_starts.append(start)
            position += length
        invariant(position == len(entry.payload), "range does not end on a record boundary")
        if not self.epochs or self.epochs[-1].term != entry.term:
            self.epochs.append(Epoch(entry.term, entry.start_offset))
        self.data += entry.payload

    def truncate(self, offset: int) -> None:
        index = bisect.bisect_left(self._record_starts, offset)
        invariant(
            offset == len(self.data) or self._record_starts[index] == offset,
            f"truncation at {offset} inside a record",
        )
        self.version += 1
        del self.data[offset:]
        del self.records[index:]
        del self._record_starts[index:]
        while self.epochs and self.epochs[-1].start_offset >= offset:
            self.epochs.pop()
        self.synced_offset = min(self.synced_offset, offset)

    def sync(self) -> None:
        self.synced_offset = len(self.data)

    def crash(self, unsynced_records_kept: int = 0) -> None:
        """Power loss: bytes after the last sync are lost, except that the first
        ``unsynced_records_kept`` unsynced records may have reached the disk anyway (recovery
        cuts torn records, so survivors are whole records)."""
        index = bisect.bisect_left(self._record_starts, self.synced_offset)
        survivors = self.records[index : index + unsynced_records_kept]
        self.truncate(survivors[-1].end_offset if survivors else self.synced_offset)
        self.synced_offset = len(self.data)

    def record_end(self, start: ByteOffset, cap: ByteOffset) -> ByteOffset:
        """The core's ``record_end`` callback (see ``raft.config.RecordEnd``)."""
        index = bisect.bisect_right(self._record_starts, cap - 1) - 1
        if index >= 0 and self.records[index].end_offset <= cap:
            end = self.records[index].end_offset
        elif index >= 0 and self.records[index].start_offset > start:
            end = self.records[index].start_offset
        else:
            first = bisect.bisect_left(self._record_starts, start)
            end = self.records[first].end_offset
        invariant(end > start, "record_end must move forward")
        return ByteOffset(end)

    def record_at(self, offset: int) -> Record | None:
        index = bisect.bisect_left(self._record_starts, offset)
        if index < len(self.records) and self.records[index].start_offset == offset:
            return self.records[index]
        return None


@dataclass
class Pending:
    record_id: int
    proposed: Proposed


@dataclass
class SimNode:
    node_id: NodeId
    voters: tuple[NodeId, ...]
    seed: int
    timing: dict[str, int]
    log: MemoryLog = field(default_factory=MemoryLog)
    core: raft_core.RaftCore | None = None
    pending: list[Pending] = field(default_factory=list)
    restarts: int = 0
    fixed_jitter_ticks: int | None = None
    dispatched_offset: int = 0
    """What consumers may read: the last ``Ready.committed_offset`` the driver executed."""

    def start(self) -> raft_core.RaftCore:
        rng = random.Random(self.seed * 1_000_003 + self.node_id * 7_919 + self.restarts)
        jitter = self.fixed_jitter_ticks

        def random_ticks(limit: int) -> int:
            # Transcripts fix the jitter so elections by timeout are predictable.
            return rng.randrange(limit) if jitter is None else jitter % limit

        config = raft_config.Config(
            node_id=self.node_id,
            voters=self.voters,
            random_ticks=random_ticks,
            noop_payload=lambda offset, term: encode_record(NOOP_RECORD_ID, term, 16),
            record_end=self.log.record_end,
            memberships_in=memberships_in,
            **self.timing,  # type: ignore[arg-type]
        )
        initial = raft_config.InitialState(
            hard_state=self.log.hard_state,
            epochs=tuple(self.log.epochs),
            last_offset=ByteOffset(self.log.end_offset),
            memberships=self.log.memberships,
        )
        if not self.log.memberships:
            # What the driver does on a brand-new node: persist the bootstrap configuration,
            # so a later start with other voters (another ``--peers``) does not change it.
            self.log.memberships = MembershipLog.bootstrap(self.voters).entries()
        self.core = raft_core.RaftCore(config, initial)
        self.pending = []
        self.dispatched_offset = 0
        return self.core

    @property
    def up(self) -> bool:
        return self.core is not None

    def crash(self, unsynced_records_kept: int = 0) -> None:
        self.core = None
        self.pending = []
        self.log.crash(unsynced_records_kept)
        self.restarts += 1

    def handle_ready(
        self,
        send: Callable[[Message], None],
        observer: Callable[[NodeId, Ready], None] | None = None,
    ) -> list[Pending]:
        """Drive one Ready the way the real driver must; returns newly committed proposals.
        ``observer`` sees the Ready first (the transcripts print it)."""
        node = self.core
        invariant(node is not None, "a crashed node has no Ready")
        assert node is not None
        ready: Ready = node.ready()
        if observer is not None:
            observer(self.node_id, ready)
        if ready.truncate_to is not None:
            self.log.truncate(ready.truncate_to)
        if ready.memberships is not None:
            self.log.memberships = ready.memberships
        for entry in ready.entries:
            self.log.write(entry)
        if ready.hard_state is not None:
            self.log.hard_state = ready.hard_state  # durable at once: must_sync honoured
        for message in ready.messages:
            send(self._with_payload(message))
        done: list[Pending] = []
        if ready.committed_offset is not None:
            committed = ready.committed_offset
            self.dispatched_offset = committed
            done = [p for p in self.pending if p.proposed.end_offset <= committed]
            self.pending = [p for p in self.pending if p.proposed.end_offset > committed]
            done = [p for p in done if self._still_holds(p)]
        node.advance(ready)
        return done

    def _with_payload(self, message: Message) -> Message:
        if isinstance(message, AppendEntries) and message.end_offset > message.prev_offset:
            data = bytes(self.log.data[message.prev_offset : message.end_offset])
            return replace(message, payload=data)
        return message

    def _still_holds(self, pending: Pending) -> bool:
        record = self.log.record_at(pending.proposed.start_offset)
        return record is not None and record.record_id == pending.record_id


def node_term(node: SimNode) -> Term:
    return node.core.term if node.core is not None else node.log.hard_state.term


ReadyObserver = Callable[[NodeId, Ready], None]


class Cluster:
    """Nodes ``1..node_count``, the in-flight messages between them, and partitions.

    Invariant: ``in_flight`` holds at most ``in_flight_max`` messages (the oldest are lost).
    """

    in_flight_max = 4_096

    def __init__(
        self,
        node_count: int,
        *,
        seed: int = 0,
        timing: dict[str, int] | None = None,
        observer: ReadyObserver | None = None,
        fixed_jitter: bool = False,
        spare_count: int = 0,
        bootstrap: dict[NodeId, tuple[NodeId, ...]] | None = None,
    ) -> None:
        """``spare_count`` more nodes start to join (no voters: they wait to be added);
        ``bootstrap`` overrides a node's bootstrap voters (the old ``--peers`` roll)."""
        invariant(1 <= node_count + spare_count <= 9, "between 1 and 9 nodes")
        voters = tuple(NodeId(i) for i in range(1, node_count + 1))
        every = tuple(NodeId(i) for i in range(1, node_count + spare_count + 1))
        chosen = bootstrap or {}
        self.nodes = {
            v: SimNode(v, chosen.get(v, voters if v in voters else ()), seed, dict(timing or {}))
            for v in every
        }
        if fixed_jitter:
            # Node n waits n - 1 extra ticks: elections by timeout are predictable.
            for v, node in self.nodes.items():
                node.fixed_jitter_ticks = v - 1
        self.in_flight: list[Message] = []
        self.group_of: dict[NodeId, int] = {}
        self.cut_links: set[tuple[NodeId, NodeId]] = set()
        """One-way faults: messages from ``a`` to ``b`` are lost for each ``(a, b)``."""
        self.acked: dict[int, tuple[int, int]] = {}
        self.newly_acked: list[int] = []
        self.observer = observer
        for node in self.nodes.values():
            node.start()

    def core(self, node_id: NodeId) -> raft_core.RaftCore:
        node = self.nodes[node_id].core
        invariant(node is not None, f"node {node_id} is down")
        assert node is not None
        return node

    def up_ids(self) -> list[NodeId]:
        return [n for n, node in self.nodes.items() if node.up]

    def send(self, message: Message) -> None:
        self.in_flight.append(message)
        if len(self.in_flight) > self.in_flight_max:
            del self.in_flight[0]

    def connected(self, a: NodeId, b: NodeId) -> bool:
        same_side = self.group_of.get(a, 0) == self.group_of.get(b, 0)
        return same_side and (a, b) not in self.cut_links

    def drain(self, node_id: NodeId) -> None:
        node = self.nodes[node_id]
        for _ in range(1_000):
            if node.core is None or not node.core.has_ready():
                return
            for done in node.handle_ready(self.send, self.observer):
                self.acked[done.record_id] = (
                    done.proposed.start_offset,
                    done.proposed.end_offset,
                )
                self.newly_acked.append(done.record_id)
        invariant(False, "a node produced Readies without end")

    def deliver(self, message: Message) -> bool:
        target = self.nodes[message.target]
        if target.core is None or not self.connected(message.sender, message.target):
            return False
        target.core.step(message)
        self.drain(message.target)
        return True

    def tick(self, node_id: NodeId) -> None:
        self.core(node_id).tick()
        self.drain(node_id)

    def sync(self, node_id: NodeId) -> None:
        node = self.nodes[node_id]
        node.log.sync()
        self.core(node_id).report_durable(ByteOffset(node.log.synced_offset))
        self.drain(node_id)

    def propose(self, node_id: NodeId, record_id: int, length_bytes: int) -> object:
        core = self.core(node_id)
        payload = encode_record(record_id, core.term, length_bytes)
        outcome = core.propose(payload)
        if isinstance(outcome, Proposed):
            self.nodes[node_id].pending.append(Pending(record_id, outcome))
        self.drain(node_id)
        return outcome

    def crash(self, node_id: NodeId, unsynced_records_kept: int = 0) -> None:
        self.nodes[node_id].crash(unsynced_records_kept)

    def restart(self, node_id: NodeId) -> None:
        invariant(not self.nodes[node_id].up, f"node {node_id} is already up")
        self.nodes[node_id].start()
        self.drain(node_id)

    def leaders(self) -> list[NodeId]:
        return [n for n in self.up_ids() if self.core(n).role is Role.LEADER]

    def propose_membership(self, node_id: NodeId, record_id: int, membership: Membership) -> object:
        core = self.core(node_id)
        payload = encode_membership(record_id, core.term, membership)
        outcome = core.propose_membership(payload, membership)
        self.drain(node_id)
        return outcome


def describe(message: Message) -> str:
    """One line per message, for transcripts and failure traces."""
    head = f"{message.sender}->{message.target} {type(message).__name__} t{message.term}"
    match message:
        case PreVoteRequest() | VoteRequest():
            extra = " transfer" if isinstance(message, VoteRequest) and message.transfer else ""
            return f"{head} last=(t{message.last_term},{message.last_offset}){extra}"
        case PreVoteResponse() | VoteResponse():
            return f"{head} {'granted' if message.granted else 'refused'}"
        case AppendEntries():
            data = ""
            if message.end_offset > message.prev_offset:
                data = f" [{message.prev_offset},{message.end_offset})@t{message.entries_term}"
            return (
                f"{head} prev=({message.prev_offset},t{message.prev_term}){data}"
                f" commit={message.leader_commit}"
            )
        case AppendResponse() if message.success:
            return f"{head} ok match={message.match_offset} durable={message.durable_offset}"
        case AppendResponse():
            return (
                f"{head} refused prev={message.rejected_prev_offset}"
                f" hint=(t{message.hint_term},{message.hint_offset})"
            )
        case Heartbeat():
            return f"{head} commit={message.leader_commit}"
        case HeartbeatResponse():
            return f"{head} match={message.match_offset} durable={message.durable_offset}"
        case TimeoutNow():
            return head
        case ResetLogStart():
            return (
                f"{head} start=({message.start_offset},t{message.start_term})"
                f" commit={message.leader_commit}"
            )
