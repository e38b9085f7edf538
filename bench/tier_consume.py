"""Consuming through a real broker process: from local disk vs from the tier (issue 37).

Run with ``python -m bench.tier_consume`` (``make s3-tools`` first: it needs SeaweedFS's
``weed``; ``make bench`` runs it). One ``gannet broker run`` with a tier on a real SeaweedFS
S3 server on 127.0.0.1, 4 MiB commit-log files. ``--topics`` topics (one queue each) get
``--messages`` messages of 1 KiB each, one topic after the other, so each topic's records are
one contiguous range of the commit log. Every consumer reads its topic from queue offset 0 to
the end with Admin ``PullRecords`` (the stored records, 1024 per call), checking the count and
retrying an UNAVAILABLE answer (every tier fetch slot taken) after 10 ms, as a client would:

- ``local``: before anything is offloaded (``--tier-offload-after-s 3600``);
- the broker restarted with ``--tier-offload-after-s 0``; once every sealed file is offloaded
  and deleted locally, each repetition restarts it with ``<store>/tiercache/`` deleted:
  ``tier_cold`` (topics one after the other, empty caches), ``tier_warm_memory`` (again), then
  restarts it: ``tier_warm_disk`` (the disk cache survived, the memory cache did not);
- each repetition restarts it with ``--tier-cache-bytes 0``: ``tier_interleaved_cold`` — every
  topic's consumer at once, in its own thread (read-ahead per consumer).

Each phase runs ``--repetitions`` times (3); the medians are recorded.

The reader's counters the broker exports (GETs, bytes fetched, disk-cache hits, read-ahead
GETs) are recorded per phase from its ``/metrics``: unlike the rates, they do not depend on the
machine's load. MB/s counts the records' bytes; CPU per message is the **broker process's** CPU
time (user + system, from ``/proc``) over the messages read, the S3 server's and the consumers'
excluded.
Figures are appended to ``bench/results/tier_consume.jsonl`` with the load average: on a
shared machine compare runs taken side by side. ``--without-disk-cache --label before`` with
``PYTHONPATH=<an export of an older revision>/node`` measures a broker from before the disk
cache (its phases are skipped) for a paired comparison.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from bench import results_log
from e2e.tier import seaweedfs
from gannet.node.cli import calls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.tier import applied, manifests
from gannet.node.testing import small_stores

BODY = b"t" * 1024
COUNTERS = ("fetches", "fetched_bytes", "disk_cache_hits", "readahead_fetches", "readahead_dropped")
"""Reader counters recorded per phase (a broker from before the disk cache has only the first
two)."""
_COUNTER_LINE = r"^gannet_tier_(\w+)_total(?:\{[^}]*\})? (\S+)$"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Broker:
    """``gannet broker run`` with a tier, restarted with other options between phases."""

    def __init__(
        self, data_dir: Path, server: seaweedfs.SeaweedS3, options: tuple[str, ...] = ()
    ) -> None:
        self.data_dir = data_dir
        credentials = data_dir.parent / "credentials"
        credentials.write_text(
            f"aws_access_key_id = {server.access_key}\n"
            f"aws_secret_access_key = {server.secret_key}\n"
        )
        self.base = [
            sys.executable, "-m", "gannet.node.cli", "broker", "run",
            "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--file-size-mb", "4",
            *small_stores.INDEX_ARGS, "--flush", "async", "--event-loop", "asyncio",
            "--tier-endpoint", server.endpoint_url, "--tier-bucket", seaweedfs.BUCKET,
            "--tier-prefix", "bench/consume/g0", "--tier-credentials-file", str(credentials),
            "--tier-pass-interval-s", "0.2", "--tier-uploads-per-pass", "8", *options,
        ]  # fmt: skip
        self.metrics_port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.endpoint = ""

    def start(self, *options: str) -> None:
        self.metrics_port = seaweedfs.free_port()
        metrics = ("--metrics-listen", f"127.0.0.1:{self.metrics_port}")
        self.proc = subprocess.Popen(
            [*self.base, *metrics, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        seen: list[str] = []
        for line in self.proc.stdout:
            seen.append(line)
            if "broker serving" in line:
                break
        match = re.search(r"broker serving.* on (127\.0\.0\.1:\d+)", seen[-1])
        if match is None:
            raise RuntimeError("".join(seen))
        self.endpoint = match.group(1)
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # drain the log

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)

    def tier_counters(self) -> dict[str, float]:
        """The tier reader's counters (``gannet_tier_*_total``) the broker exports now."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        return {
            name: float(value)
            for name, value in re.findall(_COUNTER_LINE, text, re.MULTILINE)
            if name in COUNTERS
        }

    def cpu_s(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def produce(endpoint: str, topics: list[str], messages: int) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), topics)
    producer.startup()
    try:
        for topic in topics:
            for _ in range(messages):
                message = Message()
                message.topic = topic
                message.body = BODY
                producer.send(message)
    finally:
        producer.shutdown()


def consume(stub: admin_pb2_grpc.AdminStub, topic: str, messages: int, retries: list[int]) -> int:
    """Every record of ``topic``'s queue 0; returns the bytes read. An UNAVAILABLE answer (every
    tier fetch slot taken) is retried after 10 ms, as a client retries it, and counted."""
    offset = total_bytes = count = 0
    while count < messages:
        try:
            got = stub.PullRecords(
                admin_pb2.PullRecordsRequest(
                    topic=topic, queue_id=0, offset=offset, messages_max=1024
                ),
                timeout=60,
            )
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAVAILABLE or len(retries) > 10_000:
                raise
            retries.append(1)
            time.sleep(0.01)  # a client's retry backoff
            continue
        if not got.count:
            raise AssertionError(f"{topic}: {count} of {messages} messages, then none")
        count += got.count
        total_bytes += len(got.records)
        offset = got.next_offset
    return total_bytes


def measure(
    broker: Broker, topics: list[str], messages: int, *, interleaved: bool = False
) -> dict[str, float]:
    with calls.channel(broker.endpoint) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        sizes: list[int] = []
        retries: list[int] = []
        readers: list[Callable[[], None]] = [
            lambda t=t: sizes.append(consume(stub, t, messages, retries))  # type: ignore[misc]
            for t in topics
        ]
        counters = broker.tier_counters()
        wall, cpu = time.perf_counter(), broker.cpu_s()
        if interleaved:
            threads = [threading.Thread(target=reader) for reader in readers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            for reader in readers:
                reader()
        wall, cpu = time.perf_counter() - wall, broker.cpu_s() - cpu
        after = broker.tier_counters()
    if len(sizes) != len(topics):
        raise AssertionError("a consumer failed")
    count = messages * len(topics)
    return {
        "mb_per_s": round(sum(sizes) / wall / 1e6, 1),
        "broker_cpu_us_per_msg": round(cpu / count * 1e6, 1),
        "messages": count,
        "seconds": round(wall, 2),
        "retries": len(retries),
        **{name: after[name] - counters.get(name, 0.0) for name in after},
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the runs of one phase (and how many runs)."""
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]} | {
        "runs": len(runs)
    }


def await_offloaded(data_dir: Path, timeout_s: float = 300.0) -> int:
    """Wait until every sealed commit-log file is in the manifest and gone locally."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = applied.manifest_path(data_dir)
        local = sorted((data_dir / "commitlog").iterdir())
        if path.exists() and len(local) == 1:
            manifest = manifests.decode(path.read_bytes())
            if manifest.end_offset == int(local[0].name):
                return len(manifest.objects)
        time.sleep(0.2)  # polling files another process writes, with a deadline
    raise AssertionError("the sealed files were not offloaded in time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--messages", type=int, default=16000, help="per topic")
    parser.add_argument("--repetitions", type=int, default=3, help="runs of each phase")
    parser.add_argument(
        "--label", default="", help="a name for the code measured, e.g. before/after a change"
    )
    parser.add_argument(
        "--without-disk-cache",
        action="store_true",
        help="a broker without --tier-cache-bytes (a baseline from before the disk cache, run "
        "with PYTHONPATH=<an export of that revision>/node): the disk-cache phases are skipped",
    )
    parser.add_argument(
        "--memory-cache-mib",
        type=int,
        default=256,
        help="--tier-memory-cache-bytes of the broker (256: the memory cache's size before the "
        "disk cache, so the phases compare like for like; not passed with --without-disk-cache)",
    )
    args = parser.parse_args()
    no_disk = () if args.without_disk_cache else ("--tier-cache-bytes", "0")
    memory_bytes = str(args.memory_cache_mib << 20)
    memory = () if args.without_disk_cache else ("--tier-memory-cache-bytes", memory_bytes)
    topics = [f"TierConsume{i}" for i in range(args.topics)]
    figures: dict[str, object] = {}
    with (
        tempfile.TemporaryDirectory(prefix="gannet-tier-consume-") as tmp,
        seaweedfs.SeaweedS3() as server,
    ):
        broker = Broker(Path(tmp) / "store", server, memory)
        try:
            broker.start("--tier-offload-after-s", "3600")
            with calls.channel(broker.endpoint) as channel:
                stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
                for topic in topics:
                    stub.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=1))
            produce(broker.endpoint, topics, args.messages)
            runs: dict[str, list[dict[str, float]]] = {}

            def run(phase: str, *, interleaved: bool = False) -> None:
                runs.setdefault(phase, []).append(
                    measure(broker, topics, args.messages, interleaved=interleaved)
                )

            for _ in range(args.repetitions):
                run("local")
            broker.stop()
            broker.start("--tier-offload-after-s", "0")
            figures["objects"] = await_offloaded(broker.data_dir)
            for _ in range(args.repetitions):
                broker.stop()
                shutil.rmtree(broker.data_dir / "tiercache", ignore_errors=True)
                broker.start("--tier-offload-after-s", "0")  # empty caches
                run("tier_cold")
                run("tier_warm_memory")
                if not args.without_disk_cache:
                    broker.stop()
                    broker.start("--tier-offload-after-s", "0")
                    run("tier_warm_disk")
            for _ in range(args.repetitions):
                broker.stop()
                broker.start("--tier-offload-after-s", "0", *no_disk)
                run("tier_interleaved_cold", interleaved=True)
            figures.update({phase: median_of(measured) for phase, measured in runs.items()})
        finally:
            broker.stop()
    result = {
        "bench": "tier_consume",
        "label": args.label,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": os.getloadavg()[0],
        "topics": args.topics,
        "messages_per_topic": args.messages,
        "body_bytes": len(BODY),
        "repetitions": args.repetitions,
        **figures,
    }
    results_log.append("tier_consume", result)
    print(result)


if __name__ == "__main__":
    main()
