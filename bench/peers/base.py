"""What every peer module hands the runner: a started system (:class:`Running`) with its client
endpoint, the pids to meter, its version and the durability it was started with, plus a way to
create the scenario's topics and group. Used by :mod:`bench.loadgen.run`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.peers import processes


@dataclass(frozen=True)
class Layout:
    """The topics (each with ``queues`` queues) and the consumer group a scenario uses."""

    topics: tuple[str, ...]
    queues: int
    group: str


@dataclass
class Running:
    system: str  # gannet | gannet-r3 | rocketmq | nats | nats-r3 | redis | kafka
    version: str
    endpoint: str  # what the drivers connect to
    children: list[processes.Child]
    durability: str  # e.g. "async flush, R1"
    settings: dict[str, object] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def stop(self) -> None:
        for cleanup in self.cleanups:
            with contextlib.suppress(Exception):
                cleanup()
        for child in self.children:
            processes.stop(child)


def durability_text(flush: str, replicas: int) -> str:
    return f"{flush} flush, R{replicas}"
