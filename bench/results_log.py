"""The benchmarks' result logs: one JSON object per line in ``bench/results/<name>.jsonl``,
appended, never rewritten, so every run ever recorded stays comparable.

:func:`append` writes whole records at the end of a run (most ``bench/*.py`` scripts);
:func:`appending` opens the log for a run that writes as it goes (``bench/broker.py`` flushes
after each scenario so that an interrupted run keeps what it measured).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TextIO

RESULTS = Path(__file__).parent / "results"


def log_path(name: str) -> Path:
    """``bench/results/<name>.jsonl``."""
    return RESULTS / f"{name}.jsonl"


@contextmanager
def appending(name: str) -> Iterator[TextIO]:
    """The open log ``name`` (created with its folder if missing), for JSON lines."""
    RESULTS.mkdir(exist_ok=True)
    with log_path(name).open("a") as out:
        yield out


def append(name: str, *records: Mapping[str, Any]) -> Path:
    """Append each record as one JSON line to log ``name``; returns the log's path."""
    with appending(name) as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    return log_path(name)


def figure_rows(
    results: Mapping[str, Mapping[str, float]],
    earlier: Mapping[str, Mapping[str, float]] | None,
    before: str,
    label: str,
) -> list[str]:
    """Markdown table lines of ``scenario -> figure -> value``; with ``earlier`` (the run
    labelled ``before``) side by side with it and the ratio (this run / that one)."""
    if earlier:
        lines = [
            f"| scenario | figure | {before} | {label or 'this run'} | ratio |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
    else:
        lines = ["| scenario | figure | value |", "| --- | --- | ---: |"]
    for name, figures in results.items():
        for key, value in figures.items():
            if not earlier:
                lines.append(f"| {name} | {key} | {value:,.2f} |")
                continue
            old = earlier.get(name, {}).get(key)
            shown = "–" if old is None else f"{old:,.2f}"
            ratio = f"{value / old:.2f}×" if old else "–"
            lines.append(f"| {name} | {key} | {shown} | {value:,.2f} | {ratio} |")
    return lines


def recorded_run(name: str, label: str) -> tuple[dict[str, dict[str, float]], str]:
    """The figures (scenario -> figure -> value) of the latest run recorded in log ``name``
    with ``label``, and that run's 1-minute load average; exits naming the log when none is."""
    runs: dict[str, dict[str, dict[str, float]]] = {}
    load = "?"
    for line in log_path(name).read_text().splitlines():
        row = json.loads(line)
        if row.get("label") == label:
            figures = {k: v for k, v in row.items() if isinstance(v, int | float)}
            runs.setdefault(row["time"], {})[row["scenario"]] = figures
            load = str(row.get("load1", "?"))
    if not runs:
        raise SystemExit(f"no run labelled {label!r} in {log_path(name)}")
    return runs[max(runs)], load


class Recorded(NamedTuple):
    """What :func:`record` wrote and found: the run's ``meta`` fields, and the figures and load
    of the run labelled ``before`` (empty and ``"?"`` without one)."""

    meta: dict[str, Any]
    earlier: dict[str, dict[str, float]]
    earlier_load: str


def record(
    name: str,
    results: Mapping[str, Mapping[str, float]],
    *,
    label: str,
    load: str,
    before: str | None,
    extra: Mapping[str, Any] | None = None,
) -> Recorded:
    """Append one line per scenario of ``results`` to log ``name`` with the run's time, Python,
    machine, CPUs, ``label`` and 1-minute ``load`` (and the fields of ``extra``: commit,
    versions, ...); with ``before``, first look up that run."""
    meta: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "label": label,
        "load1": load,
        **(extra or {}),
    }
    earlier, earlier_load = recorded_run(name, before) if before else ({}, "?")
    append(
        name, *({"scenario": scenario, **figures, **meta} for scenario, figures in results.items())
    )
    return Recorded(meta, earlier, earlier_load)
