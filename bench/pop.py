"""Pop benchmark at the store level: pop + ack throughput (batch 32) and the cost of the
checkpoint/ack bookkeeping, with and without in-memory ack matching.

Run with ``make bench`` or ``python -m bench.pop``. The store runs ASYNC_FLUSH; the consumer
pops 32 messages, acks them in one batch, and repeats until the topic is drained. Results are
appended to ``bench/results/pop.jsonl`` and ``bench/results/POP.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench import results_log
from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.config import PopConfig
from gannet.node.pop.service import PopBroker
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

RESULTS = results_log.RESULTS
TOPIC, GROUP, QUEUES = "PopBench", "PopBenchGroup", 8


def run_once(root: Path, count: int, *, buffer_merge: bool) -> dict[str, float]:
    config = StoreConfig(
        root_dir=root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=256 * 1024 * 1024,
        index_hash_slots=500_000,
        index_items_max=2_000_000,
    )
    with MessageStore(config).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES))
        store.group_configs.put(SubscriptionGroupConfig(GROUP))
        for start in range(0, count, 64):
            store.put_messages(
                [
                    Message(topic=TOPIC, body=b"p" * 1024, queue_id=i % QUEUES)
                    for i in range(start, min(count, start + 64))
                ]
            )
        store.wait_dispatched(store.commitlog.max_offset(), 120)
        log_before = store.commitlog.max_offset()
        broker = PopBroker(
            store,
            PopConfig(buffer_merge_enabled=buffer_merge),
            wait_durable=pop_flush_wait(store),
        )
        received = 0
        idle_rounds = 0
        t0 = time.perf_counter()
        while received < count and idle_rounds < 50:
            now = time.time_ns() // 1_000_000
            result = broker.pop(GROUP, TOPIC, max_msgs=32, invisible_time_ms=60_000, now_ms=now)
            if not result.messages:
                idle_rounds += 1
                continue
            errors = broker.ack_many(GROUP, TOPIC, [m.handle for m in result.messages], now_ms=now)
            assert not any(errors), errors
            received += len(result.messages)
        elapsed = time.perf_counter() - t0
        bookkeeping_bytes = store.commitlog.max_offset() - log_before
        broker.close()
    return {
        "pop_ack_msgs_per_s": received / elapsed,
        "us_per_msg": elapsed / max(1, received) * 1e6,
        "ck_ack_bytes_per_msg": bookkeeping_bytes / max(1, received),
        "received": received,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    count = 20_000 if args.quick else 100_000
    base = Path(tempfile.mkdtemp(prefix="gannet-pop-bench-", dir=os.environ.get("BENCH_DIR")))
    results: dict[str, dict[str, float]] = {}
    n = 0
    try:
        for merge in (True, False):
            runs = []
            for _ in range(args.repeat):
                n += 1
                runs.append(run_once(base / str(n), count, buffer_merge=merge))
                shutil.rmtree(base / str(n), ignore_errors=True)  # up to 2.6 GB a run
            name = "in_memory_matching" if merge else "stored_ck_ack_only"
            results[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    results_log.append(
        "pop", *({"scenario": name, "time": stamp, **figures} for name, figures in results.items())
    )
    lines = [
        "# Pop benchmark (store level, batch 32, ASYNC_FLUSH, 1 KiB)",
        "",
        f"{stamp}, median of {args.repeat} runs, {count} messages each.",
        "",
        "| mode | pop+ack msgs/s | µs per msg | CK/ACK bytes per msg |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, f in results.items():
        lines.append(
            f"| {name} | {f['pop_ack_msgs_per_s']:,.0f} | {f['us_per_msg']:.1f} | "
            f"{f['ck_ack_bytes_per_msg']:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    (RESULTS / "POP.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
