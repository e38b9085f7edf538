"""The benchmarks' result logs: one JSON object per line in ``bench/results/<name>.jsonl``,
appended, never rewritten, so every run ever recorded stays comparable.

:func:`append` writes whole records at the end of a run (most ``bench/*.py`` scripts);
:func:`appending` opens the log for a run that writes as it goes (``bench/broker.py`` flushes
after each scenario so that an interrupted run keeps what it measured).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

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
