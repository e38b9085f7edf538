"""The native batch encoder (``_native.c``) against the Python put path it mirrors.

For random batches (bodies, keys, tags, properties with transient and non-ASCII entries,
timestamps, sys flags, IPv4/IPv6 hosts, V1/V2 topics, whole-record CRC) the native
``encode_all``, ``lay_out``, ``index_items`` and ``add_index_items`` give exactly the values and
bytes of :meth:`CommitLog.encode_all`, :meth:`CommitLog._lay_out`,
:meth:`IndexService._index_items` and :meth:`IndexFile.add_items` on the Python path, and bad
input (oversize body or properties, long topics, out-of-range fields, bad hosts, records over
the file size) the same errors; ``dispatch_infos`` and ``queue_units`` the dispatch infos and
consume-queue units of the Python loops. Skipped when the extension is not built.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import StoreError
from gannet.node.store.hashing import index_key_hash, tags_code
from gannet.node.store.log import native
from gannet.node.store.log.commitlog import AppendResult, CommitLog
from gannet.node.store.log.records import DispatchInfo, Message
from gannet.node.store.queues.dispatching import _dispatch_infos_of
from gannet.node.store.queues.index_files import IndexFile
from gannet.node.store.queues.index_service import IndexService

CODEC, WHY = native.load()
pytestmark = pytest.mark.skipif(CODEC is None, reason=f"native encoder not in use: {WHY}")
FILE_SIZE = 1 << 16
BODY_MAX = 4096


@contextlib.contextmanager
def python_path() -> Iterator[None]:
    saved = native.codec
    native.codec = None
    try:
        yield
    finally:
        native.codec = saved


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> CommitLog:
    root = tmp_path_factory.mktemp("native")
    config = StoreConfig.for_tests(
        root, commitlog_file_size_bytes=FILE_SIZE, message_body_size_max_bytes=BODY_MAX
    )
    return CommitLog(config)


_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
_hosts = st.sampled_from(
    [("127.0.0.1", 10911), ("10.1.2.3", 0), ("::1", 8081), ("fe80::1", 65535), ("0.0.0.0", 1)]
)
_topics = st.sampled_from(["T", "Topic-%", "t" * 127, "u" * 128, "Ω-topic", "a" * 300])
_props = st.dictionaries(
    st.one_of(
        st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a", "Ω", "__RMQ.TRANSIENT.X", "__RMQ.T"]),
        _text,
    ),
    st.one_of(_text, st.sampled_from(["k1 k2", " k1  k2 ", "ключ", "a__RMQ.TRANSIENT.b"])),
    max_size=6,
)


@st.composite
def messages(draw: st.DrawFn, *, wild: bool = False) -> Message:
    """A message; ``wild`` adds values the encoder must refuse (the same way on both paths)."""
    ints32 = st.one_of(_int32, st.sampled_from([2**31, -(2**31) - 1])) if wild else _int32
    ints64 = st.one_of(_int64, st.sampled_from([2**63, -(2**63) - 1])) if wild else _int64
    body_max = BODY_MAX + 1 if wild else BODY_MAX
    props = _props
    if wild:
        props = st.one_of(_props, st.just({"big": "v" * 33_000}), st.just({"s": "\ud800"}))
    shared_store = ("127.0.0.1", 10911)
    return Message(
        topic=draw(_topics if wild else _topics.filter(lambda t: len(t) < 256)),
        body=draw(st.binary(max_size=body_max)),
        queue_id=draw(ints32),
        flag=draw(ints32),
        properties=draw(props),
        sys_flag=draw(ints32),
        born_timestamp_ms=draw(ints64),
        born_host=draw(_hosts),
        store_host=draw(st.one_of(st.just(shared_store), _hosts)),
        reconsume_times=draw(ints32),
        prepared_transaction_offset=draw(ints64),
    )


def _outcome(call: object) -> object:
    """The value of ``call()``, or (error type, message) when it raises."""
    assert callable(call)
    try:
        return call()
    except Exception as exc:  # the comparison is the point: same type, same words
        return (type(exc), str(exc))


def encode_both(log: CommitLog, msgs: list[Message], crc: bool) -> tuple[object, object]:
    log.append_crc = crc
    fast = _outcome(lambda: log.encode_all([m.copy() for m in msgs]))
    with python_path():
        slow = _outcome(lambda: log.encode_all([m.copy() for m in msgs]))
    return fast, slow


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(msgs=st.lists(messages(), min_size=1, max_size=12), crc=st.booleans())
def test_encode_all_gives_the_python_fields(log: CommitLog, msgs: list[Message], crc: bool) -> None:
    fast, slow = encode_both(log, msgs, crc)
    assert fast == slow
    assert not isinstance(fast, tuple), fast  # valid messages encode


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(msgs=st.lists(messages(wild=True), min_size=1, max_size=6), crc=st.booleans())
def test_bad_messages_get_the_python_errors(log: CommitLog, msgs: list[Message], crc: bool) -> None:
    fast, slow = encode_both(log, msgs, crc)
    assert fast == slow


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"queue_id": 2**31}, "record field queue id is 2147483648; it must fit a 32-bit int"),
        ({"born_timestamp_ms": 2**63}, "must fit a 64-bit long"),
        ({"body": b"x" * (BODY_MAX + 1)}, f"the limit (maxMessageSize) is {BODY_MAX} bytes"),
        ({"properties": {"k": "v" * 40_000}}, "at most 32767 fit the record"),
        ({"topic": "t" * 40_000}, "too long for the record"),
        ({"born_host": ("not-an-ip", 1)}, "does not appear to be an IPv4 or IPv6 address"),
        ({"properties": {"k": "\udcff"}}, "surrogates not allowed"),
        ({"body": bytearray(b"ok")}, None),  # not bytes: the Python path takes it, same bytes
        ({"properties": {"k": 7}}, None),  # not a str: formatted as Python does
    ],
)
def test_each_refusal_names_the_problem_on_both_paths(
    log: CommitLog, change: dict[str, object], error: str | None
) -> None:
    msg = Message(topic="T", body=b"x", properties={"KEYS": "k"})
    for name, value in change.items():
        setattr(msg, name, value)
    fast, slow = encode_both(log, [Message(topic="T", body=b"ok"), msg], crc=False)
    assert fast == slow
    if error is None:
        assert isinstance(fast, list)
        assert len(fast) == 2
    else:
        assert isinstance(fast, tuple)
        assert issubclass(fast[0], Exception)
        assert error in fast[1]


def test_a_record_over_the_file_size_is_refused_the_same_way(log: CommitLog) -> None:
    big = StoreConfig.for_tests(
        Path(log.config.root_dir), commitlog_file_size_bytes=1024, message_body_size_max_bytes=4096
    )
    small_log = CommitLog(big)
    fast, slow = encode_both(small_log, [Message(topic="T", body=b"x" * 2000)], crc=False)
    assert fast == slow
    assert isinstance(fast, tuple)
    assert issubclass(fast[0], StoreError)
    assert "does not fit a commit-log file of 1024 bytes" in fast[1]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    msgs=st.lists(messages(), min_size=1, max_size=20),
    crc=st.booleans(),
    start=st.integers(0, 3 * FILE_SIZE),
    room=st.integers(0, 3000),
    known=st.dictionaries(st.sampled_from(["T-0", "T-1", "Ω-topic-3"]), st.integers(0, 2**40)),
    ts=_int64,
)
def test_lay_out_gives_the_python_bytes_and_results(
    log: CommitLog, msgs: list[Message], crc: bool, start: int, room: int,
    known: dict[str, int], ts: int,
) -> None:  # fmt: skip
    """Same buffers per file (rolls included), results and reserved queue offsets."""
    for i, msg in enumerate(msgs):
        msg.queue_id = i % 2
    log.append_crc = crc
    with python_path():
        batch = log.encode_all(msgs)
    f = SimpleNamespace(end_offset=start, remaining_bytes=room, file_size=2048)
    log.queue_offsets = dict(known)
    assert CODEC is not None
    fast = CODEC.lay_out(batch, log.queue_offsets, start, room, 2048, ts, crc, "h", 7, AppendResult)
    with python_path():
        slow = log._lay_out(batch, f, ts, "h", 7)  # type: ignore[arg-type]
    assert fast == slow
    assert all(type(r) is AppendResult for r in fast[1])
    assert log.queue_offsets == known  # only the reserved table changes


def _infos(draw: st.DrawFn) -> list[DispatchInfo]:
    count = draw(st.integers(0, 12))
    offset = draw(st.integers(0, 1000))
    infos = []
    for _ in range(count):
        offset += draw(st.integers(0, 300))
        infos.append(
            DispatchInfo(
                draw(_topics), 0, offset, 100, 0, draw(st.integers(0, 2**45)), 0,
                draw(st.one_of(st.none(), _text, st.sampled_from(["a b", " a  b ", "ω x"]))),
                draw(st.one_of(st.none(), _text)),
                draw(st.sampled_from([0, 0x4, 0x8, 0xC, 0x10])),
                0, {},
            )
        )  # fmt: skip
    return infos


@st.composite
def index_batches(draw: st.DrawFn) -> tuple[list[DispatchInfo], int]:
    return _infos(draw), draw(st.integers(0, 2000))


@settings(max_examples=100, deadline=None)
@given(batch=index_batches())
def test_index_items_equal_the_python_loop(batch: tuple[list[DispatchInfo], int]) -> None:
    infos, end_phy_offset = batch
    assert CODEC is not None
    fast = CODEC.index_items(infos, end_phy_offset, index_key_hash)
    assert fast == IndexService._index_items(infos, end_phy_offset)


def _index_file(mm: bytearray, slots: int, items_max: int, begin_ms: int) -> IndexFile:
    f = object.__new__(IndexFile)
    f.hash_slots, f.items_max, f._mm = slots, items_max, mm  # type: ignore[assignment]
    f._items_base = 40 + slots * 4
    f.index_count, f.hash_slot_count = 1, 0
    f.begin_timestamp_ms = f.end_timestamp_ms = begin_ms
    f.begin_phy_offset = f.end_phy_offset = 0
    return f


@settings(max_examples=100, deadline=None)
@given(
    slots=st.integers(1, 7),
    items_max=st.integers(2, 30),
    begin_ms=st.sampled_from([0, 1_700_000_000_000]),
    rounds=st.lists(
        st.lists(
            st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**50), st.integers(0, 2**43)),
            max_size=10,
        ),
        max_size=4,
    ),
)
def test_add_index_items_writes_the_python_bytes(
    slots: int, items_max: int, begin_ms: int, rounds: list[list[tuple[int, int, int]]]
) -> None:
    size = 40 + slots * 4 + items_max * 20
    fast_file = _index_file(bytearray(size), slots, items_max, begin_ms)
    slow_file = _index_file(bytearray(size), slots, items_max, begin_ms)
    fields = ("index_count", "hash_slot_count", "begin_phy_offset", "begin_timestamp_ms",
              "end_phy_offset", "end_timestamp_ms")  # fmt: skip
    for items in rounds:
        for start in sorted({0, len(items) // 2}):
            fast = fast_file.add_items(items, start)
            with python_path():
                slow = slow_file.add_items(items, start)
            assert fast == slow
            assert fast_file._mm == slow_file._mm
            assert [getattr(fast_file, n) for n in fields] == [
                getattr(slow_file, n) for n in fields
            ]


def test_gannet_native_0_forces_the_python_path() -> None:
    code = "from gannet.node.store.log import native; print(native.codec is None, native.choice)"
    env = {**os.environ, "GANNET_NATIVE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("True GANNET_NATIVE=0"), out


@settings(max_examples=60, deadline=None)
@given(msgs=st.lists(messages(), max_size=10), tags=st.lists(_text, min_size=10, max_size=10))
def test_dispatch_infos_equal_the_python_loop(msgs: list[Message], tags: list[str]) -> None:
    """Tags (ASCII, non-ASCII, empty, absent), keys and unique keys as the Python loop reads
    them; every field of every DispatchInfo equal."""
    for i, msg in enumerate(msgs):
        if i % 3:
            msg.properties["TAGS"] = tags[i]
    results = [
        AppendResult(100 * i, 90 + i, i // 2, 1_700_000_000_000 + i, "h", 7)
        for i in range(len(msgs))
    ]
    assert CODEC is not None
    fast = CODEC.dispatch_infos(msgs, results, DispatchInfo, tags_code, _dispatch_infos_of)
    slow = _dispatch_infos_of(msgs, results)
    assert fast == slow
    assert all(type(info) is DispatchInfo for info in fast)
    assert all(a.properties is b.properties for a, b in zip(fast, slow, strict=True))


@settings(max_examples=60, deadline=None)
@given(
    queues=st.lists(st.tuples(_topics, st.integers(0, 3)), min_size=1, max_size=20),
    flags=st.lists(st.sampled_from([0, 0x4, 0x8, 0xC]), min_size=20, max_size=20),
    gap=st.booleans(),
)
def test_queue_units_are_the_units_put_would_write(
    queues: list[tuple[str, int]], flags: list[int], gap: bool
) -> None:
    """Per queue, in order of first appearance: the records that take a unit and their 20-byte
    units; a run whose queue offsets are not consecutive comes without units (put one by one)."""
    next_qo: dict[tuple[str, int], int] = {}
    infos = []
    for i, (topic, queue_id) in enumerate(queues):
        qo = next_qo.get((topic, queue_id), 5)
        next_qo[(topic, queue_id)] = qo + (2 if gap and i == 3 else 1)
        infos.append(
            DispatchInfo(topic, queue_id, 1000 * i, 100 + i, -7 * i, 0, qo, None, None,
                         flags[i], 0, {})
        )  # fmt: skip
    assert CODEC is not None
    runs = CODEC.queue_units(infos)
    expected: dict[tuple[str, int], list[DispatchInfo]] = {}
    for info in infos:
        if not info.sys_flag & 0x4:
            expected.setdefault((info.topic, info.queue_id), []).append(info)
    assert [(t, q) for t, q, *_ in runs] == list(expected)
    for topic, queue_id, first_qo, first_end, last_end, units, run in runs:
        want = expected[(topic, queue_id)]
        assert run == want
        assert (first_qo, first_end) == (want[0].queue_offset, want[0].commit_offset + want[0].size)
        assert last_end == want[-1].commit_offset + want[-1].size
        plain = all(b.queue_offset == a.queue_offset + 1 for a, b in itertools.pairwise(want))
        if not plain:
            assert units is None
            continue
        assert units == b"".join(
            struct.pack(">qiq", i.commit_offset, i.size, i.tags_code) for i in want
        )


def test_a_stale_build_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A .so of another VERSION (``_native.c`` changed, ``make install`` not rerun) is refused
    with a sentence saying what to do; the store then runs the Python path."""
    monkeypatch.setattr(native, "VERSION", native.VERSION + 1)
    codec, why = native.load()
    assert codec is None
    assert "out of date" in why
    assert "make install" in why
