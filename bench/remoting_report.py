"""The figures and the report of the remoting side-by-side benchmark (:mod:`bench.remoting`):
pure functions, no IO, so ``tests/bench/test_remoting_report.py`` feeds them lines and records.

- :func:`parse_done` reads one ``done <phase> key=value ...`` line of the Java client
  (``bench/remoting_java/RemotingBench.java``) and checks it names every figure.
- :func:`phase_figures` turns it and the brokers' CPU seconds over the phase into the figures
  recorded: messages per second, latency percentiles (ms), broker CPU µs per message.
- :func:`medians` folds the repetitions of one system into the median of each figure.
- :func:`markdown` renders ``bench/results/REMOTING.md`` from the records of
  ``bench/results/remoting.jsonl``: the latest run of each pair of systems as a table (first
  system, second system, their ratio), and every recorded run as one line of history.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PHASES = ("send", "batch", "pull")
DONE_FIELDS = ("msgs", "failed", "seconds", "p50_us", "p99_us")

FIGURES: dict[str, tuple[tuple[str, str], ...]] = {
    # phase -> (figure, how the report names it); latencies only where each call was timed
    "send": (
        ("msgs_per_s", "msgs/s"),
        ("p50_ms", "send p50 ms"),
        ("p99_ms", "send p99 ms"),
        ("cpu_us_per_msg", "broker CPU µs/msg"),
        ("cpu_above_idle_us_per_msg", "broker CPU µs/msg above idle"),
    ),
    "batch": (
        ("msgs_per_s", "msgs/s"),
        ("p50_ms", "batch p50 ms"),
        ("p99_ms", "batch p99 ms"),
        ("cpu_us_per_msg", "broker CPU µs/msg"),
        ("cpu_above_idle_us_per_msg", "broker CPU µs/msg above idle"),
    ),
    "pull": (
        ("msgs_per_s", "msgs/s"),
        ("cpu_us_per_msg", "broker CPU µs/msg"),
        ("cpu_above_idle_us_per_msg", "broker CPU µs/msg above idle"),
    ),
}
NAMES = {"gannet": "Gannet", "rocketmq": "RocketMQ"}


class HarnessError(ValueError):
    """A line of the Java client that is not what the protocol says; the message quotes it."""


@dataclass(frozen=True, slots=True)
class Done:
    """One phase as the Java client measured it."""

    phase: str
    msgs: int
    failed: int
    seconds: float
    p50_us: int
    p99_us: int


def parse_done(line: str) -> Done:
    """``done <phase> msgs=<n> failed=<n> seconds=<s> p50_us=<n> p99_us=<n>``."""
    words = line.split()
    if len(words) < 2 or words[0] != "done" or words[1] not in PHASES:
        raise HarnessError(f"not a 'done <phase> ...' line with a phase of {PHASES}: {line!r}")
    values: dict[str, str] = {}
    for word in words[2:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise HarnessError(f"{word!r} is not key=value in {line!r}")
        values[key] = value
    missing = [name for name in DONE_FIELDS if name not in values]
    if missing:
        raise HarnessError(f"{', '.join(missing)} missing from {line!r}")
    try:
        done = Done(
            phase=words[1],
            msgs=int(values["msgs"]),
            failed=int(values["failed"]),
            seconds=float(values["seconds"]),
            p50_us=int(values["p50_us"]),
            p99_us=int(values["p99_us"]),
        )
    except ValueError as exc:
        raise HarnessError(f"a figure is not a number in {line!r}: {exc}") from None
    if done.seconds <= 0 or done.msgs <= 0:
        raise HarnessError(f"a phase without messages or time: {line!r}")
    return done


def phase_figures(done: Done, broker_cpu_s: float, idle_cpu_ms_per_s: float) -> dict[str, float]:
    """The recorded figures of one phase; ``broker_cpu_s``: user + system seconds of the
    broker processes between the phase's start and its end; ``idle_cpu_ms_per_s``: what they
    spend without load (timers, scans), which ``cpu_above_idle_us_per_msg`` leaves out."""
    above_idle_s = max(0.0, broker_cpu_s - idle_cpu_ms_per_s / 1000 * done.seconds)
    figures = {
        "msgs": float(done.msgs),
        "failed": float(done.failed),
        "seconds": round(done.seconds, 3),
        "msgs_per_s": round(done.msgs / done.seconds, 1),
        "cpu_us_per_msg": round(broker_cpu_s * 1e6 / done.msgs, 2),
        "cpu_above_idle_us_per_msg": round(above_idle_s * 1e6 / done.msgs, 2),
    }
    if done.phase != "pull":
        figures["p50_ms"] = round(done.p50_us / 1000, 3)
        figures["p99_ms"] = round(done.p99_us / 1000, 3)
    return figures


def medians(repetitions: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The median of each figure over the repetitions (a figure some lack is left out); the
    counts ``msgs`` and ``failed`` are summed instead."""
    if not repetitions:
        raise ValueError("no repetition to take a median of")
    keys = set.intersection(*(set(r) for r in repetitions))
    folded = {}
    for key in sorted(keys):
        values = [r[key] for r in repetitions]
        folded[key] = sum(values) if key in ("msgs", "failed") else statistics.median(values)
    folded["repetitions"] = len(repetitions)
    return folded


def ratio_text(first: float | None, second: float | None) -> str:
    if first is None or second is None or second == 0:
        return "–"
    return f"{first / second:.2f}×"


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def _system_name(system: str) -> str:
    base, _, tree = system.partition("@")
    name = NAMES.get(base, base)
    return f"{name} ({tree})" if tree else name


@dataclass(frozen=True)
class Run:
    """One recorded run: its shared fields and, per system and phase, the median figures."""

    time: str
    meta: dict[str, Any]
    systems: tuple[str, ...]
    figures: dict[tuple[str, str], dict[str, float]]
    series: dict[tuple[str, str], dict[str, list[float]]]
    """Per system and phase, a figure's value in each repetition (``<figure>_runs``)."""

    def value(self, system: str, phase: str, figure: str) -> float | None:
        found = self.figures.get((system, phase), {}).get(figure)
        return None if found is None else float(found)

    def each(self, system: str, phase: str, figure: str) -> str:
        """The figure in each repetition, in order ("–" when not recorded)."""
        values = self.series.get((system, phase), {}).get(figure)
        return ", ".join(_number(v) for v in values) if values else "–"


def runs(records: Iterable[Mapping[str, Any]]) -> list[Run]:
    """The runs in ``records`` (lines of ``remoting.jsonl``), oldest first; a run is every line
    sharing a ``time``. Lines without ``system`` and ``phase`` are skipped."""
    by_time: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        if "system" in record and "phase" in record and "time" in record:
            by_time.setdefault(str(record["time"]), []).append(record)
    found = []
    for time in sorted(by_time):
        lines = by_time[time]
        systems = tuple(dict.fromkeys(str(line["system"]) for line in lines))
        figures = {
            (str(line["system"]), str(line["phase"])): {
                k: float(v)
                for k, v in line.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            for line in lines
        }
        series = {
            (str(line["system"]), str(line["phase"])): {
                k.removesuffix("_runs"): [float(x) for x in v]
                for k, v in line.items()
                if k.endswith("_runs") and isinstance(v, list)
            }
            for line in lines
        }
        found.append(Run(time, dict(lines[0]), systems, figures, series))
    return found


def run_table(run: Run) -> list[str]:
    """The table of one run: each phase's figures for its first two systems and their ratio."""
    first, second = run.systems[0], run.systems[1]
    lines = [
        f"| phase | figure | {_system_name(first)} | {_system_name(second)} | ratio "
        "| each repetition (first; second) |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for phase in PHASES:
        for figure, label in FIGURES[phase]:
            a, b = run.value(first, phase, figure), run.value(second, phase, figure)
            if a is None and b is None:
                continue
            each = f"{run.each(first, phase, figure)}; {run.each(second, phase, figure)}"
            lines.append(
                f"| {phase} | {label} | {_number(a)} | {_number(b)} | {ratio_text(a, b)} "
                f"| {each if each != '–; –' else ''} |"
            )
    return lines


def history_rows(all_runs: Sequence[Run]) -> list[str]:
    """One line per run: when, which commit, the load, and each phase's throughput ratio and
    the first system's CPU per message."""
    lines = [
        "| time | commit | label | systems | load before → after | send | batch | pull | "
        "CPU µs/msg send / batch / pull (first) |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for run in all_runs:
        if len(run.systems) < 2:
            continue
        first, second = run.systems[0], run.systems[1]
        ratios = [
            ratio_text(run.value(first, p, "msgs_per_s"), run.value(second, p, "msgs_per_s"))
            for p in PHASES
        ]
        cpu = " / ".join(_number(run.value(first, p, "cpu_us_per_msg")) for p in PHASES)
        load = f"{run.meta.get('load_before', '?')} → {run.meta.get('load_after', '?')}"
        names = " vs ".join(_system_name(s) for s in (first, second))
        lines.append(
            f"| {run.time} | {str(run.meta.get('commit', '?'))[:10]} | "
            f"{run.meta.get('label') or '–'} | {names} | {load} | {' | '.join(ratios)} | {cpu} |"
        )
    return lines


def _describe(run: Run) -> list[str]:
    meta = run.meta
    versions = meta.get("versions", {})
    version_lines = [f"  - {_system_name(s)}: {versions.get(s, '?')}" for s in run.systems]
    return [
        f"- Run {run.time} (commit `{str(meta.get('commit', '?'))[:10]}`, label "
        f"`{meta.get('label') or '–'}`): {meta.get('messages', '?')} messages per phase, "
        f"{meta.get('threads', '?')} sending threads, {meta.get('repetitions', '?')} repetitions "
        f"(systems alternated), medians; load average (1 min) {meta.get('load_before', '?')} "
        f"before, {meta.get('load_after', '?')} after, on {meta.get('cpus', '?')} CPUs.",
        *version_lines,
    ]


def markdown(all_runs: Sequence[Run], intro: str, notes: str = "") -> str:
    """``REMOTING.md``: ``intro``, the latest run of each pair of systems, ``notes`` (written by
    hand: profiles, changes and their paired figures), then the history."""
    lines = [intro.rstrip(), ""]
    latest: dict[tuple[str, ...], Run] = {}
    for run in all_runs:
        if len(run.systems) >= 2:
            latest[run.systems[:2]] = run
    for systems, run in sorted(latest.items(), key=lambda item: item[1].time, reverse=True):
        title = " vs ".join(_system_name(s) for s in systems)
        lines += [f"## {title}: latest run", "", *_describe(run), "", *run_table(run), ""]
    if notes.strip():
        lines += [notes.strip(), ""]
    lines += ["## Every recorded run", "", *history_rows(all_runs), ""]
    return "\n".join(lines)
