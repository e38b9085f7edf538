"""Batch reads of the ``gannet`` data source without a broker: a topic's messages straight from
a broker group's tier (its bucket) and/or its store directory.

With the ``tier*`` options (:func:`gannet.pipeline.options.tier_read_options`) the driver reads
the manifest (the ``tierManifest`` file, else the bucket's ``<prefix>/manifest.json``:
:func:`gannet.pipeline.sources.load_manifest`) and plans one Spark partition per part of the
contiguous series of :func:`gannet.pipeline.sources.series` — each tier object, then each file of
``storeDir`` after the tier's end; with ``storeDir`` alone, one per local file. A task reads its
object by ranged GETs from the Python worker (:mod:`gannet.pipeline.objects`, one window of the
object in memory at a time) or maps its local file, parses the records in bulk
(:mod:`gannet.pipeline.columns`) and yields one Arrow record batch per parsed chunk, in the
schema of broker reads (:data:`gannet.pipeline.rows.READ_SCHEMA`, built by
:func:`gannet.pipeline.rows.records_batch` as for Admin PullRecords replies), keeping the records
a consumer of the topic would see: the topic's records (a consume queue's dispatch rule:
transactional prepared and rolled-back records are left out), of the ``queues`` asked for, stored
in ``[startingTimestamp, endingTimestamp)``. Rows come in commit-log order; ``broker`` is the
``broker`` option.

Differences from a broker read, on purpose: no tag ``filter`` and no queue offsets as bounds (both
need the broker's consume queues, which stay local to the broker); what a store directory's
newest file holds is read as it is on disk, not only up to the Raft commit offset (read a
stopped broker's store, or a copy). Damage fails the task with
:class:`gannet.pipeline.exporting.SegmentDamagedError` naming the object key (or file) and the
byte range, as an export does.

Used by :mod:`gannet.pipeline.datasource`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from gannet.node.store.log import records
from gannet.node.store.tier import errors, manifests
from gannet.pipeline import columns, exporting, objects, rows, segments, sources
from gannet.pipeline.columns import Chunk
from gannet.pipeline.options import OptionError, TierReadOptions
from gannet.pipeline.segments import Damage, Segment
from gannet.pipeline.sources import Part, TierSegment


@dataclass(frozen=True)
class PartPartition(InputPartition):
    """One Spark partition: one tier object or one local commit-log file."""

    part: Part


def plan(opts: TierReadOptions) -> list[Part]:
    """The parts a read covers (driver side); :class:`OptionError` naming a bad source."""
    try:
        if opts.tier is None:
            assert opts.store is not None
            found: list[Part] = list(segments.find_segments(opts.store))
        else:
            manifest = _manifest(opts)
            found = sources.TieredSource(opts.tier, manifest, opts.store).parts()
    except (sources.SourceError, FileNotFoundError) as exc:
        raise OptionError(str(exc)) from None
    except errors.TierError as exc:
        raise OptionError(f"tier bucket: {exc}") from None
    return found


def _manifest(opts: TierReadOptions) -> manifests.Manifest:
    assert opts.tier is not None
    source: sources.ManifestSource = (
        sources.ManifestFile(opts.manifest)
        if opts.manifest is not None
        else sources.ManifestInBucket(opts.tier)
    )
    return sources.load_manifest(source)


def keep_mask(opts: TierReadOptions, chunk: Chunk) -> npt.NDArray[np.bool_]:
    """Which records of ``chunk`` the read returns (module docstring)."""
    kind = chunk.sys_flags & 0xC  # records.transaction_type, column-wise
    keep: npt.NDArray[np.bool_] = (kind == records.SYSFLAG_TRANSACTION_NOT_TYPE) | (
        kind == records.SYSFLAG_TRANSACTION_COMMIT_TYPE
    )
    topic = pa.array([opts.topic], pa.string())
    keep &= pc.is_in(chunk.topic_column, value_set=topic).to_numpy(zero_copy_only=False)
    if opts.queues is not None:
        keep &= np.isin(chunk.queue_ids, np.array(opts.queues, dtype=np.int64))
    if opts.since_ms is not None:
        keep &= chunk.store_timestamps_ms >= opts.since_ms
    if opts.until_ms is not None:
        keep &= chunk.store_timestamps_ms < opts.until_ms
    return keep


def _local_chunks(segment: Segment) -> Iterator[tuple[bytes, Chunk | Damage]]:
    with segments.mapped(segment) as buf:
        for found in columns.chunks(buf, segment):
            yield buf, found  # type: ignore[misc]  # (a mapping is read like bytes)


def read_part(opts: TierReadOptions, part: Part) -> Iterator[pa.RecordBatch]:
    """Executor side: the kept rows of one part, one record batch per parsed chunk."""
    found: Iterable[tuple[bytes, Chunk | Damage]]
    if isinstance(part, TierSegment):
        found = objects.chunks(objects.open_bucket(part.tier), part)
    else:
        found = _local_chunks(part)
    for buf, chunk in found:
        if isinstance(chunk, Damage):
            raise exporting.SegmentDamagedError(chunk)
        keep = keep_mask(opts, chunk)
        if not keep.any():
            continue
        batch = rows.records_batch(buf, chunk, opts.broker)
        yield batch if keep.all() else batch.filter(pa.array(keep))


class TierBatchReader(DataSourceReader):
    """``spark.read.format("gannet")`` with the ``tier*`` / ``storeDir`` options."""

    def __init__(self, opts: TierReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return [PartPartition(part) for part in plan(self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PartPartition)
        return read_part(self.opts, partition.part)
