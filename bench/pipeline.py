"""Pipeline benchmark: the Spark bulk jobs and the ``gannet`` data source, in MB/s.

* **export** and **rebuild** (:mod:`gannet.pipeline.jobs`) on Spark ``local[2]``, in MB/s of
  commit log, against the same work in one process without Spark: ``export_1proc`` runs
  :func:`gannet.pipeline.exporting.export_segment` over the segments in a loop
  (``export_1proc_cpu``: its CPU time, less sensitive to a loaded machine), and
  ``dispatch_1proc`` is the broker's dispatch chain (consume-queue put then index build, the
  store's own classes via :class:`gannet.pipeline.rebuilding.Dispatcher`) fed by one sequential
  scan — a store rebuild without Spark. ``driver_bulk``/``driver_one_by_one``: the rebuild
  driver's dispatch alone (bulk writer against one ``DispatchInfo`` per record), on columns
  parsed beforehand; ``spark_one_task_job_s``: an empty one-task job, Spark's fixed cost.
* **Scaling with segment count:** the same commit log (``--total-mib``) is written with files
  of ``total / segments`` bytes for each segment count, so a row shows how splitting the same
  bytes into more Spark tasks changes throughput (``local[2]``: at most two run at once).
* **datasource_read**: ``spark.read.format("gannet")`` of a topic on an in-process broker
  (Admin PullRecords; after a warm-up read), MB/s of message bodies, against ``pull_1proc``:
  the same queues read with v2 PullMessage (one stream frame per message) in a loop in one
  process, and ``pull_records_1proc``: with Admin PullRecords (the stored records in one reply)
  turned into Arrow batches, as a Spark task does.
* **worker_cpu**: CPU time per message of the Python side of a read, in one process: turning
  pulled v2 messages into what Spark takes, as Arrow batches (:func:`rows.messages_batch`)
  and PullRecords replies of the same messages into Arrow batches (``records_batch``: what a
  task does now), against the tuple-per-row path they replaced (a tuple per message, then
  pyspark's own ``records_to_arrow_batches``, which the Python worker ran on them). CPU time is less
  sensitive to a loaded machine than wall time.
* **spark_kafka_read**: Spark's own Kafka source (spark-sql-kafka, jars from Maven Central via
  ``bench/spark_kafka/pom.xml``) reading the same number of 1 KiB messages from the Kafka peer
  (:mod:`bench.peers.kafka`, 4 partitions like the 4 queues), in the same Spark session and
  run. Skipped, with the reason in the report, when Maven, Java or confluent-kafka are missing
  (``make bench-peers`` installs them) or with ``--no-kafka``.

Run with ``make bench`` (``--quick``, under 2 minutes on 2 idle cores) or ``python -m
bench.pipeline`` (``--read-messages`` sets the read's size alone, e.g. the full run's 100,000
with ``--quick``'s segments; ``--segments-only`` runs export and rebuild alone). Results are
appended to ``bench/results/pipeline.jsonl`` and summarised in ``bench/results/PIPELINE.md``.
Machine load matters: the figures are for the machine as it was; compare ratios within one
run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import results_log
from bench.peers import kafka, processes
from bench.peers.base import Layout
from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records
from gannet.node.store.log.records import DispatchInfo, Message
from gannet.node.store.message_store import MessageStore
from gannet.pipeline import columns, exporting, jobs, rebuilding, rows, segments
from gannet.pipeline.calling import BrokerConnection
from gannet.pipeline.rows import MessageIds, row_message

RESULTS = results_log.RESULTS
BODY_BYTES = 1024
CQ_UNITS_PER_FILE = 300_000
INDEX_HASH_SLOTS = 500_000
INDEX_ITEMS_MAX = 2_000_000
SEGMENT_SLACK_BYTES = 128 * 1024
SPARK_KAFKA_VERSION = "4.2.0"  # must equal <spark.version> in spark_kafka/pom.xml
SPARK_KAFKA_POM = Path(__file__).parent / "spark_kafka" / "pom.xml"
SPARK_KAFKA_JARS = (  # what Spark itself lacks; the rest of the tree Spark ships
    "spark-sql-kafka-0-10_2.13-",
    "spark-token-provider-kafka-0-10_2.13-",
    "kafka-clients-",
    "commons-pool2-",
)
KAFKA_READ_TOPIC = "BenchRead"
KAFKA_READ_PARTITIONS = 4


def store_config(root: Path, segment_bytes: int) -> StoreConfig:
    return StoreConfig(
        root_dir=root,
        flush_mode=FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=segment_bytes,
        consume_queue_units_per_file=CQ_UNITS_PER_FILE,
        index_hash_slots=INDEX_HASH_SLOTS,
        index_items_max=INDEX_ITEMS_MAX,
    )


def write_store(root: Path, total_bytes: int, segments_wanted: int) -> tuple[StoreConfig, int]:
    """A store of at most ``total_bytes`` of 1 KiB messages in ``segments_wanted`` files.

    Commit-log files are preallocated to their full size and a record never straddles two,
    so each file gets :data:`SEGMENT_SLACK_BYTES` of room beyond its share.
    """
    config = store_config(root, total_bytes // segments_wanted + SEGMENT_SLACK_BYTES)
    body = b"m" * BODY_BYTES
    with MessageStore(config).open() as store:
        written = i = 0
        while written < total_bytes - SEGMENT_SLACK_BYTES:
            batch = [
                Message(
                    topic=f"Bench{(i + j) % 4}",
                    body=body,
                    queue_id=(i + j) % 8,
                    properties={"KEYS": f"k{i + j}", "TAGS": "t"},
                )
                for j in range(64)
            ]
            results = store.put_messages(batch)
            written = results[-1].wrote_offset + results[-1].wrote_bytes
            i += 64
        store.wait_dispatched(store.commitlog.max_offset(), 300)
    return config, written


def store_scan_infos(found: list[segments.Segment]) -> Iterator[DispatchInfo]:
    """Dispatch infos of clean segments, parsed record by record by the store's own
    ``check_record`` (through :func:`gannet.pipeline.segments.scan`)."""
    for segment in found:
        with segments.mapped(segment) as buf:
            for event in segments.scan(buf, segment, check_crc=True):
                assert not isinstance(event, segments.Damage), event
                if isinstance(event, segments.Record):
                    yield event.info._replace(properties={})


def _mb_per_s(size_bytes: int, elapsed_s: float) -> float:
    return size_bytes / elapsed_s / 1e6


def bench_segments(spark: Any, base: Path, total_bytes: int, count: int) -> dict[str, float]:
    """Export and rebuild with and without Spark for one segment count."""
    root = base / f"store-{count}"
    config, size = write_store(root, total_bytes, count)  # size: bytes of records
    found = segments.find_segments(config.commitlog_dir)
    assert len(found) == count, (len(found), count)

    out = base / f"export-spark-{count}"
    report = jobs.export(spark, config.root_dir, str(out))
    export_spark_s = report.elapsed_s
    shutil.rmtree(out)

    out = base / f"export-1proc-{count}"
    started, cpu_started = time.perf_counter(), time.process_time()
    for segment in found:
        exporting.export_segment(segment, jobs.KEEP_ALL, str(out))
    export_1proc_s = time.perf_counter() - started
    export_1proc_cpu_s = time.process_time() - cpu_started
    shutil.rmtree(out)

    target = store_config(base / f"rebuild-spark-{count}", config.commitlog_file_size_bytes)
    rebuilt = jobs.rebuild(spark, config.root_dir, target)
    assert rebuilt.stopped_at is None, rebuilt.stopped_at
    rebuild_spark_s = rebuilt.elapsed_s

    target = store_config(base / f"rebuild-1proc-{count}", config.commitlog_file_size_bytes)
    started = time.perf_counter()
    dispatcher = rebuilding.Dispatcher(target)
    for info in store_scan_infos(found):
        dispatcher.dispatch(info)
    dispatcher.close()
    dispatch_1proc_s = time.perf_counter() - started
    assert dispatcher.records == rebuilt.records
    driver = driver_dispatch_s(found, base, config.commitlog_file_size_bytes, count)
    started = time.perf_counter()
    spark.sparkContext.parallelize([0], 1).count()
    spark_job_s = time.perf_counter() - started
    shutil.rmtree(root)
    return {
        "segments": float(len(found)),
        "commitlog_mib": size / 2**20,
        "messages": float(rebuilt.records),
        "export_spark_mb_per_s": _mb_per_s(size, export_spark_s),
        "export_1proc_mb_per_s": _mb_per_s(size, export_1proc_s),
        "export_1proc_cpu_mb_per_s": _mb_per_s(size, export_1proc_cpu_s),
        "rebuild_spark_mb_per_s": _mb_per_s(size, rebuild_spark_s),
        "dispatch_1proc_mb_per_s": _mb_per_s(size, dispatch_1proc_s),
        "rebuild_spark_vs_dispatch": dispatch_1proc_s / rebuild_spark_s,
        "driver_bulk_mb_per_s": _mb_per_s(size, driver["bulk"]),
        "driver_one_by_one_mb_per_s": _mb_per_s(size, driver["one_by_one"]),
        "spark_one_task_job_s": spark_job_s,
    }


def driver_dispatch_s(
    found: list[segments.Segment], base: Path, file_size_bytes: int, count: int
) -> dict[str, float]:
    """The rebuild driver's part alone, on dispatch columns parsed beforehand (untimed) as the
    executors send them: ``bulk`` = :meth:`rebuilding.Dispatcher.dispatch_columns` (what
    :func:`jobs.rebuild` runs), ``one_by_one`` = one ``DispatchInfo`` per record through
    ``Dispatcher.dispatch_all`` (what it ran before)."""
    events = [e for e in rebuilding.dispatch_events(found) if not isinstance(e, segments.Damage)]
    timings: dict[str, float] = {}
    for name in ("one_by_one", "bulk"):
        target = store_config(base / f"driver-{name}-{count}", file_size_bytes)
        started = time.perf_counter()
        dispatcher = rebuilding.Dispatcher(target)
        for event in events:
            if name == "bulk":
                dispatcher.dispatch_columns(event, None)
            else:
                dispatcher.dispatch_all(event.infos(), None)
        dispatcher.close()
        timings[name] = time.perf_counter() - started
    return timings


def bench_datasource(spark: Any, base: Path, messages: int) -> dict[str, float]:
    """Read a topic through the broker with the data source and with a plain pull loop."""
    store = store_config(base / "broker", 64 * 2**20)
    running = threads.start(BrokerConfig(store=store, listen_port=0))
    try:
        topic = "BenchRead"
        with BrokerConnection([running.endpoint]) as conn:
            admin = admin_pb2_grpc.AdminStub(conn._channel)  # type: ignore[no-untyped-call]
            admin.CreateTopic(admin_pb2.CreateTopicRequest(name=topic, queue_nums=4))
            ids = MessageIds()
            body = b"r" * BODY_BYTES
            for _ in range(0, messages, 64):  # one queue per request; round robin over 4
                conn.send([row_message({"body": body}, topic, ids.next(), 0) for _ in range(64)])
            sent = (messages + 63) // 64 * 64
            running.broker.store.wait_dispatched(running.broker.store.commitlog.max_offset(), 60)
            started = time.perf_counter()
            pulled = 0
            for queue_id in conn.readable_queue_ids(topic):
                offset = 0
                while True:
                    got = conn.pull(topic, queue_id, offset, batch_size=1024)
                    pulled += len(got.messages)
                    if not got.found:
                        break
                    offset = got.next_offset
            pull_s = time.perf_counter() - started
            # The same queues read with Admin PullRecords (what the data source now uses),
            # each reply turned into an Arrow batch as a Spark task does.
            started = time.perf_counter()
            bulk = 0
            for queue_id in conn.readable_queue_ids(topic):
                offset = 0
                while True:
                    got_records = conn.pull_records(topic, queue_id, offset, messages_max=1024)
                    if not got_records.count:
                        break
                    chunk = columns.records_chunk(got_records.records, got_records.count)
                    bulk += rows.records_batch(got_records.records, chunk).num_rows
                    offset = got_records.next_offset
            records_s = time.perf_counter() - started
        assert pulled == sent, (pulled, sent)
        assert bulk == sent, (bulk, sent)
        reader = spark.read.format("gannet").option("endpoints", running.endpoint)
        # Warm-up: the first read starts the planner process and the workers' imports.
        warm = reader.option("topic", topic).option("queues", "0")
        warm = warm.option("endingOffsets", '{"0": 64}').load()
        assert warm.count() == 64
        reader = spark.read.format("gannet").option("endpoints", running.endpoint)
        started = time.perf_counter()
        read = reader.option("topic", topic).load().selectExpr("length(body) AS n").collect()
        spark_s = time.perf_counter() - started
        assert len(read) == sent, (len(read), sent)
    finally:
        running.stop()
    size = sent * BODY_BYTES
    return {
        "messages": float(sent),
        "datasource_read_mb_per_s": _mb_per_s(size, spark_s),
        "pull_1proc_mb_per_s": _mb_per_s(size, pull_s),
        "pull_records_1proc_mb_per_s": _mb_per_s(size, records_s),
    }


def _tuple_row(message: Any) -> tuple[Any, ...]:
    """A read row as the tuple-yielding reader built it (the reference of ``worker_cpu``)."""
    sp = message.system_properties

    def when(ts: Any) -> dt.datetime:
        return dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=dt.UTC)

    return (
        str(message.topic.name), int(sp.queue_id), int(sp.queue_offset), str(sp.message_id),
        [str(k) for k in sp.keys], str(sp.tag) if sp.HasField("tag") else None,
        dict(message.user_properties), bytes(message.body), when(sp.born_timestamp),
        when(sp.store_timestamp), "",
    )  # fmt: skip


def bench_worker_cpu(messages: int) -> dict[str, float]:
    """CPU µs per message to turn pulled messages into Arrow batches, both ways."""
    from pyspark.sql.types import StructType
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from gannet.pipeline import datasource

    ids = MessageIds()
    pulled = []
    for i in range(messages):
        message = row_message(
            {"body": b"r" * BODY_BYTES, "keys": [f"k{i}"], "tag": "t", "properties": {"n": "1"}},
            "BenchRead", ids.next(), 1_700_000_000_000 + i,
        )  # fmt: skip
        message.system_properties.queue_offset = i
        message.system_properties.store_timestamp.FromMilliseconds(1_700_000_000_000 + i)
        pulled.append(message)
    struct = StructType.fromJson(
        {"type": "struct", "fields": [
            {"name": f.name, "nullable": True, "metadata": {}, "type": t}
            for f, t in zip(rows.READ_ARROW_SCHEMA, (
                "string", "integer", "long", "string",
                {"type": "array", "elementType": "string", "containsNull": True},
                "string",
                {"type": "map", "keyType": "string", "valueType": "string",
                 "valueContainsNull": True},
                "binary", "timestamp", "timestamp", "string"), strict=True)]}
    )  # fmt: skip
    pull_batch = 1024
    started = time.process_time()
    made = 0
    for i in range(0, messages, pull_batch):
        made += rows.messages_batch(pulled[i : i + pull_batch]).num_rows
    arrow_s = time.process_time() - started
    started = time.process_time()
    tuples = (_tuple_row(m) for m in pulled)
    batches = records_to_arrow_batches(tuples, 10_000, struct, datasource.GannetDataSource({}))
    converted = sum(b.num_rows for b in batches)
    tuple_s = time.process_time() - started
    assert made == converted == messages
    replies = [stored_records(pulled[i : i + pull_batch]) for i in range(0, messages, pull_batch)]
    started = time.process_time()
    parsed = 0
    for reply, count in replies:
        parsed += rows.records_batch(reply, columns.records_chunk(reply, count), "b").num_rows
    records_s = time.process_time() - started
    assert parsed == messages
    return {
        "messages": float(messages),
        "arrow_batch_us_per_msg": arrow_s / messages * 1e6,
        "tuples_us_per_msg": tuple_s / messages * 1e6,
        "records_batch_us_per_msg": records_s / messages * 1e6,
    }


def stored_records(pulled: list[Any]) -> tuple[bytes, int]:
    """The commit-log records of ``pulled`` v2 messages back to back, as a PullRecords reply
    holds them (the properties the broker stores: UNIQ_KEY, KEYS, TAGS, the user's)."""
    reply = bytearray()
    for m in pulled:
        sp = m.system_properties
        stored = {
            "UNIQ_KEY": sp.message_id,
            "KEYS": " ".join(sp.keys),
            "TAGS": sp.tag,
            **dict(m.user_properties),
        }
        record = Message(
            topic=m.topic.name,
            body=m.body,
            queue_id=1,
            properties=stored,
            queue_offset=sp.queue_offset,
            born_timestamp_ms=sp.born_timestamp.ToMilliseconds(),
            store_timestamp_ms=sp.store_timestamp.ToMilliseconds(),
        )
        record.physical_offset = len(reply)
        reply += records.encode(record, body_size_max_bytes=4 * 2**20)
    return bytes(reply), len(pulled)


def spark_kafka_jars() -> list[str]:
    """The jars of Spark's Kafka source, fetched with Maven on first use (PeerError if not)."""
    lib = (kafka.CACHE / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}" / "lib").resolve()
    marker = lib / f"spark-sql-kafka-0-10_2.13-{SPARK_KAFKA_VERSION}.jar"
    if not marker.exists():
        command = ["mvn", "-B", "-q", "-f", str(SPARK_KAFKA_POM), "dependency:copy-dependencies",
                   f"-DoutputDirectory={lib}"]  # fmt: skip
        done = kafka._run_tool(command, "mvn", kafka.FETCH_TIMEOUT_S)
        if done.returncode != 0 or not marker.exists():
            raise processes.PeerError(
                f"mvn could not fetch spark-sql-kafka:\n{done.stdout[-2000:]}"
            )
    return [str(p) for p in sorted(lib.glob("*.jar")) if p.name.startswith(SPARK_KAFKA_JARS)]


def bench_spark_kafka(spark: Any, base: Path, messages: int) -> dict[str, float]:
    """Spark's Kafka source reading ``messages`` 1 KiB messages from the Kafka peer."""
    from confluent_kafka import Producer  # type: ignore[import-not-found,unused-ignore]

    layout = Layout((KAFKA_READ_TOPIC,), KAFKA_READ_PARTITIONS, "bench")
    running = kafka.start(base / "kafka", "async", 1, layout)
    try:
        producer = Producer({"bootstrap.servers": running.endpoint, "linger.ms": 5})
        sent = (messages + 63) // 64 * 64
        body = b"r" * BODY_BYTES
        for i in range(sent):
            while True:
                try:
                    producer.produce(KAFKA_READ_TOPIC, body, partition=i % KAFKA_READ_PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: let deliveries drain it
            producer.poll(0)
        assert producer.flush(120) == 0
        reader = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", running.endpoint)
            .option("subscribe", KAFKA_READ_TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
        )
        warm = reader.load().selectExpr("length(value) AS n").limit(64).collect()
        assert len(warm) == 64
        started = time.perf_counter()
        rows = reader.load().selectExpr("length(value) AS n").collect()
        spark_s = time.perf_counter() - started
        assert len(rows) == sent, (len(rows), sent)
    finally:
        running.stop()
    return {
        "messages": float(sent),
        "spark_kafka_read_mb_per_s": _mb_per_s(sent * BODY_BYTES, spark_s),
        "spark_kafka_read_msgs_per_s": sent / spark_s,
    }


def read_through_broker(
    spark: Any, base: Path, messages: int, results: dict[str, dict[str, float]], kafka_skipped: str
) -> str:
    """The data source read, the worker CPU figures and (unless skipped) Spark's Kafka source,
    into ``results``; why Kafka was skipped, if it was."""
    results["datasource"] = bench_datasource(spark, base, messages)
    print(f"datasource: {results['datasource']}", flush=True)
    results["worker_cpu"] = bench_worker_cpu(messages)
    print(f"worker_cpu: {results['worker_cpu']}", flush=True)
    if not kafka_skipped:
        try:
            results["spark_kafka"] = bench_spark_kafka(spark, base, messages)
        except (processes.PeerError, ImportError) as exc:
            kafka_skipped = str(exc).splitlines()[0]
    return kafka_skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller data (make bench)")
    parser.add_argument("--total-mib", type=int, default=None, help="commit log per run")
    parser.add_argument("--no-kafka", action="store_true", help="skip spark-sql-kafka vs Kafka")
    parser.add_argument(
        "--read-messages",
        type=int,
        default=None,
        help="messages read (100,000; --quick: 10,000)",
    )
    parser.add_argument(
        "--segments-only",
        action="store_true",
        help="only export and rebuild (no data source read, worker CPU or Kafka)",
    )
    args = parser.parse_args()
    total_mib = args.total_mib or (16 if args.quick else 256)
    counts = (1, 4) if args.quick else (1, 2, 4, 8, 16)
    read_messages = args.read_messages or (10_000 if args.quick else 100_000)
    import gannet.pipeline

    kafka_skipped = "--no-kafka" if args.no_kafka else ""
    kafka_skipped = "--segments-only" if args.segments_only else kafka_skipped
    if not kafka_skipped:
        try:
            kafka.fetch()
            jars = spark_kafka_jars()
            # Before the JVM starts: the session below is the first.
            os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {','.join(jars)} pyspark-shell"
        except (processes.PeerError, OSError) as exc:
            kafka_skipped = str(exc).splitlines()[0]
    spark = jobs.session("local[2]", app_name="gannet-bench-pipeline")
    gannet.pipeline.register(spark)
    base = Path(tempfile.mkdtemp(prefix="gannet-bench-pipeline-", dir=os.environ.get("BENCH_DIR")))
    results: dict[str, dict[str, float]] = {}
    try:
        warm = base / "warm"
        jobs.verify(spark, write_store(warm, 2 * 2**20, 2)[0].root_dir)  # JVM, workers up
        shutil.rmtree(warm)
        for count in counts:
            results[f"segments_{count}"] = bench_segments(spark, base, total_mib * 2**20, count)
            print(f"segments={count}: {results[f'segments_{count}']}", flush=True)
        if not args.segments_only:
            kafka_skipped = read_through_broker(spark, base, read_messages, results, kafka_skipped)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    report(results, total_mib, kafka_skipped)


def report(results: dict[str, dict[str, float]], total_mib: int, kafka_skipped: str = "") -> None:
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_1m": os.getloadavg()[0],
    }
    results_log.append(
        "pipeline", *({"scenario": name, **figures, **meta} for name, figures in results.items())
    )
    lines = [
        "# Pipeline benchmark",
        "",
        f"{meta['time']}, Python {meta['python']}, {meta['cpus']} CPUs, 1-minute load "
        f"{meta['load_1m']:.1f} at the end, Spark local[2], {total_mib} MiB of 1 KiB messages "
        "per segment count.",
        "",
        "MB/s of commit log. `export_1proc` and `dispatch_1proc` do the same work in one",
        "process without Spark (`dispatch_1proc` = the broker's dispatch chain rebuilding consume",
        "queues and index files); `rebuild_spark_vs_dispatch` > 1 means Spark is faster.",
        "Rebuild parses segments in parallel tasks but dispatches on the driver in commit-log",
        "order (the bytes must equal the broker's), so on local[2] it can at best hide the",
        "parsing; export is parallel end to end. Figures on a shared, loaded machine swing by",
        "2-4x between runs: compare the columns of one row. `driver bulk` and `driver one by",
        "one` are the rebuild driver's part alone on columns parsed beforehand (MB/s of commit",
        "log): the bulk writer `jobs.rebuild` runs, and one `DispatchInfo` per record as",
        "before; `1-task job` is the seconds of an empty one-task Spark job in the same session.",
        "",
        "| segments | driver bulk | driver one by one | 1-task job s |",
        "| ---: | ---: | ---: | ---: |",
        *(
            f"| {f['segments']:.0f} | {f['driver_bulk_mb_per_s']:.2f} | "
            f"{f['driver_one_by_one_mb_per_s']:.2f} | {f['spark_one_task_job_s']:.2f} |"
            for name, f in results.items()
            if name.startswith("segments_") and "driver_bulk_mb_per_s" in f
        ),
        "",
        "| segments | MiB | export spark | export 1 proc | rebuild spark | dispatch 1 proc "
        "| rebuild / dispatch |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in results.items():
        if not name.startswith("segments_"):
            continue
        lines.append(
            f"| {f['segments']:.0f} | {f['commitlog_mib']:.1f} | "
            f"{f['export_spark_mb_per_s']:.2f} | {f['export_1proc_mb_per_s']:.2f} | "
            f"{f['rebuild_spark_mb_per_s']:.2f} | {f['dispatch_1proc_mb_per_s']:.2f} | "
            f"{f['rebuild_spark_vs_dispatch']:.2f} |"
        )
    ds = results.get("datasource")
    if ds is not None:
        msgs_per_s = ds["datasource_read_mb_per_s"] * 1e6 / BODY_BYTES
        lines += [
            "",
            f"Data source read of {ds['messages']:,.0f} messages (MB/s of bodies): "
            f'`spark.read.format("gannet")` {ds["datasource_read_mb_per_s"]:.2f}, '
            f"one-process PullMessage loop {ds['pull_1proc_mb_per_s']:.2f}"
            + (
                f", one-process PullRecords loop to Arrow {ds['pull_records_1proc_mb_per_s']:.2f}"
                if "pull_records_1proc_mb_per_s" in ds
                else ""
            )
            + f" ({msgs_per_s:,.0f} msgs/s through Spark).",
        ]
    cpu = results.get("worker_cpu")
    if cpu is not None:
        lines.append(
            f"Python side of that read, CPU per message in one process: Arrow batches "
            f"{cpu['arrow_batch_us_per_msg']:.1f} µs, tuples through pyspark's conversion "
            f"{cpu['tuples_us_per_msg']:.1f} µs"
            + (
                f"; PullRecords replies parsed into Arrow batches "
                f"{cpu['records_batch_us_per_msg']:.1f} µs."
                if "records_batch_us_per_msg" in cpu
                else "."
            )
        )
    sk = results.get("spark_kafka")
    if sk is not None:
        lines.append(
            f"Spark's Kafka source (spark-sql-kafka {SPARK_KAFKA_VERSION}) reading "
            f"{sk['messages']:,.0f} messages of the same size from Kafka {kafka.VERSION} in the "
            f"same session: {sk['spark_kafka_read_mb_per_s']:.2f} MB/s "
            f"({sk['spark_kafka_read_msgs_per_s']:,.0f} msgs/s)."
        )
    elif kafka_skipped:
        lines.append(f"Spark's Kafka source was not run: {kafka_skipped}.")
    text = "\n".join(lines) + "\n"
    (RESULTS / "PIPELINE.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
