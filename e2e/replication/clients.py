"""The official Node.js and Java RocketMQ 5 clients as producers for the failover e2e.

Each runs in its own process (``e2e/clients/node/failover_producer.js``,
``e2e/clients/java/FailoverProducer.java``): one Producer created once, sending one message at a
time and printing a line per send (``ack key id offset started_ns answered_ns`` or
``fail key error``; the times are CLOCK_MONOTONIC, as :func:`time.monotonic`). :class:`ExternalLoad`
reads those lines into the same record of acknowledged sends that the Python client's load keeps
(:class:`AckLog`), so :mod:`e2e.replication.failover` measures every client alike.

Installing: :func:`node_modules` runs ``npm ci`` of ``e2e/clients/node`` (rocketmq-client-nodejs
1.0.8, pinned by its lock file) and :func:`java_lib` copies rocketmq-client-java 5.0.8 with
``mvn dependency:copy-dependencies``, both into ``e2e/clients/.cache`` (``GANNET_CLIENTS_CACHE``
overrides) once.

The Node.js client dials one address only (it turns ``a;b`` into a DNS name grpc-js cannot
resolve; :mod:`gannet.node.api.routes` gives it one address): it is given a
:class:`ServiceProxy`, what a Kubernetes Service is to it — each new connection goes to the
next member that accepts one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from e2e.replication.harness import Receipt

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
CACHE = Path(os.environ.get("GANNET_CLIENTS_CACHE", CLIENTS / ".cache"))
START_TIMEOUT_S = 120.0
CHUNK_BYTES = 64 * 1024
PROXY_CONNECT_TIMEOUT_S = 2.0
"""A member that does not accept within this (a blackholed link drops the SYN) is skipped."""


class ClientMissing(RuntimeError):
    """A client's runtime (node, java, mvn, npm) is not installed."""


class AckLog:
    """Acknowledged sends with the times each began and was answered; awaitable."""

    def __init__(self) -> None:
        self.receipts: list[Receipt] = []
        self.started: list[float] = []
        """When each acknowledged send began (monotonic), parallel to ``receipts``."""
        self.failures: dict[str, int] = {}
        """Sends that failed after the client's own retries, by error name."""
        self.progress = threading.Condition()

    def acked(self, receipt: Receipt, started: float) -> None:
        with self.progress:
            self.receipts.append(receipt)
            self.started.append(started)
            self.progress.notify_all()

    def failed(self, kind: str) -> None:
        with self.progress:
            self.failures[kind] = self.failures.get(kind, 0) + 1

    def first_ack_after(self, moment: float, timeout_s: float) -> float:
        """Monotonic time of the first acknowledgement of a send begun after ``moment`` (an
        answer already on its way at the fault does not count)."""
        with self.progress:
            ok = self.progress.wait_for(
                lambda: bool(self.started) and self.started[-1] > moment, timeout_s
            )
            assert ok, f"no send acknowledged within {timeout_s} s of the fault"
            return next(
                r.acked_at_s for r, t in zip(self.receipts, self.started, strict=True) if t > moment
            )

    def wait_more(self, count: int, timeout_s: float = 60.0) -> None:
        with self.progress:
            target = len(self.receipts) + count
            ok = self.progress.wait_for(lambda: len(self.receipts) >= target, timeout_s)
        assert ok, f"fewer than {count} sends acknowledged in {timeout_s} s"


def _run(argv: list[str], cwd: Path, what: str) -> None:
    if shutil.which(argv[0]) is None:
        raise ClientMissing(f"{argv[0]} is not installed; it is needed for {what}")
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed for {what}:\n{done.stdout[-2000:]}")


def node_modules() -> Path:
    """``node_modules`` of the official Node.js client, installed once from the lock file."""
    target = CACHE / "node"
    modules = target / "node_modules"
    if not (modules / "rocketmq-client-nodejs" / "package.json").exists():
        target.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(CLIENTS / "node" / name, target / name)
        _run(["npm", "ci", "--no-audit", "--no-fund"], target, "the Node.js client")
    return modules


def java_lib() -> Path:
    """A directory with the official Java client's jars, copied once by Maven."""
    lib = CACHE / "java-lib"
    if not any(lib.glob("rocketmq-client-java-*.jar")):
        lib.mkdir(parents=True, exist_ok=True)
        pom = CLIENTS / "java" / "pom.xml"
        argv = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
        _run([*argv, f"-DoutputDirectory={lib}"], CLIENTS / "java", "the Java client")
    return lib


def remoting_lib() -> Path:
    """A directory with the official remoting (4.x) Java client's jars, copied once by Maven."""
    lib = CACHE / "remoting-lib"
    if not (lib / "rocketmq-acl-4.9.8.jar").exists():
        lib.mkdir(parents=True, exist_ok=True)
        pom = CLIENTS / "remoting" / "pom.xml"
        argv = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
        _run([*argv, f"-DoutputDirectory={lib}"], CLIENTS / "remoting", "the remoting client")
    return lib


def producer_argv(
    client: str, endpoints: str, topic: str, prefix: str, log_root: Path = CACHE
) -> tuple[list[str], dict[str, str]]:
    """The command (and environment) running ``client``'s producer program (the remoting
    client writes its own log under ``log_root``)."""
    env = dict(os.environ)
    if client == "node":
        if shutil.which("node") is None:
            raise ClientMissing("node is not installed; it runs the Node.js client")
        env["NODE_PATH"] = str(node_modules())
        script = CLIENTS / "node" / "failover_producer.js"
        return ["node", str(script), endpoints, topic, prefix], env
    if client == "java":
        if shutil.which("java") is None:
            raise ClientMissing("java is not installed; it runs the Java client")
        source = CLIENTS / "java" / "FailoverProducer.java"
        classpath = f"{java_lib()}/*"
        return ["java", "-cp", classpath, str(source), endpoints, topic, prefix], env
    if client == "remoting":  # endpoints: the name servers
        if shutil.which("java") is None:
            raise ClientMissing("java is not installed; it runs the remoting client")
        source = CLIENTS / "remoting" / "FailoverProducer.java"
        properties = ["-Drocketmq.client.logLevel=WARN", f"-Drocketmq.client.logRoot={log_root}"]
        argv = ["java", *properties, "-cp", f"{remoting_lib()}/*", str(source)]
        return [*argv, endpoints, topic, prefix], env
    raise ValueError(f"unknown client {client!r}: node, java or remoting")


class ExternalLoad(threading.Thread):
    """A Node.js or Java producer process; its lines become an :class:`AckLog`."""

    def __init__(self, client: str, endpoints: str, topic: str, log_path: Path) -> None:
        super().__init__(name=f"failover-{client}", daemon=True)
        argv, env = producer_argv(
            client, endpoints, topic, prefix=f"{client[0]}", log_root=log_path.parent
        )
        self.client = client
        self.acks = AckLog()
        self.ready = threading.Event()
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )

    def run(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            fields = raw.decode(errors="replace").split()
            if fields[:1] == ["ready"]:
                self.ready.set()
            elif fields[:1] == ["ack"] and len(fields) == 6:
                key, message_id, offset, started_ns, answered_ns = fields[1:]
                receipt = Receipt(key, message_id, int(offset), int(answered_ns) / 1e9)
                self.acks.acked(receipt, int(started_ns) / 1e9)
            elif fields[:1] == ["fail"] and len(fields) == 3:
                self.acks.failed(fields[2])

    def startup(self) -> None:
        """Start reading its lines; return once its producer is up."""
        self.start()
        if not self.ready.wait(START_TIMEOUT_S):
            raise AssertionError(
                f"the {self.client} producer did not start in {START_TIMEOUT_S:.0f} s "
                f"(exit code {self.process.poll()}; its stderr is in {self._log.name})"
            )

    def stop(self) -> list[Receipt]:
        """Close its input (it shuts its producer down and exits); the acknowledged sends."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.join(10)
        self._log.close()
        return list(self.acks.receipts)


class ServiceProxy:
    """One listening port in front of every member, as a Kubernetes Service: each accepted
    connection is relayed to the next member (round robin) that accepts a connection within
    ``PROXY_CONNECT_TIMEOUT_S``; when
    either side closes, so does the other. Runs on its own event-loop thread.
    :meth:`live_targets` tells which members hold the client's connections now.

    Given ``ready`` (kube-proxy's view: the members its EndpointSlice lists now), it does what
    kube-proxy's iptables rules do instead: each connection goes to one member drawn at random
    (``seed``) from ``ready()``, the first to ``targets[0]``, and is closed at once when that
    member refuses it (no second member is tried)."""

    def __init__(
        self, targets: list[tuple[str, int]],
        ready: Callable[[], list[tuple[str, int]]] | None = None, seed: int = 0,
    ) -> None:  # fmt: skip
        self.targets = targets
        self._next = 0
        self._ready = ready
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.accepted_total = 0
        self.refused_total = 0
        """Connections closed because no member tried accepted them."""
        self._live: dict[tuple[str, int], int] = {}
        """Relayed connections open now, by member (written on the loop thread)."""
        self._live_lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def live_targets(self) -> dict[tuple[str, int], int]:
        """How many relayed connections are open now to each member (those with none left out)."""
        with self._live_lock:
            return {target: count for target, count in self._live.items() if count}

    def _count(self, target: tuple[str, int], change: int) -> None:
        with self._live_lock:
            self._live[target] = self._live.get(target, 0) + change

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted_total += 1
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for target in self._candidates():
            with contextlib.suppress(OSError, TimeoutError):
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(*target), PROXY_CONNECT_TIMEOUT_S
                )
                break
        if upstream is None:
            self.refused_total += 1
            writer.close()
            return
        up_reader, up_writer = upstream
        self._count(target, 1)
        try:
            await asyncio.gather(
                self._relay(reader, up_writer), self._relay(up_reader, writer),
                return_exceptions=True,
            )  # fmt: skip
        finally:
            self._count(target, -1)

    def _candidates(self) -> Iterator[tuple[str, int]]:
        """The members to try for one connection, in order (class docstring)."""
        if self._ready is None:
            for _ in range(len(self.targets)):
                target = self.targets[self._next % len(self.targets)]
                self._next += 1
                yield target
            return
        first = self._next == 0
        self._next += 1
        ready = [self.targets[0]] if first else self._ready()
        if ready:
            yield self._rng.choice(ready)

    @staticmethod
    async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(CHUNK_BYTES):
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            await self._server.wait_closed()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
