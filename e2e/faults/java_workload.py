"""The official Java client (rocketmq-client-java 5.0.8) as a second workload of a fault run.

One JVM (``e2e/clients/java/FaultsWorkload.java``) in the client's namespace, beside the Python
workload: a ``Producer`` sending to ``jq`` as :class:`~e2e.faults.workload.Sender` does (key =
body, a raised send retried twice with its key) under process ``sj1``, and a ``SimpleConsumer``
in its own group (``cqj``: every message of ``jq`` is delivered to it as well as to the Python
consumer's group) receiving, changing the invisible time of a fifth and acking, as
:class:`~e2e.faults.workload.Popper` does, under process ``pj``. The JVM prints each operation
as a JSON line with its ``System.nanoTime`` (CLOCK_MONOTONIC, as :func:`time.monotonic`);
:class:`JavaWorkload` puts them into the run's :class:`~e2e.faults.history.History` with the
same fields as the Python workload's, so the checker reads both alike (``sj1`` is a sender of
prefix ``s``: its sends are checked with the Python senders').

The jars come from :func:`e2e.replication.clients.java_lib` (Maven, once, outside the
namespaces: :func:`prepare`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
from pathlib import Path

from e2e.faults.history import History
from e2e.replication.clients import CLIENTS, ClientMissing, java_lib

SENDER = "sj1"
CONSUMER = "pj"
GROUP = "cqj"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def prepare() -> Path:
    """The Java client's jars (copied by Maven once; needs the network, so before the run)."""
    if shutil.which("java") is None:
        raise ClientMissing("java is not installed; it runs the Java workload")
    return java_lib()


class JavaWorkload(threading.Thread):
    """The JVM and the thread that reads its history lines."""

    def __init__(
        self, endpoints: str, topic: str, history: History, rate_per_s: float, seed: int,
        log_path: Path,
    ) -> None:  # fmt: skip
        super().__init__(name="java-workload", daemon=True)
        self.history = history
        self.ready = threading.Event()
        self.malformed = 0
        """Lines that were neither ``ready`` nor a history event (counted, not fatal)."""
        self._log = log_path.open("ab")
        source = CLIENTS / "java" / "FaultsWorkload.java"
        argv = ["java", "-Xmx256m", "-cp", f"{prepare()}/*", str(source), endpoints, topic,
                GROUP, SENDER, CONSUMER, str(rate_per_s), str(seed)]  # fmt: skip
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log
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
                f"the Java workload did not start in {START_TIMEOUT_S:.0f} s (exit code "
                f"{self.process.poll()}; its stderr is in {self._log.name})"
            )

    def stop_sends(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.write(b"stop-sends\n")
            self.process.stdin.flush()

    def stop(self) -> None:
        """Close its input (it stops its consumer, closes both clients and exits)."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.process.stdin.close()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.join(10)
        self._log.close()
