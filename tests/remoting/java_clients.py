"""The official RocketMQ remoting Java client (rocketmq-client 4.9.8, unchanged) for the tests:
``e2e/clients/remoting/RemotingClients.java``, compiled once, against jars Maven copies once
into ``e2e/clients/.cache/remoting-lib`` (``GANNET_CLIENTS_CACHE`` overrides the folder)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parents[2] / "e2e" / "clients"
CACHE = Path(os.environ.get("GANNET_CLIENTS_CACHE", CLIENTS / ".cache"))
PROGRAM = CLIENTS / "remoting" / "RemotingClients.java"
CLIENT_JAR = "rocketmq-client-4.9.8.jar"
ACL_JAR = "rocketmq-acl-4.9.8.jar"  # AclClientRPCHook: the ACL 1.0 request signing
RUN_TIMEOUT_S = 240.0  # the program's own deadline is 120 s; JVM start and compile on top


def lib() -> Path:
    """The jars, copied by Maven on first use (atomically: a rename of a finished folder)."""
    target = CACHE / "remoting-lib"
    if (target / CLIENT_JAR).exists() and (target / ACL_JAR).exists():
        return target
    if target.exists():  # copied before the pom named rocketmq-acl: copy again
        shutil.rmtree(target, ignore_errors=True)
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make java installs a JDK and Maven)")
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="remoting-lib.", dir=CACHE))
    pom = CLIENTS / "remoting" / "pom.xml"
    argv = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
    done = subprocess.run(
        [*argv, f"-DoutputDirectory={staging}"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not (staging / ACL_JAR).exists():
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"mvn could not fetch rocketmq-client:\n{done.stdout[-3000:]}")
    try:
        staging.rename(target)
    except OSError:  # another run finished first
        shutil.rmtree(staging, ignore_errors=True)
    return target


JVM_PROPERTIES = (
    # the client's rebalance every second, not every 20 s: the lite pull consumer's first
    # rebalance otherwise waits a whole interval (the push consumer's starts at once)
    "-Drocketmq.client.rebalance.waitInterval=1000",
    "-Drocketmq.client.logLevel=WARN",
)


def classes() -> Path:
    """RemotingClients.java compiled once per version of its source (a JVM per run then skips
    the compile: about 2 CPU-seconds each on a busy machine)."""
    jars = lib()
    digest = hashlib.sha256(PROGRAM.read_bytes()).hexdigest()[:16]
    target = CACHE / f"remoting-classes-{digest}"
    if (target / "RemotingClients.class").exists():
        return target
    if shutil.which("javac") is None:
        pytest.skip("javac is not installed (make java installs a JDK and Maven)")
    staging = Path(tempfile.mkdtemp(prefix="remoting-classes.", dir=CACHE))
    argv = ["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(staging), str(PROGRAM)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"javac failed on {PROGRAM.name}:\n{done.stderr[-3000:]}")
    try:
        staging.rename(target)
    except OSError:  # another run finished first
        shutil.rmtree(staging, ignore_errors=True)
    return target


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
