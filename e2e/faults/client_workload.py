"""The official Java and Node.js clients as further workloads of a fault run.

Each runs in its own process in the client's namespace, beside the Python workload: the Java
client (rocketmq-client-java 5.0.8, one JVM: ``e2e/clients/java/FaultsWorkload.java``) and the
Node.js client (rocketmq-client-nodejs 1.0.8: ``e2e/clients/node/faults_workload.js``). Each
sends to ``jq`` as :class:`~e2e.faults.workload.Sender` does (key = body, a raised send retried
twice with its key) and receives with a ``SimpleConsumer`` in a group of its own (every message
of ``jq`` is delivered to that group as well as to the Python consumer's), changing the
invisible time of a fifth and acking, as :class:`~e2e.faults.workload.Popper` does. The
program prints each operation as a JSON line with its CLOCK_MONOTONIC time (``System.nanoTime``,
``process.hrtime``, as :func:`time.monotonic`); :class:`ClientWorkload` puts them into the run's
:class:`~e2e.faults.history.History` with the Python workload's fields, so the checker reads
every client alike (the senders' names begin with ``s``: their sends are checked with the
Python senders').

The Node.js client dials one address (it cannot use a list: :mod:`e2e.replication.clients`), so
it is given a :class:`~e2e.replication.clients.ServiceProxy` in the client's namespace in front
of every member, as a Kubernetes Service would be: each new connection goes to the next member
that accepts one within ``CONNECT_TIMEOUT_S``.

Given ``dial``, the Node.js client dials that address itself instead: a DNS name resolving to
every member (as a headless Service's does) or a proxy of the caller's
(:mod:`e2e.replication.partition_clients` measures both).

Jars and ``node_modules`` come from :mod:`e2e.replication.clients` (Maven and npm, once,
outside the namespaces: :func:`prepare`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from e2e.faults.history import History
from e2e.replication.clients import CLIENTS, ClientMissing, ServiceProxy, java_lib, node_modules

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Client:
    name: str
    sender: str
    """Its sender's process name in the history (begins with ``s``)."""
    consumer: str
    """Its consumer's process name in the history."""
    group: str
    """Its consumer group (its own: it receives every message of the topic)."""


KNOWN = {
    "java": Client("java", "sj1", "pj", "cqj"),
    "node": Client("node", "sn1", "pn", "cqn"),
}


def prepare(name: str) -> None:
    """Install ``name``'s client once (the package registries need the network: call it before
    the namespaces)."""
    if name == "java":
        if shutil.which("java") is None:
            raise ClientMissing("java is not installed; it runs the Java workload")
        java_lib()
    elif name == "node":
        if shutil.which("node") is None:
            raise ClientMissing("node is not installed; it runs the Node.js workload")
        node_modules()
    else:
        raise ValueError(f"unknown client {name!r}: java or node")


def _targets(endpoints: str) -> list[tuple[str, int]]:
    hosts = [e.rsplit(":", 1) for e in endpoints.split(";") if e]
    return [(host, int(port)) for host, port in hosts]


class ClientWorkload(threading.Thread):
    """One client's program and the thread that reads its history lines."""

    def __init__(
        self, client: Client, endpoints: str, topic: str, history: History, rate_per_s: float,
        seed: int, log_path: Path, *, dial: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name=f"{client.name}-workload", daemon=True)
        self.client = client
        self.history = history
        self.ready = threading.Event()
        self.malformed = 0
        """Lines that were neither ``ready`` nor a history event (counted, not fatal)."""
        self.proxy: ServiceProxy | None = None
        self._log = log_path.open("ab")
        args = [topic, client.group, client.sender, client.consumer, str(rate_per_s), str(seed)]
        env = None
        if client.name == "java":
            source = CLIENTS / "java" / "FaultsWorkload.java"
            argv = ["java", "-Xmx256m", "-cp", f"{java_lib()}/*", str(source), endpoints, *args]
        else:
            if dial is None:
                self.proxy = ServiceProxy(_targets(endpoints))
                dial = self.proxy.endpoint
            elif ";" in dial:
                raise ValueError(f"the Node.js client dials one address or name, not {dial!r}")
            env = {**os.environ, "NODE_PATH": str(node_modules())}
            script = CLIENTS / "node" / "faults_workload.js"
            argv = ["node", str(script), dial, *args]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env
        )

    def run(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            if line == "ready":
                self.ready.set()
                continue
            try:
                event = json.loads(line)
                self.history.add_at(
                    int(event["t_ns"]) / 1e9, str(event["process"]), str(event["type"]),
                    str(event["f"]), dict(event["value"]),
                )  # fmt: skip
            except (ValueError, KeyError, TypeError):
                self.malformed += 1

    def startup(self) -> None:
        """Start reading its lines; return once its clients are up."""
        self.start()
        if not self.ready.wait(START_TIMEOUT_S):
            raise RuntimeError(
                f"the {self.client.name} workload did not start in {START_TIMEOUT_S:.0f} s "
                f"(exit code {self.process.poll()}; its stderr is in {self._log.name})"
            )

    def stop_sends(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.write(b"stop-sends\n")
            self.process.stdin.flush()

    def stop(self) -> None:
        """Close its input (it stops its consumer, closes its clients and exits)."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.close()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.join(10)
        if self.proxy is not None:
            self.proxy.close()
        self._log.close()
