"""Configuration records and the membership file (``gannet.node.replication.members``): a
record written through a real store is found again in the commit-log bytes a follower appends,
padding and other records around it; the file round-trips and refuses garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from gannet.node.raft.membership import MembershipEntry, MembershipLog
from gannet.node.raft.messages import ByteOffset, NodeId
from gannet.node.replication import members
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.state_files import StateFileError
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records
from gannet.node.store.message_store import MessageStore

SPECS = [PeerSpec(1, "10.0.0.1", 8091, 8081), PeerSpec(4, "::1", 9091, 9081)]


def test_a_configuration_record_is_found_among_other_records_and_padding(tmp_path: Path) -> None:
    config = StoreConfig.for_tests(
        tmp_path, flush_mode=FlushMode.ASYNC_FLUSH, commitlog_file_size_bytes=4096
    )
    wanted = [members.Member(SPECS[0], True), members.Member(SPECS[1], False)]
    membership = members.membership_of(wanted)
    with MessageStore(config).open() as store:
        for i in range(12):  # fills the first 4 KiB file: a BLANK closes it
            store.put_message(records.Message(topic="T", body=b"x" * 200 + bytes([i])))
        record = store.put_message(
            records.Message(topic=members.MEMBERS_TOPIC, body=membership.body)
        )
        store.put_message(records.Message(topic="T", body=b"after"))
        end = store.commitlog.max_offset()
        data = b"".join(store.read_replicated(p, end - p) for p in range(0, end, 4096) if p < end)
    assert record.wrote_offset >= 4096  # past the BLANK that closed the first file
    found = members.memberships_in(ByteOffset(0), data[:end])
    assert found == (
        MembershipEntry(ByteOffset(record.wrote_offset), ByteOffset(record.end_offset), membership),
    )
    assert membership.voters == {NodeId(1)}
    assert membership.learners == {NodeId(4)}
    assert members.decode_body(membership.body) == wanted
    assert members.memberships_in(ByteOffset(0), data[: record.wrote_offset]) == ()


def test_the_membership_file_round_trips_and_refuses_garbage(tmp_path: Path) -> None:
    file = members.MembershipFile(tmp_path / "membership")
    assert file.load() == ()
    body = members.encode_body([members.Member(s, True) for s in SPECS])
    base = MembershipLog.bootstrap((NodeId(1), NodeId(4))).entries()[0]
    entries = (
        base,
        MembershipEntry(
            ByteOffset(100),
            ByteOffset(180),
            members.membership_of([members.Member(s, True) for s in SPECS]),
        ),
    )
    file.save(entries)
    assert file.load() == entries
    assert members.decode_body(file.load()[1].membership.body) == members.decode_body(body)
    (tmp_path / "membership").write_text("{not json")
    with pytest.raises(StateFileError, match="not a membership file"):
        file.load()
