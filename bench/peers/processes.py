"""Child processes of the benchmark: start a system as its own process group, wait until it is
ready (a TCP port accepts, or a line appears in its log), stop it, and measure what it costs
(CPU seconds, bytes written, peak RSS) from /proc while a load runs.

Used by every peer module (:mod:`bench.peers.gannet`, :mod:`bench.peers.rocketmq`, ...). Output
of each child goes to a log file in its work directory, never to a pipe (a full pipe would stall
the broker). Every wait has a hard timeout; :func:`stop` always ends the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import procfs

STOP_GRACE_S = 10.0
SAMPLE_INTERVAL_S = 0.2


class PeerError(RuntimeError):
    """A peer could not be fetched, started or stopped."""


@dataclass
class Child:
    """One started process group and where its output goes."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, size_bytes: int = 2000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-size_bytes:].decode(errors="replace")


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    cpus: str | None = None,
) -> Child:
    """Start ``argv`` in a new session (its own process group), output appended to ``log_path``.
    ``cpus`` (e.g. "0") pins it with taskset when the machine has more than one CPU."""
    command = list(argv)
    if cpus is not None and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", cpus, *command]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    return Child(name, process, log_path)


def wait_port(child: Child, host: str, port: int, timeout_s: float) -> None:
    """Return once ``host:port`` accepts a TCP connection; raise if the child dies or the time
    runs out (with the tail of its log in the message)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.process.poll() is not None:
            raise PeerError(
                f"{child.name} exited with {child.process.returncode} before {host}:{port} "
                f"opened; log tail:\n{child.log_tail()}"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)  # polling a port: there is no event to await
    raise PeerError(
        f"{child.name}: {host}:{port} not open after {timeout_s:.0f} s:\n{child.log_tail()}"
    )


def wait_log(child: Child, needle: str, timeout_s: float) -> None:
    """Return once ``needle`` appears in the child's log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if needle in child.log_tail(1 << 20):
            return
        if child.process.poll() is not None:
            raise PeerError(f"{child.name} exited before logging {needle!r}:\n{child.log_tail()}")
        time.sleep(0.1)
    raise PeerError(f"{child.name}: no {needle!r} in the log after {timeout_s:.0f} s")


def stop(child: Child, grace_s: float = STOP_GRACE_S) -> int | None:
    """SIGTERM the child's process group, SIGKILL it after ``grace_s``; returns the exit code."""
    if child.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.process.wait(timeout=grace_s)
    # Members of the group that outlived the leader (a JVM's forked helpers) go too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    return child.process.returncode


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def descendants(pid: int) -> list[int]:
    """``pid`` and every live descendant (threads' children lists under /proc)."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 1000:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with contextlib.suppress(OSError):
                    text = Path(f"/proc/{current}/task/{task}/children").read_text()
                    todo.extend(procfs.parse_children(text))
    return found


@dataclass(frozen=True)
class Usage:
    """What a set of processes consumed between two readings."""

    cpu_s: float
    write_bytes: int
    peak_rss_bytes: int


@dataclass
class Meter:
    """Measures the CPU seconds, bytes written and peak RSS of process trees while a load runs:
    ``with Meter(pids) as meter: ...`` then ``meter.usage``. A thread samples RSS every
    ``SAMPLE_INTERVAL_S``; CPU and bytes are differences of two readings."""

    roots: list[int]
    usage: Usage | None = None
    _start: tuple[float, int] = (0.0, 0)
    _peak_rss: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> tuple[float, int, int]:
        cpu, written, rss = 0.0, 0, 0
        for root in self.roots:
            for pid in descendants(root):
                with contextlib.suppress(OSError, procfs.ProcFormatError):
                    cpu += procfs.parse_stat(Path(f"/proc/{pid}/stat").read_text()).total_s
                    written += procfs.parse_io(Path(f"/proc/{pid}/io").read_text()).get(
                        "write_bytes", 0
                    )
                    rss += procfs.parse_rss_bytes(Path(f"/proc/{pid}/status").read_text())
        return cpu, written, rss

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self._peak_rss = max(self._peak_rss, self._read()[2])

    def __enter__(self) -> Meter:
        cpu, written, rss = self._read()
        self._start, self._peak_rss = (cpu, written), rss
        self._thread = threading.Thread(target=self._sample, name="meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        cpu, written, rss = self._read()
        self.usage = Usage(
            cpu_s=cpu - self._start[0],
            write_bytes=written - self._start[1],
            peak_rss_bytes=max(self._peak_rss, rss),
        )


def loadavg() -> tuple[float, float, float]:
    return procfs.parse_loadavg(Path("/proc/loadavg").read_text())


def cpu_busy_fraction(window_s: float = 1.0, exclude_roots: Sequence[int] = ()) -> float:
    """Share of all CPUs that other work kept busy over the next ``window_s``: machine-wide
    busy time (``/proc/stat``) minus the CPU time of the process trees ``exclude_roots`` (the
    system under test, whose JIT and GC still run between repetitions). The 1-minute load
    average cannot tell this: it still carries the harness's own previous run."""
    return cpu_busy_split(window_s, exclude_roots)[1]


def cpu_busy_split(window_s: float, exclude_roots: Sequence[int]) -> tuple[float, float]:
    """``(machine-wide busy share, busy share without exclude_roots' trees)`` of all CPUs over
    one window of ``window_s`` (both from the same readings)."""

    def own_s() -> float:
        return Meter(list(exclude_roots))._read()[0] if exclude_roots else 0.0

    busy0, total0 = procfs.parse_cpu_times(Path("/proc/stat").read_text())
    own0 = own_s()
    time.sleep(window_s)
    busy1, total1 = procfs.parse_cpu_times(Path("/proc/stat").read_text())
    own_ticks = (own_s() - own0) * procfs.CLOCK_TICKS_PER_S
    total = max(1, total1 - total0)
    return (busy1 - busy0) / total, max(0.0, busy1 - busy0 - own_ticks) / total
