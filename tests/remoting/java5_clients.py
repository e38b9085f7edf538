"""The official RocketMQ 5.x remoting Java client (rocketmq-client 5.3.3, unchanged) for the
tests: ``e2e/clients/remoting5/Remoting5Clients.java``, compiled once per version of its source
against jars Maven copies once into ``e2e/clients/.cache/remoting5-lib`` (the same caching as
:mod:`java_clients`, which runs the 4.9.8 client)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from . import java_clients

PROGRAM = java_clients.CLIENTS / "remoting5" / "Remoting5Clients.java"
CLIENT_JAR = "rocketmq-client-5.3.3.jar"


def _need(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make java installs a JDK and Maven)")


def lib() -> Path:
    """The jars, copied by Maven on first use (atomically: a rename of a finished folder)."""
    target = java_clients.CACHE / "remoting5-lib"
    if (target / CLIENT_JAR).exists():
        return target
    _need("java", "javac", "mvn")
    java_clients.CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="remoting5-lib.", dir=java_clients.CACHE))
    pom = PROGRAM.parent / "pom.xml"
    argv = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
    done = subprocess.run(
        [*argv, f"-DoutputDirectory={staging}"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not (staging / CLIENT_JAR).exists():
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"mvn could not fetch rocketmq-client 5.3.3:\n{done.stdout[-3000:]}")
    try:
        staging.rename(target)
    except OSError:  # another run finished first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def classes() -> Path:
    """Remoting5Clients.java compiled once per version of its source."""
    jars = lib()
    digest = hashlib.sha256(PROGRAM.read_bytes()).hexdigest()[:16]
    target = java_clients.CACHE / f"remoting5-classes-{digest}"
    if (target / "Remoting5Clients.class").exists():
        return target
    _need("javac")
    staging = Path(tempfile.mkdtemp(prefix="remoting5-classes.", dir=java_clients.CACHE))
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
