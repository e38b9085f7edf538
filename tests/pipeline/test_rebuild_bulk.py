"""The rebuild's bulk dispatch (:meth:`rebuilding.Dispatcher.dispatch_columns`) against the
broker's dispatch and the record-by-record chain, on randomized stores; no Spark.

Each case writes a store with the broker's own MessageStore (random topics, queues, keys,
tags, prepared and rolled-back transactional records; small files so that consume-queue and
index files roll often), parses its segments into dispatch columns as the executors do, and
checks the bulk rebuild: consume-queue files byte-identical to the broker's, index files
equal to the broker's in order, and everything (index file names included) equal to what the
record-by-record ``Dispatcher.dispatch`` writes. The seed is printed; rerun one with
``GANNET_TEST_SEED``.
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import (
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    Message,
)
from gannet.node.store.message_store import MessageStore
from gannet.pipeline import rebuilding, segments
from gannet.pipeline.segments import Damage

FLAGS = (
    [0] * 8
    + [SYSFLAG_TRANSACTION_PREPARED_TYPE, SYSFLAG_TRANSACTION_COMMIT_TYPE]
    + [SYSFLAG_TRANSACTION_ROLLBACK_TYPE]
)


def _seeds() -> list[int]:
    chosen = os.environ.get("GANNET_TEST_SEED")
    if chosen is not None:
        return [int(chosen)]
    return [random.randrange(2**32) for _ in range(2)]


def _message(rng: random.Random) -> Message:
    topic = rng.choice(("Orders", "Payments", "Audit%x", "Logs"))
    properties: dict[str, str] = {}
    if rng.random() < 0.8:
        properties["TAGS"] = rng.choice(("a", "tag-1", "Ωmega", "x" * 40))
    if rng.random() < 0.7:
        tokens = [f"k{rng.randrange(500)}" for _ in range(rng.randrange(4))]
        if tokens:
            properties["KEYS"] = " ".join(tokens) + (" " if rng.random() < 0.1 else "")
    return Message(
        topic=topic,
        body=rng.randbytes(rng.randrange(1, 600)),
        queue_id=rng.randrange(3),
        properties=properties,
        sys_flag=rng.choice(FLAGS),
    )


def _write_store(root: Path, rng: random.Random) -> StoreConfig:
    config = StoreConfig.for_tests(
        root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=16 * 1024,
        consume_queue_units_per_file=rng.choice((7, 20, 100)),
        index_items_max=rng.choice((5, 17, 64)),
        index_hash_slots=rng.choice((3, 16)),
    )
    with MessageStore(config).open() as store:
        for _ in range(rng.randrange(60, 160)):
            batch = [_message(rng) for _ in range(rng.choice((1, 1, 5, 32)))]
            if len({(m.topic, m.queue_id) for m in batch}) > 1:
                for msg in batch:
                    store.put_message(msg)
            else:
                store.put_messages(batch)
        assert store.wait_dispatched(store.commitlog.max_offset(), 30)
    return config


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _ordered(directory: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(directory.iterdir())]


Outcome = tuple[int, int, Damage | None]  # records, end offset, the stop reached


def _bulk(found: list[segments.Segment], target: StoreConfig, stop_at: Damage | None) -> Outcome:
    dispatcher = rebuilding.Dispatcher(target)
    reached = None
    for event in rebuilding.dispatch_events(found):
        assert not isinstance(event, Damage), event
        reached = dispatcher.dispatch_columns(event, stop_at)
        if reached is not None:
            break
    dispatcher.close()
    return dispatcher.records, dispatcher.end_offset, reached


def _one_by_one(
    found: list[segments.Segment], target: StoreConfig, stop_at: Damage | None
) -> Outcome:
    dispatcher = rebuilding.Dispatcher(target)
    reached = None
    for event in rebuilding.dispatch_events(found):
        assert not isinstance(event, Damage), event
        reached = dispatcher.dispatch_all(event.infos(), stop_at)
        if reached is not None:
            break
    dispatcher.close()
    return dispatcher.records, dispatcher.end_offset, reached


@pytest.mark.parametrize("seed", _seeds())
def test_bulk_rebuild_writes_the_brokers_bytes(seed: int, tmp_path: Path) -> None:
    print(f"seed {seed} (rerun with GANNET_TEST_SEED={seed})")
    rng = random.Random(seed)
    config = _write_store(tmp_path / "broker", rng)
    found = segments.find_segments(config.commitlog_dir)
    assert len(found) >= 3

    bulk = dataclasses.replace(config, root_dir=tmp_path / "bulk")
    single = dataclasses.replace(config, root_dir=tmp_path / "single")
    assert _bulk(found, bulk, None) == _one_by_one(found, single, None)

    assert _files(bulk.consume_queue_dir) == _files(config.consume_queue_dir)
    assert len(_files(config.consume_queue_dir)) > 4
    assert _ordered(bulk.index_dir) == _ordered(config.index_dir)
    assert len(_ordered(config.index_dir)) >= 3
    assert _files(bulk.index_dir) == _files(single.index_dir)  # names too: store times


@pytest.mark.parametrize("seed", _seeds())
def test_bulk_rebuild_stops_where_one_by_one_does(seed: int, tmp_path: Path) -> None:
    print(f"seed {seed} (rerun with GANNET_TEST_SEED={seed})")
    rng = random.Random(seed)
    config = _write_store(tmp_path / "broker", rng)
    found = segments.find_segments(config.commitlog_dir)
    middle = found[len(found) // 2]
    cut = rng.randrange(middle.start_offset, middle.start_offset + 8 * 1024)
    stop_at = Damage(middle.name, cut, middle.end_offset, "missing")

    bulk = dataclasses.replace(config, root_dir=tmp_path / "bulk")
    single = dataclasses.replace(config, root_dir=tmp_path / "single")
    records, end, reached = _bulk(found, bulk, stop_at)
    assert (records, end, reached) == _one_by_one(found, single, stop_at)
    assert reached == stop_at
    before_cut = sum(
        int((event.numbers[event.COMMIT] < cut).sum())
        for event in rebuilding.dispatch_events(found)
        if not isinstance(event, Damage)
    )
    assert 0 < records == before_cut
    assert _files(bulk.root_dir) == _files(single.root_dir)
