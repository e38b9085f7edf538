"""Apache Kafka in KRaft mode as a peer, from Maven Central jars: ``bench/peers/kafka/pom.xml``
(``org.apache.kafka:kafka_2.13`` and its runtime dependencies, plus the SLF4J → log4j2 binding)
is resolved with ``mvn dependency:copy-dependencies`` into a cache directory. The log directory
is formatted with ``kafka.tools.StorageTool format`` (what ``kafka-storage.sh format`` runs) and
a random cluster id, then one JVM runs ``kafka.Kafka`` as a combined broker + controller node
(``process.roles=broker,controller``, a single-voter quorum) on free ports, pinned to CPU 0
like the other peers, heap 1 GiB. Each scenario topic is created with as many partitions as the
scenario has queues per topic, replication factor 1. Driven by confluent-kafka (librdkafka).

Durability (what "async" and "sync" flush mean for Kafka):

- async = Kafka's defaults: ``log.flush.interval.messages`` and ``log.flush.interval.ms`` unset,
  so an append is acknowledged once it is in the page cache and the OS writes it back (Kafka
  itself fsyncs only when a segment rolls or the broker stops). Like RocketMQ's ASYNC_FLUSH
  (which does fsync every 500 ms) and Gannet's ``--flush async``.
- sync = topic config ``flush.messages=1``: the partition's log is fsynced after every append
  before the produce request is answered (with ``acks=all``). One append is one produce
  request's batch for that partition, so a batch of 32 costs one fsync: group commit per
  partition, as RocketMQ's SYNC_FLUSH and Gannet's ``--flush sync`` do across producers.
  Kafka's design does not rely on fsync for durability at all: it acknowledges ``acks=all``
  once every in-sync replica has the data in memory/page cache and relies on replication
  (``min.insync.replicas``), so ``flush.messages=1`` is a configuration Kafka users rarely run.
- R3 is not run: three more JVM brokers do not fit beside the load on 2 cores.

Consumer groups use the KIP-848 protocol (``group.protocol=consumer``); the broker's
group heartbeat interval is lowered to 500 ms so that members of a group get their partitions
within a second instead of several heartbeats of 5 s.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from pathlib import Path

from bench.peers import processes
from bench.peers.base import Layout, Running, durability_text

VERSION = "4.3.1"  # must equal <kafka.version> in kafka/pom.xml
POM = Path(__file__).parent / "kafka" / "pom.xml"
CACHE = Path(os.environ.get("GANNET_BENCH_CACHE", Path(__file__).parent / ".cache"))
BROKER_CPUS = "0"
HEAP = "1g"
START_TIMEOUT_S = 120.0
FETCH_TIMEOUT_S = 900.0
FORMAT_TIMEOUT_S = 120.0
TOPIC_TIMEOUT_S = 60.0
STARTED_LINE = "Kafka Server started"
GROUP_HEARTBEAT_MS = 500
LOG4J2 = """\
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.apache.name=org.apache.kafka
logger.apache.level=WARN
"""


def lib_dir() -> Path:
    return CACHE / f"kafka-{VERSION}" / "lib"


def fetch() -> Path:
    """The jar directory, resolved from Maven Central on first use."""
    lib = lib_dir()
    marker = lib / f"kafka_2.13-{VERSION}.jar"
    if marker.exists():
        return lib
    command = [
        "mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
        f"-DoutputDirectory={lib}",
    ]  # fmt: skip
    done = _run_tool(command, "mvn", FETCH_TIMEOUT_S)
    if done.returncode != 0 or not marker.exists():
        raise processes.PeerError(f"mvn could not fetch Kafka {VERSION}:\n{done.stdout[-2000:]}")
    return lib


def java_version() -> str:
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True)
    return out.stderr.splitlines()[0] if out.stderr else "java ?"


def client_version() -> str:
    """The Python client and the librdkafka inside it, e.g. ``confluent-kafka 2.16.1
    (librdkafka 2.16.0)``."""
    from importlib.metadata import version

    import confluent_kafka  # type: ignore[import-not-found,unused-ignore]

    library = confluent_kafka.libversion()[0]
    return f"confluent-kafka {version('confluent-kafka')} (librdkafka {library})"


def _run_tool(command: list[str], tool: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to completion; a missing ``tool`` is a PeerError naming the install step."""
    try:
        return subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=timeout_s
        )
    except FileNotFoundError as exc:
        raise processes.PeerError(
            f"{tool} is not installed (make bench-peers installs it): {exc}"
        ) from exc


def cluster_id() -> str:
    """A random cluster id as ``kafka-storage random-uuid`` prints it: 16 random bytes in
    URL-safe base64 without padding (22 characters), never starting with ``-`` (Kafka's
    ``Uuid.randomUuid`` draws again for those too: the tool's argument parser would read such
    an id as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def server_properties(data_dir: Path, broker_port: int, controller_port: int) -> str:
    """``server.properties`` of a single combined broker + controller node on 127.0.0.1."""
    lines = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": data_dir,
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        "group.consumer.heartbeat.interval.ms": GROUP_HEARTBEAT_MS,
        "group.consumer.min.heartbeat.interval.ms": GROUP_HEARTBEAT_MS,
        "log.segment.bytes": 256 * 1024 * 1024,
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def topic_config(flush: str) -> dict[str, str]:
    """Per-topic overrides for a flush mode (see the module docstring)."""
    if flush == "sync":
        return {"flush.messages": "1"}
    if flush == "async":
        return {}
    raise ValueError(f"flush={flush!r} (must be 'async' or 'sync')")


def _java(heap: str, lib: Path, log4j: Path, main: str, *args: str) -> list[str]:
    return [
        "java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}",
        "-cp", f"{lib}/*", main, *args,
    ]  # fmt: skip


def start(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    if replicas != 1:
        raise processes.PeerError(
            "Kafka R3 is not run: three JVM brokers do not fit beside the load on 2 cores"
        )
    config = topic_config(flush)
    lib = fetch()
    home = workdir / "kafka"
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    broker_port, controller_port = processes.free_port(), processes.free_port()
    properties = home / "server.properties"
    properties.write_text(server_properties(data, broker_port, controller_port))
    log4j = home / "log4j2.properties"
    log4j.write_text(LOG4J2)
    _format(lib, log4j, properties, workdir / "kafka-format.log")
    child = processes.spawn(
        "kafka",
        _java(HEAP, lib, log4j, "kafka.Kafka", str(properties)),
        workdir / "kafka.log",
        cpus=BROKER_CPUS,
    )
    endpoint = f"127.0.0.1:{broker_port}"
    try:
        processes.wait_log(child, STARTED_LINE, START_TIMEOUT_S)
        create_topics(endpoint, layout, config)
    except BaseException:  # also an interrupt while starting: nothing left running
        processes.stop(child)
        raise
    return Running(
        "kafka", f"Apache Kafka {VERSION} (KRaft, combined broker+controller; {java_version()})",
        endpoint, [child], durability_text(flush, 1),
        settings={"mode": "KRaft broker+controller, 1 node", "heap": HEAP, "cpus": BROKER_CPUS,
                  "partitions": f"{layout.queues} per topic (= queues)",
                  "topic config": ", ".join(f"{k}={v}" for k, v in config.items()) or "defaults",
                  "group.protocol": "consumer (KIP-848)", "client": client_version()},
    )  # fmt: skip


def _format(lib: Path, log4j: Path, properties: Path, log_path: Path) -> None:
    """``kafka-storage format``: write meta.properties and the bootstrap checkpoint."""
    command = _java("256m", lib, log4j, "kafka.tools.StorageTool", "format", "-t", cluster_id(),
                    "-c", str(properties))  # fmt: skip
    done = _run_tool(command, "java", FORMAT_TIMEOUT_S)
    output = done.stdout + done.stderr
    log_path.write_text(output)
    if done.returncode != 0:
        raise processes.PeerError(
            f"kafka-storage format failed ({done.returncode}):\n{output[-2000:]}"
        )


def create_topics(endpoint: str, layout: Layout, config: dict[str, str]) -> None:
    """Create the scenario's topics (``layout.queues`` partitions each, RF 1) and wait until
    every partition has a leader, so the first produce does not meet a missing topic."""
    from confluent_kafka.admin import AdminClient  # type: ignore[import-not-found,unused-ignore]
    from confluent_kafka.cimpl import NewTopic  # type: ignore[import-not-found,unused-ignore]

    admin = AdminClient({"bootstrap.servers": endpoint})
    wanted = [
        NewTopic(t, num_partitions=layout.queues, replication_factor=1, config=config)
        for t in layout.topics
    ]
    for topic, future in admin.create_topics(wanted, request_timeout=TOPIC_TIMEOUT_S).items():
        try:
            future.result(timeout=TOPIC_TIMEOUT_S)
        except Exception as exc:
            raise processes.PeerError(f"Kafka could not create topic {topic}: {exc}") from exc
    deadline = time.monotonic() + TOPIC_TIMEOUT_S
    missing: list[str] = list(layout.topics)
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=10)
        missing = [
            t
            for t in layout.topics
            if t not in metadata.topics
            or len(metadata.topics[t].partitions) != layout.queues
            or any(p.leader < 0 for p in metadata.topics[t].partitions.values())
        ]
        if not missing:
            return
        time.sleep(0.2)  # leaders are elected by the controller on its own schedule
    raise processes.PeerError(
        f"Kafka topics without leaders after {TOPIC_TIMEOUT_S:.0f} s: {missing[:5]}"
    )
