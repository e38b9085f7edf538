"""Fuzz the store's on-disk decoders through the store itself: a small valid store is copied,
one of its files is damaged (bytes overwritten, zeroed, cut or grown), and the store is opened
and read.

Surfaces: commit-log segments (record decoder, recovery scan), consume-queue files (20-byte
units), index files (40-byte header, slots, items), the checkpoint file, and ``topics.json``
in place. Contract: opening either succeeds — and then every queue read, key query and offset
read answers — or raises a :class:`~gannet.node.store.errors.StoreError` naming the problem;
nothing else escapes, and a store that opened closes cleanly.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.store import querying
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.errors import StoreError
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

from .conftest import SEEDED, fuzz_settings

TOPICS = ("FuzzA", "FuzzB")
QUEUES = 2
MESSAGES = 40


def _config(root: Path) -> StoreConfig:
    return StoreConfig.for_tests(root, flush_mode=FlushMode.ASYNC_FLUSH)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cleanly closed store: two topics, two queues each, keyed messages over 2+ segments."""
    root = tmp_path_factory.mktemp("template")
    store = MessageStore(_config(root)).open()
    try:
        for topic in TOPICS:
            store.topic_configs.put(TopicConfig(topic, QUEUES, QUEUES))
        last = None
        for i in range(MESSAGES):
            message = Message(
                topic=TOPICS[i % 2],
                body=f"body-{i}".encode() * 200,
                queue_id=i % QUEUES,
                properties={"KEYS": f"k{i} common", "TAGS": "t"},
            )
            last = store.put_message(message)
        assert last is not None
        assert store.wait_dispatched(last.end_offset)
    finally:
        store.close()
    return root


def _files(root: Path, surface: str) -> list[Path]:
    if surface == "commitlog":
        return sorted((root / "commitlog").iterdir())
    if surface == "consumequeue":
        return sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())
    if surface == "index":
        return sorted((root / "index").iterdir())
    if surface == "checkpoint":
        return [root / "checkpoint"]
    return [root / "config" / "topics.json"]


@st.composite
def damage(draw: st.DrawFn) -> list[tuple[str, int, bytes]]:
    """Edits as (kind, position fraction in millionths, bytes)."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["write", "zero", "ones", "cut", "grow"]))
        where = draw(st.integers(0, 999_999))
        data = draw(st.binary(min_size=1, max_size=48))
        edits.append((kind, where, data))
    return edits


def _apply(path: Path, edits: list[tuple[str, int, bytes]]) -> None:
    data = bytearray(path.read_bytes())
    for kind, where, payload in edits:
        pos = len(data) * where // 1_000_000
        if kind == "write":
            data[pos : pos + len(payload)] = payload
        elif kind == "zero":
            data[pos : pos + len(payload)] = bytes(len(payload))
        elif kind == "ones":
            data[pos : pos + len(payload)] = b"\xff" * len(payload)
        elif kind == "cut":
            del data[pos:]
        else:
            data += payload
    path.write_bytes(bytes(data))


def _exercise(store: MessageStore) -> None:
    """Every read path a client can reach over the store must answer."""
    for topic, queue_id in itertools.product(TOPICS, range(QUEUES)):
        low = store.min_offset_in_queue(topic, queue_id)
        high = store.max_offset_in_queue(topic, queue_id)
        for offset in (low, (low + high) // 2, max(low, high - 1), -1, high + 5):
            store.get_messages(topic, queue_id, offset, 32)
        querying.by_key(store, topic, "common")
    end = store.commitlog.max_offset()
    for offset in (0, end // 3, end // 2, max(0, end - 1), end + 100):
        store.read_message(offset)


@pytest.mark.parametrize("surface", ["commitlog", "consumequeue", "index", "checkpoint", "topics"])
@pytest.mark.parametrize("abnormal", [False, True], ids=["clean-exit", "crashed"])
def test_damaged_store_opens_or_refuses(template: Path, tmp_path: Path, surface, abnormal):
    counter = itertools.count()
    outcomes = {"opened": 0, "refused": 0}

    @SEEDED
    @fuzz_settings(12)
    @given(st.data(), damage())
    def check(data: st.DataObject, edits: list[tuple[str, int, bytes]]) -> None:
        root = tmp_path / str(next(counter))
        shutil.copytree(template, root)
        files = _files(root, surface)
        _apply(data.draw(st.sampled_from(files)), edits)
        if abnormal:
            (root / "abort").write_text("1")
        try:
            store = MessageStore(_config(root)).open()
        except StoreError as exc:
            refused = str(exc)
        else:
            refused = ""
        if refused:
            outcomes["refused"] += 1
            return
        outcomes["opened"] += 1
        try:
            _exercise(store)
        finally:
            store.close()
        shutil.rmtree(root)

    check()
    print(f"{surface}: {outcomes}")
    assert outcomes["opened"] + outcomes["refused"] > 0
