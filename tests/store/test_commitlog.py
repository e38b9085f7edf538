"""The commit log's append path writes exactly the bytes of the reference layout."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gannet.node.store.config import StoreConfig
from gannet.node.store.log import record_checks, records
from gannet.node.store.log.commitlog import CommitLog
from gannet.node.store.log.records import Message

pytestmark = pytest.mark.usefixtures("put_path")  # native and Python put paths

hosts = st.sampled_from([("127.0.0.1", 10911), ("::1", 8081)])


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bodies=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=12),
    born=hosts,
    store_host=hosts,
    crc=st.booleans(),
)
def test_appended_bytes_equal_the_one_shot_encoding(
    tmp_path_factory, bodies: list[bytes], born, store_host, crc: bool
) -> None:
    root = tmp_path_factory.mktemp("cl")
    config = dataclasses.replace(
        StoreConfig.for_tests(root, commitlog_file_size_bytes=8192),
        store_host=store_host[0],
        store_port=store_host[1],
    )
    log = CommitLog(config)
    log.append_crc = crc
    log.load()
    msgs = [
        Message(topic="T", body=b, queue_id=i % 2, born_host=born, store_host=store_host,
                properties={"KEYS": f"k{i}"})
        for i, b in enumerate(bodies)
    ]  # fmt: skip
    results = log.append([log.encode(m) for m in msgs])
    for m, r in zip(msgs, results, strict=True):
        expected = dataclasses.replace(
            m,
            queue_offset=r.queue_offset,
            physical_offset=r.wrote_offset,
            store_timestamp_ms=r.store_timestamp_ms,
        )
        buf = records.encode(expected, body_size_max_bytes=1 << 20, append_crc=crc)
        if crc:
            records.seal_crc(buf)
        assert log.read(r.wrote_offset, r.wrote_bytes) == bytes(buf)
        check = record_checks.check_record(buf, 0, len(buf), check_crc=True)
        assert check.ok, check.error
    # records roll to a new file with a BLANK when they do not fit
    assert [r.queue_offset for r in results[::2]] == list(range(len(results[::2])))
    log.close()


@pytest.mark.parametrize(("spare", "rolls"), [(8, False), (7, True)])
def test_a_record_needs_8_spare_bytes_in_its_file(tmp_path: Path, spare: int, rolls: bool) -> None:
    log = CommitLog(StoreConfig.for_tests(tmp_path, commitlog_file_size_bytes=4096))
    log.load()
    first = log.append([log.encode(Message(topic="T", body=b"a" * 3000))])[0]
    remaining = 4096 - first.end_offset
    body_len = remaining - spare - 92  # record = 91 + body + 1-byte topic "T", no properties
    second = log.append([log.encode(Message(topic="T", body=b"b" * body_len))])[0]
    assert second.wrote_bytes == remaining - spare
    if rolls:
        assert second.wrote_offset == 4096
        assert log.read(first.end_offset, 8) == records.blank_record(remaining)
    else:
        assert second.wrote_offset == first.end_offset
    log.close()


def test_the_last_append_keeps_its_bytes_for_the_raft_proposal(tmp_path: Path) -> None:
    """``appended_bytes`` gives exactly the file's bytes of the last append, and nothing once
    the batch rolled to a new file or the log was written or cut by other means."""
    log = CommitLog(StoreConfig.for_tests(tmp_path, commitlog_file_size_bytes=4096))
    log.load()
    first = log.append([log.encode(Message(topic="T", body=b"a" * 100)) for _ in range(3)])
    start, end = first[0].wrote_offset, first[-1].end_offset
    assert log.appended_bytes(start, end) == log.read(start, end - start)
    assert log.appended_bytes(start, end - 1) is None
    assert log.appended_bytes(start + 1, end) is None
    rolled = log.append([log.encode(Message(topic="T", body=b"b" * 1500)) for _ in range(3)])
    assert rolled[-1].wrote_offset == 4096
    assert log.appended_bytes(rolled[0].wrote_offset, rolled[-1].end_offset) is None
    again = log.append([log.encode(Message(topic="T", body=b"c"))])[0]
    assert log.appended_bytes(again.wrote_offset, again.end_offset) == log.read(
        again.wrote_offset, again.wrote_bytes
    )
    log.truncate(again.wrote_offset)
    assert log.appended_bytes(again.wrote_offset, again.end_offset) is None
    log.close()
