"""Store-open benchmark with a timer backlog: how long a store that holds N delayed messages
takes to close and open again, and how much of the open is the timer service's load (the timer
store's recovery and the rebuild of the per-topic delayed-message figures a drain waits for).

Run with ``python -m bench.timer_open`` (``--quick``: 200k messages only). Each scenario parks N
delayed messages of 1 KiB (ASYNC_FLUSH, batches of 256, spread over ``--topics`` topics) in a
store with RocketMQ's default wheel (7 days of 1 s slots, a 2-day roll window), lets the timer
thread take them all into the wheel, closes the store (timed) and opens it again (timed, with
its services, as a broker does). ``short`` delays lie within the roll window (1 hour, spread
over 3,600 slots); ``rolled`` delays lie beyond it (2.5 days), so every entry is a ROLL entry
whose wheel slot is not its due time. After the open the benchmark checks that every topic's
figure counts exactly its messages (a wrong figure fails the run instead of being recorded).

Figures are appended to ``bench/results/timer_open.jsonl`` and summarised in
``bench/results/TIMER_OPEN.md`` with the machine's load average: on a shared machine the
seconds move with the load, so compare runs taken side by side (``--before LABEL``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import results_log
from gannet.node.store import properties as props
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

RESULTS = results_log.RESULTS
BODY_1K = b"t" * 1024
PUT_BATCH = 256
HOUR_MS = 3_600_000
DELAYS_MS = {"short": HOUR_MS, "rolled": 60 * HOUR_MS}  # 1 h, and 2.5 days (> 2-day window)
ENQUEUE_WAIT_S = 3_600.0


def make_config(root: Path) -> StoreConfig:
    return StoreConfig(
        root_dir=root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=256 * 1024 * 1024,
        consume_queue_units_per_file=300_000,
        index_hash_slots=500_000,
        index_items_max=2_000_000,
        # The disk is shared with other work: refusing writes at 85 % (parked messages have no
        # consumer, so cleanup frees nothing) would stop a run because of others' files.
        disk_max_used_ratio_percent=95,
        disk_warning_ratio=0.98,
        disk_clean_forcibly_ratio=0.97,
    )


def topic_name(i: int) -> str:
    return f"DelayedTopic{i}"


def park(store: MessageStore, count: int, topics: int, delay_ms: int) -> None:
    """Append ``count`` delayed messages, due over the hour that starts ``delay_ms`` from now."""
    base_ms = time.time_ns() // 1_000_000 + delay_ms
    for start in range(0, count, PUT_BATCH):
        batch = []
        for i in range(start, min(count, start + PUT_BATCH)):
            due = base_ms + (i * 1_000) % HOUR_MS
            batch.append(
                Message(
                    topic=topic_name(i % topics),
                    body=BODY_1K,
                    queue_id=i % 4,
                    properties={props.TIMER_DELIVER_MS: str(due)},
                )
            )
        store.put_messages(batch)


def wait_until(what: str, done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s} s waiting until {what}")
        time.sleep(0.2)


def expected_counts(count: int, topics: int) -> dict[str, int]:
    return {topic_name(t): len(range(t, count, topics)) for t in range(topics)}


def run_scenario(root: Path, count: int, topics: int, delay_ms: int) -> dict[str, float]:
    config = make_config(root)
    store = MessageStore(config).open()
    t0 = time.perf_counter()
    park(store, count, topics, delay_ms)
    park_s = time.perf_counter() - t0
    store.wait_dispatched(store.commitlog.max_offset(), ENQUEUE_WAIT_S)
    wait_until("the wheel holds every message", lambda: store.timers.backlog() >= count, 3_600)
    enqueue_s = time.perf_counter() - t0 - park_s
    t1 = time.perf_counter()
    store.close()
    close_s = time.perf_counter() - t1

    reopened = MessageStore(config)
    timers = reopened.timers
    load_timer = {"s": 0.0}
    real_load = timers.load

    def timed_load(commit_log_end: int) -> None:
        started = time.perf_counter()
        real_load(commit_log_end)
        load_timer["s"] = time.perf_counter() - started

    timers.load = timed_load  # type: ignore[method-assign]
    t2 = time.perf_counter()
    reopened.open()
    open_s = time.perf_counter() - t2
    try:
        counted_s = wait_counted(reopened, t2)
        check_figures(reopened, expected_counts(count, topics))
    finally:
        reopened.close()
    return {
        "messages": count,
        "topics": topics,
        "park_s": park_s,
        "enqueue_s": enqueue_s,
        "close_s": close_s,
        "open_s": open_s,
        "timers_load_s": load_timer["s"],
        "counted_after_open_s": counted_s,
    }


def wait_counted(store: MessageStore, opened_at: float) -> float:
    """Seconds from the start of the open until the figures are counted. Gannet rebuilds them
    inside the open, so this is the open's time; a timer service that rebuilt them in the
    background would say so with a ``counted`` attribute, waited for here, so that both
    designs are compared on the moment a drain can trust the figures."""
    if hasattr(store.timers, "counted"):
        timers = store.timers
        wait_until("the delayed figures are counted", lambda: bool(timers.counted), 3_600)
    return time.perf_counter() - opened_at


def check_figures(store: MessageStore, expected: dict[str, int]) -> None:
    got = {topic: store.timers.pending_of(topic).messages for topic in expected}
    if got != expected:
        raise SystemExit(f"wrong delayed-message figures after the open: {got} != {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200k messages only")
    parser.add_argument("--counts", default="200000,1000000", help="messages per scenario")
    parser.add_argument("--kinds", default="short,rolled", help="short and/or rolled delays")
    parser.add_argument("--rolled-max", type=int, default=200_000, help="largest rolled run")
    parser.add_argument("--topics", type=int, default=16)
    parser.add_argument("--label", default="", help="recorded with the figures (e.g. a commit)")
    parser.add_argument("--before", metavar="LABEL", help="show a recorded run side by side")
    args = parser.parse_args()
    counts = [200_000] if args.quick else [int(c) for c in args.counts.split(",")]
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-timers-", dir=os.environ.get("BENCH_DIR")))
    results: dict[str, dict[str, float]] = {}
    load_before = os.getloadavg()[0]
    try:
        for kind in args.kinds.split(","):
            for count in counts:
                if kind == "rolled" and count > args.rolled_max:
                    continue
                root = base / f"{kind}-{count}"
                figures = run_scenario(root, count, args.topics, DELAYS_MS[kind])
                results[f"{kind}_{count}"] = figures
                print(kind, json.dumps(figures), flush=True)
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(results, args.label, f"{load_before:.1f} → {os.getloadavg()[0]:.1f}", args.before)


def report(results: dict[str, dict[str, float]], label: str, load: str, before: str | None) -> None:
    meta, earlier, earlier_load = results_log.record(
        "timer_open", results, label=label, load=load, before=before
    )
    lines = [
        "# Store open with a timer backlog",
        "",
        f"{meta['time']}, Python {meta['python']}, {meta['cpus']} CPUs, 1 KiB bodies"
        + (f", code {label}" if label else "")
        + f"; 1-minute load average {load} (other work shared the machine).",
        "",
    ]
    if earlier:
        lines += [
            f"Side by side with the run labelled {before!r} (same workload and machine; its load "
            f"average {earlier_load}).",
            "",
        ]
    lines += results_log.figure_rows(results, earlier, str(before), label)
    text = "\n".join(lines) + "\n"
    (RESULTS / "TIMER_OPEN.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
