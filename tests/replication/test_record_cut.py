"""A follower catching up takes every configuration record of the leader's log: the leader
cuts ``AppendEntries`` at record boundaries of its real commit log (``CommitLog.record_end``,
given to the core by ``driver_state.core_config``), and a follower that gets a payload it
cannot read whole appends nothing of it (it never keeps a range without its configuration
records).

Replay of fault seed 912 (``e2e/faults``): a brand-new member catching up from 0 received
1 MiB ranges cut as bytes, not records; a range ending inside a record raised
``MembershipRecordError`` after the range was appended, so the configuration records in it
were never taken (on the resend the range was no longer new and was not scanned).

Pure Raft cores wired by hand (messages routed in a loop, every Ready executed against a real
``MessageStore`` in 4 KiB files, payloads read from the leader's commit log like the driver's
``_send``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.raft.config import InitialState
from gannet.node.raft.core import RaftCore
from gannet.node.raft.epochs import Epoch
from gannet.node.raft.membership import MembershipEntry, MembershipLog
from gannet.node.raft.messages import (
    AppendEntries,
    ByteOffset,
    Message,
    NodeId,
    Term,
    VoteResponse,
)
from gannet.node.raft.ready import HardState, Role
from gannet.node.replication import driver_state, members, noop
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import native, records
from gannet.node.store.message_store import MessageStore

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)
SPECS = tuple(PeerSpec(n, f"10.0.0.{n}", 8091, 8081) for n in (N1, N2, N3))
FILE_BYTES = 4096
APPEND_BYTES_MAX = 1000
"""Smaller than a file and not a multiple of any record size here: byte cuts fall mid-record."""


@pytest.fixture(params=["native", "python"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``CommitLog.record_end`` walks with the native codec when built, else in Python."""
    if request.param == "native":
        if native.codec is None:
            pytest.skip("the native codec is not built")
    else:
        monkeypatch.setattr(native, "codec", None)
    return str(request.param)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[NodeId, MessageStore]]:
    opened = {}
    for node in (N1, N2):
        config = StoreConfig.for_tests(
            tmp_path / f"node{node}",
            flush_mode=FlushMode.ASYNC_FLUSH,
            commitlog_file_size_bytes=FILE_BYTES,
        )
        opened[node] = MessageStore(config).open()
    yield opened
    for store in opened.values():
        store.close()


def _write_leader_log(store: MessageStore) -> MembershipEntry:
    """Term-1 records over several files (BLANKs close them), a configuration record in the
    middle; returns its entry."""
    for i in range(14):
        store.put_message(records.Message(topic="T", body=b"a" * (150 + 37 * i)))
    membership = members.membership_of([members.Member(s, True) for s in SPECS])
    record = store.put_message(records.Message(topic=members.MEMBERS_TOPIC, body=membership.body))
    for i in range(20):
        store.put_message(records.Message(topic="T", body=b"b" * (90 + 53 * i)))
    return MembershipEntry(
        ByteOffset(record.wrote_offset), ByteOffset(record.end_offset), membership
    )


def _core(node: NodeId, store: MessageStore, initial: InitialState) -> RaftCore:
    replication = ReplicationConfig(
        node_id=node, peers=SPECS, peer_listen=SPECS[node - 1].peer_endpoint
    )
    config = driver_state.core_config(
        replication,
        lambda n: 0,
        lambda offset, term: noop.encode_noop(store, offset, term, node),
        lambda start, cap: _record_end(store, start, cap),
    )
    config = dataclasses.replace(
        config, append_bytes_max=APPEND_BYTES_MAX, pre_vote=False, check_quorum=False
    )
    return RaftCore(config, initial)


def _record_end(store: MessageStore, start: ByteOffset, cap: ByteOffset) -> ByteOffset:
    end = store.commitlog.record_end(start, cap)
    assert end is not None, f"no record at {start}"
    return ByteOffset(end)


def _read(store: MessageStore, start: int, end: int) -> bytes:
    parts = []
    while start < end:
        chunk = store.read_replicated(start, end - start)
        assert chunk, f"nothing stored at {start}"
        parts.append(chunk)
        start += len(chunk)
    return b"".join(parts)


def _run(
    cores: dict[NodeId, RaftCore], stores: dict[NodeId, MessageStore], sent: list[AppendEntries]
) -> None:
    """Route messages until quiet, executing every Ready against the node's store."""
    for _ in range(200):
        outbox: list[Message] = []
        for node, core in cores.items():
            store = stores[node]
            while core.has_ready():
                ready = core.ready()
                assert ready.log_reset is None
                if ready.truncate_to is not None:
                    store.truncate(ready.truncate_to)
                for entry in ready.entries:
                    store.append_replicated(entry.start_offset, entry.payload)
                for message in ready.messages:
                    if isinstance(message, AppendEntries) and message.end_offset > (
                        message.prev_offset
                    ):
                        payload = _read(store, message.prev_offset, message.end_offset)
                        filled = dataclasses.replace(message, payload=payload)
                        sent.append(filled)
                        outbox.append(filled)
                    else:
                        outbox.append(message)
                core.advance(ready)
                core.report_durable(ByteOffset(store.commitlog.max_offset()))
        if not outbox:
            return
        for message in outbox:
            if message.target in cores:
                cores[message.target].step(message)
    raise AssertionError("messages still flowing after 200 rounds")


def test_a_follower_catching_up_takes_the_configuration_record_in_whole_ranges(
    stores: dict[NodeId, MessageStore], walk: str
) -> None:
    entry = _write_leader_log(stores[N1])
    last = ByteOffset(stores[N1].commitlog.max_offset())
    assert last > 2 * FILE_BYTES  # BLANKs close the first files
    bootstrap = MembershipLog.bootstrap((N1, N2, N3)).entries()
    leader = _core(
        N1,
        stores[N1],
        InitialState(
            hard_state=HardState(Term(1), N1),
            epochs=(Epoch(Term(1), ByteOffset(0)),),
            last_offset=last,
            memberships=(*bootstrap, entry),
        ),
    )
    follower = _core(N2, stores[N2], InitialState(memberships=bootstrap))
    leader.campaign()
    leader.advance(leader.ready())
    leader.step(VoteResponse(N2, N1, Term(2), True))
    assert leader.role is Role.LEADER

    sent: list[AppendEntries] = []
    _run({N1: leader, N2: follower}, stores, sent)

    assert follower.refused_payload is None
    end = stores[N1].commitlog.max_offset()
    assert follower.log.last_offset == end
    assert _read(stores[N2], 0, end) == _read(stores[N1], 0, end)
    assert follower.members.entries() == leader.members.entries()
    assert entry in follower.members.entries()
    # Every range ended on a record boundary of the leader's log (the BLANK's end included).
    boundaries = set(range(0, end + 1, FILE_BYTES))
    boundaries |= {at + head.size for at, head, _ in stores[N1].commitlog.scan_heads(
        0, end, check_crc=False
    ) if head is not None}  # fmt: skip
    assert len(sent) > end // APPEND_BYTES_MAX
    assert all(m.end_offset in boundaries for m in sent), [
        m.end_offset for m in sent if m.end_offset not in boundaries
    ]


def test_a_payload_that_is_not_whole_records_is_refused_not_half_taken(
    stores: dict[NodeId, MessageStore],
) -> None:
    """A range ending inside a configuration record (as an uncut leader sent): the follower
    appends nothing and keeps the reason; the same bytes cut at the record's end are taken
    with the configuration record."""
    entry = _write_leader_log(stores[N1])
    bootstrap = MembershipLog.bootstrap((N1, N2, N3)).entries()
    follower = _core(N2, stores[N2], InitialState(memberships=bootstrap))

    def append(end: int) -> AppendEntries:
        payload = _read(stores[N1], 0, end)
        zero, last = ByteOffset(0), ByteOffset(end)
        return AppendEntries(N1, N2, Term(1), zero, Term(0), last, Term(1), zero, payload)

    follower.step(append(entry.end_offset - 1))
    assert follower.refused_payload is not None
    assert "refused, nothing of it appended" in follower.refused_payload
    assert f"unreadable record at {entry.start_offset}" in follower.refused_payload
    assert follower.log.last_offset == 0
    ready = follower.ready()
    assert ready.entries == ()
    assert not any(isinstance(m, AppendEntries) for m in ready.messages)
    follower.advance(ready)

    follower.step(append(entry.end_offset))
    assert follower.log.last_offset == entry.end_offset
    assert follower.members.entries() == (*bootstrap, entry)


def test_record_end_steps_over_records_and_blanks_and_refuses_a_mid_record_start(
    stores: dict[NodeId, MessageStore], walk: str
) -> None:
    entry = _write_leader_log(stores[N1])
    commitlog = stores[N1].commitlog
    end = commitlog.max_offset()
    heads = [(at, head.size) for at, head, _ in commitlog.scan_heads(0, end, check_crc=False)
             if head is not None]  # fmt: skip
    first_size = heads[0][1]
    assert commitlog.record_end(0, first_size) == first_size
    assert commitlog.record_end(0, first_size - 1) == first_size  # one record alone passes cap
    assert commitlog.record_end(0, first_size + 1) == first_size
    assert commitlog.record_end(entry.start_offset, entry.end_offset + 5) == entry.end_offset
    assert commitlog.record_end(0, end) == end
    # The last record of the first file is followed by a BLANK: its end is the next file's.
    last_at, last_size = max((at, size) for at, size in heads if at < FILE_BYTES)
    blank_at = last_at + last_size
    assert blank_at < FILE_BYTES
    assert commitlog.record_end(ByteOffset(blank_at), ByteOffset(blank_at + 1)) == FILE_BYTES
    assert commitlog.record_end(ByteOffset(last_at), ByteOffset(FILE_BYTES - 1)) == blank_at
    assert commitlog.record_end(ByteOffset(last_at), ByteOffset(FILE_BYTES + 1)) == FILE_BYTES
    assert commitlog.record_end(1, end) is None  # no record begins there
    assert commitlog.record_end(end, end + 100) is None  # nothing stored there
