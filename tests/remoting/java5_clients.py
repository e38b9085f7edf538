"""The official RocketMQ 5.x remoting Java client (rocketmq-client 5.3.3, unchanged) for the
tests: ``e2e/clients/remoting5/Remoting5Clients.java``, built as :mod:`java_programs` builds
every Java program of the tests (:mod:`java_clients` runs the 4.9.8 client)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import java_clients, java_programs

REMOTING5 = java_programs.Program(
    "remoting5", "Remoting5Clients.java", "Remoting5Clients", ("rocketmq-client-5.3.3.jar",)
)
PROGRAM = REMOTING5.folder / REMOTING5.source


def lib() -> Path:
    return java_programs.lib(REMOTING5)


def classes() -> Path:
    return java_programs.classes(REMOTING5)


def run(log_root: Path, *args: str) -> list[str]:
    """``args`` of Remoting5Clients.java (one JVM); its output lines once it exits 0."""
    classpath = f"{classes()}:{lib()}/*"
    argv = [
        "java", *java_clients.JVM_PROPERTIES, f"-Drocketmq.client.logRoot={log_root}",
        "-cp", classpath, "Remoting5Clients", *args,
    ]  # fmt: skip
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROGRAM.parent
    )
    return java_clients.finish(process)
