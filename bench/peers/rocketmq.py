"""Apache RocketMQ 5 as a peer, from Maven Central jars: ``bench/peers/rocketmq/pom.xml`` is
resolved with ``mvn dependency:copy-dependencies`` into a cache directory, then the name server
(``NamesrvStartup``) and the broker + proxy in Local mode (``ProxyStartup -pm local``, one JVM)
run with ``java -cp '<lib>/*'``, both pinned to CPU 0. The proxy's gRPC port speaks
``apache.rocketmq.v2``, so the same official Python client (and the same raw-stub generator)
drives it as drives Gannet.

For remoting clients (:func:`start_remoting`, ``bench/remoting.py``) the broker runs without
the proxy (``BrokerStartup``): a 4.x client asks the name server for routes and then talks to the
broker's own port.

Topics are written into the broker's ``config/topics.json`` before it starts (the RocketMQ
store-config format, ``docs/formats/configs.md`` §3); the broker registers them with the
name server at boot. Consumer groups are auto-created (``autoCreateSubscriptionGroup=true``).

Durability: ``flushDiskType=ASYNC_FLUSH`` (flush every 500 ms, like Gannet's ``--flush async``)
or ``SYNC_FLUSH`` (group commit, like ``--flush sync``); ``brokerRole=ASYNC_MASTER`` with no
slave = R1. R3 (DLedger) is not run: three more JVMs do not fit 2 cores beside the load.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from bench.peers import namesrv as namesrv_probe
from bench.peers import processes
from bench.peers.base import Layout, Running, durability_text

VERSION = "5.3.3"  # must equal <rocketmq.version> in rocketmq/pom.xml
POM = Path(__file__).parent / "rocketmq" / "pom.xml"
CACHE = Path(os.environ.get("GANNET_BENCH_CACHE", Path(__file__).parent / ".cache"))
BROKER_CPUS = "0"
START_TIMEOUT_S = 120.0
FETCH_TIMEOUT_S = 900.0
JAVA_OPENS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
]


def lib_dir() -> Path:
    return CACHE / f"rocketmq-{VERSION}" / "lib"


def fetch() -> Path:
    """The jar directory, resolved from Maven Central on first use."""
    lib = lib_dir()
    if (lib / f"rocketmq-proxy-{VERSION}.jar").exists():
        return lib
    command = [
        "mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
        f"-DoutputDirectory={lib}",
    ]  # fmt: skip
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S
    )
    if done.returncode != 0 or not (lib / f"rocketmq-proxy-{VERSION}.jar").exists():
        raise processes.PeerError(f"mvn could not fetch RocketMQ {VERSION}:\n{done.stdout[-2000:]}")
    return lib


def java_version() -> str:
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True)
    return out.stderr.splitlines()[0] if out.stderr else "java ?"


def topics_json(layout: Layout) -> str:
    """``config/topics.json`` holding the scenario's topics (fastjson's field order)."""
    table = {
        topic: {
            "attributes": {"message.type": "NORMAL"},
            "order": False,
            "perm": 6,
            "readQueueNums": layout.queues,
            "topicFilterType": "SINGLE_TAG",
            "topicName": topic,
            "topicSysFlag": 0,
            "writeQueueNums": layout.queues,
        }
        for topic in layout.topics
    }
    version = {"counter": 1, "stateVersion": 0, "timestamp": int(time.time() * 1000)}
    return json.dumps({"dataVersion": version, "topicConfigTable": table}, indent=1)


def broker_conf(store: Path, namesrv_port: int, broker_port: int, flush: str) -> str:
    lines = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": 0,
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH",
        "storePathRootDir": store,
        "storePathCommitLog": store / "commitlog",
        "namesrvAddr": f"127.0.0.1:{namesrv_port}",
        "listenPort": broker_port,
        "brokerIP1": "127.0.0.1",
        "autoCreateTopicEnable": "false",
        "autoCreateSubscriptionGroup": "true",
        "mappedFileSizeCommitLog": 256 * 1024 * 1024,
        "transientStorePoolEnable": "false",
        "diskMaxUsedSpaceRatio": 95,
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def _java(heap: str, home: Path, lib: Path, main: str, *args: str) -> list[str]:
    return [
        "java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:MaxDirectMemorySize=1g", *JAVA_OPENS,
        f"-Duser.home={home}", f"-Drocketmq.home.dir={home}", "-Drocketmq.client.logUseSlf4j=true",
        "-cp", f"{lib}/*", main, *args,
    ]  # fmt: skip


def _free_broker_port() -> int:
    """RocketMQ also binds listenPort - 2 (fast remoting) and + 1 (HA)."""
    for _ in range(50):
        port = processes.free_port()
        if port > 1100 and all(_free(p) for p in (port - 2, port + 1)):
            return port
    raise processes.PeerError("no free port triple for the RocketMQ broker")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _namesrv(workdir: Path, layout: Layout, flush: str) -> tuple[Path, processes.Child, int, int]:
    """Write the broker's config (topics, broker.conf) and start the name server: the home
    folder, the name server, its port and the broker's port."""
    lib = fetch()
    home = workdir / "rmq"
    store = home / "store"
    (store / "config").mkdir(parents=True, exist_ok=True)
    (home / "conf").mkdir(parents=True, exist_ok=True)
    namesrv_port, broker_port = processes.free_port(), _free_broker_port()
    (store / "config" / "topics.json").write_text(topics_json(layout))
    (home / "conf" / "namesrv.conf").write_text(f"listenPort={namesrv_port}\n")
    (home / "conf" / "broker.conf").write_text(broker_conf(store, namesrv_port, broker_port, flush))
    namesrv = processes.spawn(
        "rocketmq-namesrv",
        _java("512m", home, lib, "org.apache.rocketmq.namesrv.NamesrvStartup",
              "-c", str(home / "conf" / "namesrv.conf")),
        workdir / "namesrv.log", cpus=BROKER_CPUS,
    )  # fmt: skip
    try:
        processes.wait_port(namesrv, "127.0.0.1", namesrv_port, START_TIMEOUT_S)
    except Exception:
        processes.stop(namesrv)
        raise
    return home, namesrv, namesrv_port, broker_port


def _settings(flush: str) -> dict[str, object]:
    return {
        "flushDiskType": "SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH",
        "brokerRole": "ASYNC_MASTER (no slave)",
        "mappedFileSizeCommitLog": "256 MiB",
        "cpus": BROKER_CPUS,
    }


def start(workdir: Path, flush: str, replicas: int, layout: Layout) -> Running:
    if replicas != 1:
        raise processes.PeerError("RocketMQ R3 (DLedger) is not run on this 2-core machine")
    home, namesrv, namesrv_port, _ = _namesrv(workdir, layout, flush)
    lib = lib_dir()
    proxy_port, remoting_port = processes.free_port(), processes.free_port()
    proxy = {
        "rocketMQClusterName": "DefaultCluster",
        "grpcServerPort": proxy_port,
        "remotingListenPort": remoting_port,
        "namesrvAddr": f"127.0.0.1:{namesrv_port}",
        "proxyMode": "local",
    }
    (home / "conf" / "rmq-proxy.json").write_text(json.dumps(proxy))
    children = [namesrv]
    try:
        broker = processes.spawn(
            "rocketmq-broker-proxy",
            _java("1g", home, lib, "org.apache.rocketmq.proxy.ProxyStartup",
                  "-pm", "local", "-bc", str(home / "conf" / "broker.conf"),
                  "-pc", str(home / "conf" / "rmq-proxy.json"),
                  "-n", f"127.0.0.1:{namesrv_port}"),
            workdir / "broker.log", cpus=BROKER_CPUS,
        )  # fmt: skip
        children.append(broker)
        processes.wait_port(broker, "127.0.0.1", proxy_port, START_TIMEOUT_S)
        _wait_route(broker, f"127.0.0.1:{proxy_port}", layout.topics[0])
    except BaseException:  # also an interrupt while starting: nothing left running
        for child in reversed(children):
            processes.stop(child)
        raise
    return Running(
        "rocketmq", f"Apache RocketMQ {VERSION} (proxy Local mode; {java_version()})",
        f"127.0.0.1:{proxy_port}", children, durability_text(flush, 1),
        settings={**_settings(flush), "heap": "1g broker+proxy, 512m namesrv"},
    )  # fmt: skip


def start_remoting(workdir: Path, flush: str, layout: Layout) -> Running:
    """The name server and a broker without the proxy (``BrokerStartup``): what a remoting
    client (``DefaultMQProducer``, 4.x) talks to. The endpoint is the name server's address."""
    home, namesrv, namesrv_port, broker_port = _namesrv(workdir, layout, flush)
    endpoint = f"127.0.0.1:{namesrv_port}"
    children = [namesrv]
    try:
        broker = processes.spawn(
            "rocketmq-broker",
            _java("1g", home, lib_dir(), "org.apache.rocketmq.broker.BrokerStartup",
                  "-c", str(home / "conf" / "broker.conf"), "-n", endpoint),
            workdir / "broker.log", cpus=BROKER_CPUS,
        )  # fmt: skip
        children.append(broker)
        processes.wait_port(broker, "127.0.0.1", broker_port, START_TIMEOUT_S)
        for topic in layout.topics:
            namesrv_probe.wait_route(broker, endpoint, topic)
    except BaseException:  # also an interrupt while starting: nothing left running
        for child in reversed(children):
            processes.stop(child)
        raise
    return Running(
        "rocketmq", f"Apache RocketMQ {VERSION} (namesrv + broker; {java_version()})",
        endpoint, children, durability_text(flush, 1),
        settings={**_settings(flush), "heap": "1g broker, 512m namesrv"},
    )  # fmt: skip


def _wait_route(child: processes.Child, endpoint: str, topic: str) -> None:
    """Until the broker has registered ``topic`` with the name server (QueryRoute answers OK)."""
    import grpc
    from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

    host, _, port = endpoint.rpartition(":")
    request = service_pb2.QueryRouteRequest(
        topic=definition_pb2.Resource(name=topic),
        endpoints=definition_pb2.Endpoints(
            scheme=definition_pb2.IPv4,
            addresses=[definition_pb2.Address(host=host, port=int(port))],
        ),
    )
    metadata = (("x-mq-client-id", "bench-probe"),)
    deadline = time.monotonic() + START_TIMEOUT_S
    last = ""
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = stub.QueryRoute(request, metadata=metadata, timeout=5)
                if reply.status.code == Code.OK and reply.message_queues:
                    return
                last = f"{reply.status.code} {reply.status.message}"
            except grpc.RpcError as exc:
                last = str(exc.code())
            if child.process.poll() is not None:
                break
            time.sleep(0.5)  # the broker registers with the name server on its own schedule
    raise processes.PeerError(f"RocketMQ never routed {topic}: {last}\n{child.log_tail()}")
