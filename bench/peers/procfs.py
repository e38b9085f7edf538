"""Pure parsers for the /proc files the benchmark reads: CPU time (``/proc/<pid>/stat``), bytes
written to storage (``/proc/<pid>/io``), resident memory (``/proc/<pid>/status``) and the load
average (``/proc/loadavg``). :mod:`bench.peers.processes` reads the files; these functions only
turn their text into numbers, so the tests feed them fixtures.

Formats (proc(5)):
- ``stat``: ``pid (comm) state ppid ...``; comm may hold spaces and parentheses, so fields are
  counted after the LAST ``)``. utime and stime are fields 14 and 15 (1-based), in clock ticks.
- ``io``: ``name: value`` lines; ``write_bytes`` is what the process caused to be sent to the
  block layer (page-cache writeback counts to the dirtier), ``wchar`` what it passed to write().
- ``status``: ``VmRSS:   1234 kB``.
- ``loadavg``: ``0.50 0.40 0.30 2/345 6789``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ProcFormatError(ValueError):
    """A /proc file did not have the documented shape."""


@dataclass(frozen=True)
class CpuTimes:
    """User and system CPU time of one process, in seconds."""

    user_s: float
    system_s: float

    @property
    def total_s(self) -> float:
        return self.user_s + self.system_s


def parse_stat(text: str, ticks_per_s: int = CLOCK_TICKS_PER_S) -> CpuTimes:
    """CPU times from the text of ``/proc/<pid>/stat``."""
    close = text.rfind(")")
    if close < 0:
        raise ProcFormatError(f"/proc stat without '(comm)': {text[:60]!r}")
    fields = text[close + 1 :].split()
    # fields[0] is field 3 (state); utime is field 14 -> index 11, stime 15 -> index 12.
    if len(fields) < 13:
        raise ProcFormatError(f"/proc stat has {len(fields) + 2} fields, wanted >= 15")
    try:
        utime, stime = int(fields[11]), int(fields[12])
    except ValueError as exc:
        raise ProcFormatError(f"/proc stat utime/stime not integers: {fields[11:13]}") from exc
    return CpuTimes(utime / ticks_per_s, stime / ticks_per_s)


def parse_io(text: str) -> dict[str, int]:
    """The counters of ``/proc/<pid>/io`` by name (``write_bytes``, ``wchar`` ...)."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProcFormatError(f"/proc io line without ':': {line!r}")
        try:
            counters[name.strip()] = int(value)
        except ValueError as exc:
            raise ProcFormatError(f"/proc io value not an integer: {line!r}") from exc
    return counters


def parse_rss_bytes(text: str) -> int:
    """Resident set size in bytes from ``/proc/<pid>/status``."""
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            if len(parts) != 3 or parts[2] != "kB":
                raise ProcFormatError(f"unexpected VmRSS line: {line!r}")
            return int(parts[1]) * 1024
    raise ProcFormatError("no VmRSS line in /proc status (a kernel thread or a zombie?)")


def parse_loadavg(text: str) -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages from ``/proc/loadavg``."""
    parts = text.split()
    if len(parts) < 3:
        raise ProcFormatError(f"/proc/loadavg too short: {text!r}")
    return float(parts[0]), float(parts[1]), float(parts[2])


def parse_cpu_times(text: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs from ``/proc/stat``'s first ``cpu`` line; busy
    leaves out idle and iowait."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = [int(v) for v in line.split()[1:]]
            if len(ticks) < 5:
                break
            total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal
            return total - ticks[3] - ticks[4], total
    raise ProcFormatError("/proc/stat has no complete 'cpu' line")


def parse_children(text: str) -> list[int]:
    """Child pids from ``/proc/<pid>/task/<tid>/children`` (space separated)."""
    return [int(p) for p in text.split()]
