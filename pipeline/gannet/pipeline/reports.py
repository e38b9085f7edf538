"""What the bulk jobs report: plain frozen records, without PySpark.

:mod:`gannet.pipeline.jobs` returns them; the ``gannet pipeline`` commands
(:mod:`gannet.node.cli.pipeline`) print them. Kept apart from ``jobs`` so that the CLI can name
them at import time while PySpark loads only when a job runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from gannet.pipeline.segments import Damage


@dataclass(frozen=True, slots=True)
class ExportReport:
    segments: int
    commitlog_bytes: int
    messages: int
    files: int
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class SegmentReport:
    """What :func:`verify` found in one segment."""

    segment: str
    start_offset: int
    size_bytes: int
    records_ok: int
    data_end_offset: int
    damage: tuple[Damage, ...]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    segments: tuple[SegmentReport, ...]
    damage: tuple[Damage, ...]
    elapsed_s: float

    @property
    def clean(self) -> bool:
        return not self.damage

    @property
    def records_ok(self) -> int:
        return sum(s.records_ok for s in self.segments)

    @property
    def commitlog_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


@dataclass(frozen=True, slots=True)
class RebuildReport:
    segments: int
    commitlog_bytes: int
    records: int
    consume_queues: int
    index_files: int
    dispatched_end_offset: int
    stopped_at: Damage | None
    elapsed_s: float
