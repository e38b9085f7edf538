"""The history of one run: every operation and every fault, with times, as Jepsen keeps it.

An operation is an ``invoke`` followed by its completion: ``ok`` (it happened), ``fail`` (it
certainly did not) or ``info`` (unknown: a timeout, a lost answer). Faults are ``nemesis``
events (``start``/``stop``). Times are seconds since the run's start (:func:`time.monotonic`).
The monitor's samples of every member's Raft status are kept apart (:class:`Sample`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DECIMALS = 4
"""Event times are seconds since the run's start rounded to this many decimals."""


@dataclass(frozen=True)
class Event:
    t: float
    process: str
    type: str  # invoke, ok, fail, info; start, stop for the nemesis
    f: str  # send, receive, ack, change, fault
    value: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sample:
    t: float
    node: int
    role: str
    term: int
    leader: int
    commit: int


class History:
    """Thread-safe, append-only."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.events: list[Event] = []
        self.samples: list[Sample] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.origin

    def add(self, process: str, type_: str, f: str, **value: Any) -> Event:
        event = Event(round(self.now(), DECIMALS), process, type_, f, value)
        with self._lock:
            self.events.append(event)
        return event

    def add_at(self, monotonic_s: float, process: str, type_: str, f: str,
               value: dict[str, Any]) -> Event:  # fmt: skip
        """An event that another process timed (``monotonic_s``: its CLOCK_MONOTONIC reading)."""
        event = Event(round(monotonic_s - self.origin, DECIMALS), process, type_, f, value)
        with self._lock:
            self.events.append(event)
        return event

    def sample(self, sample: Sample) -> None:
        with self._lock:
            self.samples.append(sample)

    def snapshot(self) -> tuple[list[Event], list[Sample]]:
        """Events in time order (another process's events arrive a little after their time)."""
        with self._lock:
            return sorted(self.events, key=lambda e: e.t), list(self.samples)

    def write(self, directory: Path) -> None:
        events, samples = self.snapshot()
        with (directory / "history.jsonl").open("w") as out:
            for event in events:
                out.write(json.dumps(asdict(event)) + "\n")
        with (directory / "samples.jsonl").open("w") as out:
            for sample in samples:
                out.write(json.dumps(asdict(sample)) + "\n")


def load(directory: Path) -> tuple[list[Event], list[Sample]]:
    events = [Event(**json.loads(line)) for line in (directory / "history.jsonl").open()]
    samples = [Sample(**json.loads(line)) for line in (directory / "samples.jsonl").open()]
    return events, samples
