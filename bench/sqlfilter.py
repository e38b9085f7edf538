"""SQL92 filter benchmark at the store level: what a filtered Pop costs against an unfiltered one.

One topic (8 queues) holds ``count`` 1 KiB messages whose tags cycle through created, paid,
shipped, cancelled (a quarter each) and whose user properties are ``region`` (eu/us) and
``amount`` (0..399). A fresh group drains it with pop (batch 32) + batch ack for each filter:

* ``all``       — ``*``: every message (the baseline);
* ``tag``       — the tag expression ``paid``: the consume-queue tag hash decides;
* ``sql_tags``  — SQL92 ``TAGS = 'paid'``: the same, decided from the tag hash
  (:meth:`gannet.node.pop.sql_filter.SqlFilter.accepts_tags_code`), no record read for others;
* ``sql_tags_noprefilter`` — ``TAGS = 'paid' OR nothere = 'x'``, which selects the same
  messages but whose other branch the hash cannot decide: every record is read and its
  properties evaluated (what the prefilter saves);
* ``sql_props`` — ``region = 'eu' AND amount >= 200``: a quarter of the messages, decided only
  by the properties of every record.

Figures: CPU µs of the consuming thread (``time.thread_time``: steadier than wall time on a
shared machine) per delivered message and per stored message scanned, wall µs per delivered
message, commit-log record reads, and the ratio of CPU µs per delivered message to the
baseline. Also the evaluator alone (ns per
``matches`` call) and the property-only decode against a whole-record decode.

Run with ``make bench`` (``--quick``) or ``python -m bench.sqlfilter``. Results are appended to
``bench/results/sqlfilter.jsonl`` and written to ``bench/results/SQLFILTER.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import timeit
from pathlib import Path

from bench import results_log
from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop import filtering
from gannet.node.pop.config import PopConfig
from gannet.node.pop.filtering import MessageFilter
from gannet.node.pop.service import PopBroker
from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log import records
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

RESULTS = results_log.RESULTS
TOPIC, QUEUES = "SqlBench", 8
TAGS = ("created", "paid", "shipped", "cancelled")
SQL = filtering.ExpressionType.SQL92
SCENARIOS: dict[str, tuple[str, filtering.ExpressionType]] = {
    "all": ("*", filtering.ExpressionType.TAG),
    "tag": ("paid", filtering.ExpressionType.TAG),
    "sql_tags": ("TAGS = 'paid'", SQL),
    "sql_tags_noprefilter": ("TAGS = 'paid' OR nothere = 'x'", SQL),
    "sql_props": ("region = 'eu' AND amount >= 200", SQL),
}


def _message(i: int) -> Message:
    properties = {
        props.TAGS: TAGS[i % 4],
        props.KEYS: f"k{i}",
        "region": "eu" if (i // 4) % 2 == 0 else "us",
        "amount": str((i * 7) % 400),
    }
    return Message(topic=TOPIC, body=b"s" * 1024, queue_id=i % QUEUES, properties=properties)


def _drain(store: MessageStore, group: str, message_filter: MessageFilter) -> int:
    broker = PopBroker(store, PopConfig(), wait_durable=pop_flush_wait(store))
    received = idle = 0
    while idle < 3:
        now = time.time_ns() // 1_000_000
        result = broker.pop(
            group,
            TOPIC,
            max_msgs=32,
            invisible_time_ms=60_000,
            now_ms=now,
            tag_filter=message_filter,
        )
        if not result.messages:
            idle += 1
            continue
        errors = broker.ack_many(group, TOPIC, [m.handle for m in result.messages], now_ms=now)
        assert not any(errors), errors
        received += len(result.messages)
    broker.close()
    return received


def run_once(root: Path, count: int) -> dict[str, dict[str, float]]:
    config = StoreConfig(
        root_dir=root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=256 * 1024 * 1024,
        index_hash_slots=500_000,
        index_items_max=2_000_000,
    )
    figures: dict[str, dict[str, float]] = {}
    with MessageStore(config).open() as store:
        store.topic_configs.put(TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES))
        for start in range(0, count, 64):
            store.put_messages([_message(i) for i in range(start, min(count, start + 64))])
        store.wait_dispatched(store.commitlog.max_offset(), 120)
        reads = [0]
        original = store.commitlog.read

        def counting(offset: int, size: int) -> bytes | None:
            reads[0] += 1
            return original(offset, size)

        store.commitlog.read = counting  # type: ignore[method-assign]
        for name, (expression, kind) in SCENARIOS.items():
            group = f"G_{name}"
            store.group_configs.put(SubscriptionGroupConfig(group))
            reads[0] = 0
            t0, c0 = time.perf_counter(), time.thread_time()
            received = _drain(store, group, filtering.parse(expression, kind))
            elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
            figures[name] = {
                "received": received,
                "us_per_delivered": elapsed / max(1, received) * 1e6,
                "cpu_us_per_delivered": cpu / max(1, received) * 1e6,
                "cpu_us_per_scanned": cpu / count * 1e6,
                "record_reads": reads[0],
            }
    base = figures["all"]["cpu_us_per_delivered"]
    for f in figures.values():
        f["ratio_to_all"] = f["cpu_us_per_delivered"] / base
    return figures


def _ns(call: object, n: int) -> float:
    t0 = time.thread_time()
    timeit.timeit(call, number=n)  # type: ignore[arg-type]
    return (time.thread_time() - t0) / n * 1e9


def evaluator_figures() -> dict[str, float]:
    data = bytes(records.encode(_message(5), body_size_max_bytes=4 << 20))
    compiled = filtering.parse("region = 'eu' AND amount >= 200", SQL)
    assert isinstance(compiled, filtering.SqlFilter)
    properties = records.decode_properties(data)
    n = 20_000
    return {
        "matches_ns": _ns(lambda: compiled.compiled.matches(properties), n),
        "decode_properties_ns": _ns(lambda: records.decode_properties(data), n),
        "decode_record_ns": _ns(lambda: records.decode(data), n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    count = 20_000 if args.quick else 100_000
    repeat = 1 if args.quick else args.repeat
    base = Path(tempfile.mkdtemp(prefix="gannet-sql-bench-", dir=os.environ.get("BENCH_DIR")))
    runs = [run_once(base / str(n), count) for n in range(repeat)]
    results = {
        name: {k: statistics.median(r[name][k] for r in runs) for k in runs[0][name]}
        for name in SCENARIOS
    }
    micro = evaluator_figures()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    results_log.append(
        "sqlfilter",
        *({"scenario": name, "time": stamp, **figures} for name, figures in results.items()),
        {"scenario": "evaluator", "time": stamp, **micro},
    )
    lines = [
        "# SQL92 filter benchmark (store level, pop batch 32 + ack, ASYNC_FLUSH, 1 KiB)",
        "",
        f"{stamp}, median of {repeat} run(s), {count} messages (8 queues), a fresh group per "
        "filter. CPU: the consuming thread's. Ratio: CPU µs per delivered message against `*`.",
        "",
        "| filter | expression | delivered | record reads | CPU µs/delivered | CPU µs/scanned "
        "| wall µs/delivered | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in results.items():
        lines.append(
            f"| {name} | `{SCENARIOS[name][0]}` | {f['received']:,.0f} | "
            f"{f['record_reads']:,.0f} | {f['cpu_us_per_delivered']:.1f} | "
            f"{f['cpu_us_per_scanned']:.1f} | {f['us_per_delivered']:.1f} | "
            f"{f['ratio_to_all']:.2f} |"
        )
    lines += [
        "",
        f"Evaluator alone: `matches` {micro['matches_ns']:,.0f} ns; properties-only decode "
        f"{micro['decode_properties_ns']:,.0f} ns against a whole-record decode "
        f"{micro['decode_record_ns']:,.0f} ns.",
    ]
    text = "\n".join(lines) + "\n"
    (RESULTS / "SQLFILTER.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
