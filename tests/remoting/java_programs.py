"""Java programs built on Maven Central jars, for the tests: the official remoting clients
(:mod:`java_clients`, :mod:`java5_clients`), mqadmin's classes (rocketmq-tools 5.3.3,
``e2e/clients/mqadmin/MqAdminChecks.java``) and a Spring Boot application with
rocketmq-spring-boot-starter 2.3.3 (``e2e/clients/spring``), all unchanged. Each program's jars
are copied once per version of its ``pom.xml`` by Maven into ``<cache>/<name>-lib-<digest>``
and its source compiled once per version of the source and the pom (a JVM per run then skips
the compile: about 2 CPU-seconds each on a busy machine). The cache is
``~/.cache/gannet-clients/`` (``GANNET_CLIENTS_CACHE`` overrides it), outside the checkout as
``~/.m2`` is: a fresh clone or another worktree on the machine reuses what one copied and
compiled (Maven's copy and javac of the three programs ``make test`` runs take about half a
minute on a quiet 2-core machine, two on a busy one). Every folder is written under a
temporary name and renamed into place when complete, so clones running at once share it
safely."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parents[2] / "e2e" / "clients"
CACHE = Path(os.environ.get("GANNET_CLIENTS_CACHE") or Path.home() / ".cache" / "gannet-clients")
RUN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Program:
    name: str
    """The folder under e2e/clients holding pom.xml and the source."""
    source: str
    """The source file, relative to that folder (a package path for packaged classes)."""
    main_class: str
    marker_jars: tuple[str, ...]
    """Jars that are in the lib folder once Maven copied everything (a folder copied before
    the pom named one of them is copied again)."""
    source_folder: Path | None = None
    """Where ``source`` is when not beside the pom (a benchmark's client under ``bench/`` that
    runs on the jars of one of the tests' poms)."""

    @property
    def folder(self) -> Path:
        return CLIENTS / self.name

    @property
    def source_path(self) -> Path:
        return (self.source_folder or self.folder) / self.source


MQADMIN = Program("mqadmin", "MqAdminChecks.java", "MqAdminChecks", ("rocketmq-tools-5.3.3.jar",))
SPRING = Program(
    "spring",
    "io/gannet/e2e/SpringChecks.java",
    "io.gannet.e2e.SpringChecks",
    ("rocketmq-spring-boot-2.3.3.jar",),
)


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


def _digest(*files: Path) -> str:
    hashed = hashlib.sha256()
    for file in files:
        hashed.update(hashlib.sha256(file.read_bytes()).digest())
    return hashed.hexdigest()[:16]


def lib(program: Program) -> Path:
    """The jars of this version of the pom, copied by Maven on first use (atomically: a rename
    of a finished folder)."""
    target = CACHE / f"{program.name}-lib-{_digest(program.folder / 'pom.xml')}"
    if all((target / jar).exists() for jar in program.marker_jars):
        return target
    if target.exists():  # copied before the pom named one of the marker jars: copy again
        shutil.rmtree(target, ignore_errors=True)
    _require("java", "javac", "mvn")
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{program.name}-lib.", dir=CACHE))
    argv = ["mvn", "-B", "-q", "-f", str(program.folder / "pom.xml")]
    done = subprocess.run(
        [*argv, "dependency:copy-dependencies", f"-DoutputDirectory={staging}"],
        capture_output=True,
        text=True,
        check=False,
    )
    missing = [jar for jar in program.marker_jars if not (staging / jar).exists()]
    if done.returncode != 0 or missing:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"mvn could not fetch {', '.join(missing)}:\n{done.stdout[-3000:]}")
    return _publish(staging, target)


def classes(program: Program) -> Path:
    jars = lib(program)
    source = program.source_path
    target = CACHE / f"{program.name}-classes-{_digest(source, program.folder / 'pom.xml')}"
    if (target / program.source.replace(".java", ".class")).exists():
        return target
    _require("javac")
    staging = Path(tempfile.mkdtemp(prefix=f"{program.name}-classes.", dir=CACHE))
    argv = ["javac", "-nowarn", "-parameters", "-cp", f"{jars}/*", "-d", str(staging), str(source)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"javac failed on {source.name}:\n{done.stderr[-3000:]}")
    return _publish(staging, target)


def run(program: Program, log_root: Path, *args: str) -> tuple[int, list[str]]:
    """Run ``program``; (exit code, output lines). The clients log under ``log_root``."""
    argv = [
        # the client's rebalance every second, not every 20 s: a lite pull consumer's first
        # rebalance otherwise waits a whole interval (as java_clients.JVM_PROPERTIES)
        "java", "-Drocketmq.client.rebalance.waitInterval=1000",
        "-Drocketmq.client.logLevel=WARN", f"-Drocketmq.client.logRoot={log_root}",
        f"-Duser.home={log_root}", "-cp", f"{classes(program)}:{lib(program)}/*",
        program.main_class, *args,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=log_root, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{program.main_class} did not end:\n{exc.stdout!r}") from None
    return done.returncode, (done.stdout + done.stderr[-3000:]).splitlines()
