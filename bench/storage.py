"""Storage-engine benchmark: appends/s and MB/s (ASYNC and SYNC group commit), reads/s by
queue offset, key-query latency and recovery time per GiB.

Run with ``make bench`` (``--quick``) or ``python -m bench.storage``. Each figure is the median
of ``--repeat`` runs after a warm-up; results are appended as JSON lines to
``bench/results/storage.jsonl`` and summarised in ``bench/results/STORAGE.md``.

The SYNC figure is compared with the disk's own ceiling measured the same way: sequential
appends of 64 KiB (64 producers × 1 KiB, the group a sync covers) each followed by
``fdatasync`` on a preallocated file in the same directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import results_log
from gannet.node.store import querying
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

RESULTS = results_log.RESULTS
BODY_1K = b"x" * 1024


def make_config(root: Path, mode: FlushMode) -> StoreConfig:
    return StoreConfig(
        root_dir=root,
        flush_mode=mode,
        commitlog_file_size_bytes=256 * 1024 * 1024,
        consume_queue_units_per_file=300_000,
        index_hash_slots=500_000,
        index_items_max=2_000_000,
    )


def message(i: int, topic: str = "BenchTopic") -> Message:
    return Message(topic=topic, body=BODY_1K, queue_id=i % 8, properties={"KEYS": f"k{i}"})


def attach_broker_listeners(store: MessageStore) -> None:
    """The arrival listeners a broker attaches to its store (send dedup, Pop long polling,
    transactions), each idle as in a produce-only run: what dispatch pays per record for them."""
    from gannet.node.api.dedup import SendDeduplicator
    from gannet.node.pop.config import PopConfig
    from gannet.node.pop.polling import PollWaiters
    from gannet.node.transactions.service import TransactionService

    SendDeduplicator(store)
    PollWaiters(PopConfig()).attach(store)
    TransactionService(store)


def bench_async_appends(
    root: Path, count: int, batch: int, *, broker_listeners: bool = False
) -> dict[str, float]:
    with MessageStore(make_config(root, FlushMode.ASYNC_FLUSH)).open() as store:
        if broker_listeners:
            attach_broker_listeners(store)
        msgs = [message(i) for i in range(batch)]
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        done = 0
        while done < count:
            store.put_messages_nowait([m.copy() for m in msgs])
            done += batch
        elapsed = time.perf_counter() - t0
        end = store.commitlog.max_offset()
        t1 = time.perf_counter()
        store.wait_dispatched(end, 300)
        dispatch_elapsed = time.perf_counter() - t1
        cpu_s = time.process_time() - cpu0
    return {
        "appends_per_s": done / elapsed,
        "mb_per_s": end / elapsed / 1e6,
        "dispatch_catch_up_s": dispatch_elapsed,
        "cpu_us_per_msg": cpu_s / done * 1e6,
    }


def bench_sync_appends(
    root: Path, producers: int, per_producer: int, batch: int = 1
) -> dict[str, float]:
    """SYNC_FLUSH with ``producers`` concurrent asyncio writers, as the gRPC broker runs them:
    each appends ``batch`` messages and awaits their durability before the next append."""

    async def run(store: MessageStore) -> float:
        waiters = store.durable_waiters(asyncio.get_running_loop())

        async def producer(p: int) -> None:
            for i in range(0, per_producer, batch):
                first = p * per_producer + i
                msgs = [message(first + j) for j in range(batch)]
                _, durable_at = store.put_messages_nowait(msgs)
                if durable_at is not None:
                    await waiters.wait(durable_at)

        t0 = time.perf_counter()
        await asyncio.gather(*(producer(p) for p in range(producers)))
        return time.perf_counter() - t0

    with MessageStore(make_config(root, FlushMode.SYNC_FLUSH)).open() as store:
        elapsed = asyncio.run(run(store))
        total = producers * per_producer
        syncs = store.flush.flush_count if store.flush else 0
        end = store.commitlog.max_offset()
    return {
        "appends_per_s": total / elapsed,
        "mb_per_s": end / elapsed / 1e6,
        "messages_per_sync": total / max(1, syncs),
    }


def disk_fdatasync_mb_per_s(root: Path, chunk_bytes: int, seconds: float) -> float:
    path = root / "fdatasync-probe"
    size = 512 * 1024 * 1024
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        chunk = b"y" * chunk_bytes
        pos = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds and pos + chunk_bytes <= size:
            os.pwrite(fd, chunk, pos)
            os.fdatasync(fd)
            pos += chunk_bytes
        return pos / (time.perf_counter() - t0) / 1e6
    finally:
        os.close(fd)
        path.unlink()


def bench_reads_and_queries(root: Path, count: int) -> dict[str, float]:
    with MessageStore(make_config(root, FlushMode.ASYNC_FLUSH)).open() as store:
        for start in range(0, count, 64):
            store.put_messages([message(i) for i in range(start, min(count, start + 64))])
        store.wait_dispatched(store.commitlog.max_offset(), 300)
        t0 = time.perf_counter()
        read = 0
        for q in range(8):
            offset = 0
            while True:
                got = store.get_messages("BenchTopic", q, offset, 32)
                if not got.messages:
                    break
                read += len(got.messages)
                offset = got.next_begin_offset
        read_elapsed = time.perf_counter() - t0
        lat: list[float] = []
        for i in range(0, count, max(1, count // 500)):
            t = time.perf_counter()
            found = querying.by_key(store, "BenchTopic", f"k{i}")
            lat.append(time.perf_counter() - t)
            assert found.messages, f"key k{i} not found"
    lat.sort()
    return {
        "reads_per_s": read / read_elapsed,
        "key_query_p50_ms": lat[len(lat) // 2] * 1e3,
        "key_query_p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
    }


def bench_recovery(root: Path, megabytes: int) -> dict[str, float]:
    store = MessageStore(make_config(root, FlushMode.ASYNC_FLUSH)).open()
    count = megabytes * 1024 * 1024 // 1100
    for start in range(0, count, 256):
        store.put_messages([message(i) for i in range(start, min(count, start + 256))])
    size = store.commitlog.max_offset()
    store.abandon()  # abnormal exit: full CRC scan from the checkpoint's safe point
    t0 = time.perf_counter()
    reopened = MessageStore(make_config(root, FlushMode.ASYNC_FLUSH)).open(start_services=False)
    elapsed = time.perf_counter() - t0
    scanned = reopened.recovery.records_scanned if reopened.recovery else 0
    reopened.close()
    return {"recovery_s_per_gib": elapsed / size * 2**30, "records_scanned": scanned}


def median_of(repeat: int, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
    runs = [fn() for _ in range(repeat)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts (make bench)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--appends-only",
        action="store_true",
        help="only the ASYNC append figures (and 32 per put with a broker's arrival listeners"
        " attached), printed, not recorded (paired before/after runs)",
    )
    parser.add_argument("--label", default="", help="recorded with the figures (e.g. a commit)")
    parser.add_argument(
        "--before",
        metavar="LABEL",
        help="show the latest recorded run with this label side by side in STORAGE.md",
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        run_all(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_all(args: argparse.Namespace, base: Path) -> None:
    n = 100_000 if args.quick else 500_000
    counter = iter(range(1_000_000))

    def fresh() -> Path:
        """A new store directory; the previous run's files are deleted (256 MiB each)."""
        for old in base.iterdir():
            shutil.rmtree(old, ignore_errors=True)
        d = base / str(next(counter))
        d.mkdir()
        return d

    results: dict[str, dict[str, float]] = {}
    load_before = os.getloadavg()[0]
    bench_async_appends(fresh(), 20_000, 1)  # warm-up
    results["async_1_per_put"] = median_of(args.repeat, lambda: bench_async_appends(fresh(), n, 1))
    results["async_32_per_put"] = median_of(
        args.repeat, lambda: bench_async_appends(fresh(), n, 32)
    )
    if args.appends_only:
        results["async_32_per_put_broker_listeners"] = median_of(
            args.repeat, lambda: bench_async_appends(fresh(), n, 32, broker_listeners=True)
        )
        print(json.dumps(results))
        return
    results["sync_64_producers"] = median_of(
        args.repeat, lambda: bench_sync_appends(fresh(), 64, n // 64 // 2)
    )
    results["sync_64_producers_batch32"] = median_of(
        args.repeat, lambda: bench_sync_appends(fresh(), 64, n // 64 // 32 * 32, 32)
    )
    disk = disk_fdatasync_mb_per_s(fresh(), 64 * 1100, 3.0)
    results["disk_fdatasync_64k"] = {"mb_per_s": disk}
    for name in ("sync_64_producers", "sync_64_producers_batch32"):
        results[name]["ratio_of_disk"] = results[name]["mb_per_s"] / disk
    results["reads_and_queries"] = median_of(1, lambda: bench_reads_and_queries(fresh(), n))
    results["recovery"] = median_of(1, lambda: bench_recovery(fresh(), 128 if args.quick else 512))
    load = f"{load_before:.1f} → {os.getloadavg()[0]:.1f}"
    report(results, args.label, load, args.before)


def report(results: dict[str, dict[str, float]], label: str, load: str, before: str | None) -> None:
    meta, earlier, earlier_load = results_log.record(
        "storage", results, label=label, load=load, before=before
    )
    lines = [
        "# Storage benchmark",
        "",
        f"{meta['time']}, Python {meta['python']}, {meta['cpus']} CPUs, 1 KiB bodies"
        + (f", code {label}" if label else "")
        + f"; 1-minute load average {load} (other work shared the machine).",
        "",
    ]
    if earlier:
        lines += [
            f"Side by side with the run labelled {before!r} (same workload, same machine, "
            f"same session; its load average {earlier_load}). "
            "CPU µs per message is process CPU time (appending and dispatch "
            "threads) over the messages appended: less sensitive to the machine's load than "
            "the rates. Rates of paths a change did not touch (reads, recovery, the disk "
            "probe) show how much the load differed between the two runs.",
            "",
        ]
    lines += results_log.figure_rows(results, earlier, str(before), label)
    text = "\n".join(lines) + "\n"
    (RESULTS / "STORAGE.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
