"""mqadmin's classes (rocketmq-tools 5.3.3, unchanged) for the tests:
``e2e/clients/mqadmin/MqAdminChecks.java``, compiled once per version of its source, against jars
Maven copies once into ``e2e/clients/.cache/mqadmin-lib`` (``GANNET_CLIENTS_CACHE`` overrides the
folder), as :mod:`java_clients` does for the 4.x client."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .java_clients import CACHE, CLIENTS

PROGRAM = CLIENTS / "mqadmin" / "MqAdminChecks.java"
TOOLS_JAR = "rocketmq-tools-5.3.3.jar"
RUN_TIMEOUT_S = 180.0


def _require(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make java installs a JDK and Maven)")


def _publish(staging: Path, target: Path) -> Path:
    """Rename a finished folder into place (another run may have finished first)."""
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def lib() -> Path:
    target = CACHE / "mqadmin-lib"
    if (target / TOOLS_JAR).exists():
        return target
    _require("java", "javac", "mvn")
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="mqadmin-lib.", dir=CACHE))
    pom = PROGRAM.parent / "pom.xml"
    argv = ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
    done = subprocess.run(
        [*argv, f"-DoutputDirectory={staging}"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not (staging / TOOLS_JAR).exists():
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"mvn could not fetch rocketmq-tools:\n{done.stdout[-3000:]}")
    return _publish(staging, target)


def classes() -> Path:
    jars = lib()
    digest = hashlib.sha256(PROGRAM.read_bytes()).hexdigest()[:16]
    target = CACHE / f"mqadmin-classes-{digest}"
    if (target / "MqAdminChecks.class").exists():
        return target
    _require("javac")
    staging = Path(tempfile.mkdtemp(prefix="mqadmin-classes.", dir=CACHE))
    argv = ["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(staging), str(PROGRAM)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"javac failed on {PROGRAM.name}:\n{done.stderr[-3000:]}")
    return _publish(staging, target)


def run(log_root: Path, *args: str) -> tuple[int, list[str]]:
    """Run the checks; (exit code, output lines). The clients log under ``log_root``."""
    argv = [
        "java", "-Drocketmq.client.logLevel=WARN", f"-Drocketmq.client.logRoot={log_root}",
        f"-Duser.home={log_root}", "-cp", f"{classes()}:{lib()}/*", "MqAdminChecks", *args,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=log_root, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"mqadmin's checks did not end:\n{exc.stdout!r}") from None
    return done.returncode, (done.stdout + done.stderr[-3000:]).splitlines()
