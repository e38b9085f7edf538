"""The official RocketMQ remoting Java client (rocketmq-client 4.9.8 with rocketmq-acl 4.9.8,
unchanged) for the tests: ``e2e/clients/remoting/RemotingClients.java``, built as
:mod:`java_programs` builds every Java program of the tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import java_programs
from .java_programs import CACHE, CLIENTS

__all__ = ["CACHE", "CLIENTS", "JVM_PROPERTIES", "finish", "run", "start"]

REMOTING = java_programs.Program(
    "remoting",
    "RemotingClients.java",
    "RemotingClients",
    # AclClientRPCHook (rocketmq-acl): the ACL 1.0 request signing
    ("rocketmq-client-4.9.8.jar", "rocketmq-acl-4.9.8.jar"),
)
PROGRAM = REMOTING.folder / REMOTING.source
RUN_TIMEOUT_S = 240.0  # the program's own deadline is 120 s; JVM start and compile on top


def lib() -> Path:
    return java_programs.lib(REMOTING)


def classes() -> Path:
    return java_programs.classes(REMOTING)


JVM_PROPERTIES = (
    # the client's rebalance every second, not every 20 s: the lite pull consumer's first
    # rebalance otherwise waits a whole interval (the push consumer's starts at once)
    "-Drocketmq.client.rebalance.waitInterval=1000",
    "-Drocketmq.client.logLevel=WARN",
)


def start(log_root: Path, *args: str, properties: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """``args`` of RemotingClients.java; the client writes its own log under ``log_root``;
    ``properties``: more ``-D`` options (TLS)."""
    classpath = f"{classes()}:{lib()}/*"
    argv = [
        "java", *JVM_PROPERTIES, *properties, f"-Drocketmq.client.logRoot={log_root}",
        "-cp", classpath, "RemotingClients", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROGRAM.parent
    )


def finish(process: subprocess.Popen[str]) -> list[str]:
    """The program's output lines once it exits 0 (killed after :data:`RUN_TIMEOUT_S`)."""
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(
            f"the Java client did not end:\n{out[-2000:]}\n{err[-3000:]}"
        ) from None
    assert process.returncode == 0, f"exit {process.returncode}:\n{out[-2000:]}\n{err[-3000:]}"
    return out.splitlines()


def run(log_root: Path, *args: str, properties: tuple[str, ...] = ()) -> list[str]:
    return finish(start(log_root, *args, properties=properties))
