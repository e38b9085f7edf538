"""The ``pipeline`` click group: ``export``, ``rebuild`` and ``verify`` as commands.

The integrator registers :data:`pipeline` under the ``gannet`` command (``gannet pipeline
...``); ``python -m gannet.node.cli.pipeline`` and ``spark-submit .../cli/pipeline.py`` run the
same group (this module is the jobs' script).
PySpark is imported only when a command runs (:mod:`gannet.pipeline.jobs` needs it), so the
``gannet`` command works without the ``pipeline`` extra installed.

Exit codes follow ``gannet``'s: 0 success; 1 damage found (``verify``), a rebuild stopped at
damage, or a bad target; 2 wrong usage (click); 3 SOURCE is neither a store directory nor a
folder of commit-log segments (checked before Spark starts, the same answer as ``gannet store
verify``), or the store is open in a broker (``rebuild --in-place``). While a job runs a
progress bar counts finished Spark tasks (one per segment); a summary table follows.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gannet.node.cli import output, tier_options
from gannet.node.cli.exits import EXIT_CHECK_FAILED, EXIT_STORE_UNAVAILABLE
from gannet.node.store.tier import errors
from gannet.pipeline import segments, sources
from gannet.pipeline.reports import RebuildReport

console = output.console
err_console = output.err_console

PROGRESS_POLL_INTERVAL_S = 0.25

master_option = click.option(
    "--master",
    default=None,
    metavar="URL",
    help="Spark master, e.g. spark://host:7077 [default: local[*], or spark-submit's --master]",
)
source_argument = click.argument(
    "source", type=click.Path(path_type=Path, exists=True, file_okay=False), metavar="SOURCE"
)
_tier_options = tier_options.tier_options


def _open_tiered(values: dict[str, Any], store: Path | None) -> sources.TieredSource | None:
    """The tiered source the ``--tier-*`` options name (with the local store SOURCE, if
    given), None without them; bucket errors exit 4/5, a hole between tier and store 1."""
    try:
        tier = tier_options.open_tier(values)  # without --tier-manifest: the bucket's copy
    except errors.TierError as exc:
        tier_options.tier_exit(exc)
    if tier is None:
        return None
    try:
        prefix = sources.TierBucket(tier.config, tier.manifest.prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-prefix") from None
    source = sources.TieredSource(prefix, tier.manifest, store)
    try:
        source.parts()
    except sources.SourceError as exc:
        raise click.ClickException(str(exc)) from None
    return source


class TimestampParam(click.ParamType[int]):
    """An ISO 8601 time (``2026-11-22T05:00:00Z``; naive means UTC) or epoch milliseconds."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{text!r} is neither ISO 8601 nor epoch milliseconds", param, ctx)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return int(moment.timestamp() * 1000)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def pipeline() -> None:
    """Spark jobs over commit-log segments: export, rebuild, verify.

    SOURCE is a store directory (its commitlog/ is used) or a folder of segment copies. With
    the --tier-* options, export, verify and rebuild read a broker group's offloaded files from the
    bucket (executors fetch them by ranged GETs, no broker involved), followed by SOURCE's
    files after the tier's end when SOURCE is given.
    """
    output.fit_to_stdout()


def _require_source(source: Path, group: str | None = None) -> None:
    """Exit 3 (as ``gannet store verify`` does) unless SOURCE is a store directory or holds
    commit-log segments: one check before a JVM starts."""
    if (source / "commitlog").is_dir() or segments.find_segments(source):
        return
    err_console.print(
        (f"group {group}: " if group else "")
        + f"{source} is not a store directory (no commitlog/ inside) nor a folder of commit-log "
        "segments",
        highlight=False,
    )
    sys.exit(EXIT_STORE_UNAVAILABLE)


class GroupDirParam(click.ParamType[tuple[str, Path]]):
    """``NAME=DIR``: a broker group's name and its data directory (``broker-0=/data/b0``)."""

    name = "NAME=DIR"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, Path]:
        if isinstance(value, tuple):
            return value
        name, sep, folder = str(value).partition("=")
        name = name.strip()
        if not sep or not name or not folder:
            self.fail(f"{value!r} is not NAME=DIR (e.g. broker-0=/data/broker-0/node1)", param, ctx)
        path = Path(folder).expanduser()
        if not path.is_dir():
            self.fail(f"group {name}: {folder} is not a directory", param, ctx)
        return name, path


def _export_sources(
    paths: tuple[str, ...], groups: tuple[tuple[str, Path], ...], tier_values: dict[str, Any]
) -> tuple[Path | list[tuple[str, Path]] | sources.TieredSource, str]:
    """SOURCE and OUTPUT, or the groups' (name, dir) pairs and OUTPUT, or the tier (and
    SOURCE) and OUTPUT; usage errors exit 2."""
    if any(tier_values.get(name) is not None for name in (*tier_options.NAMES, "tier_manifest")):
        if groups:
            raise click.UsageError("--group and the --tier-* options do not go together")
        if len(paths) not in (1, 2):
            raise click.UsageError("with --tier-* give [SOURCE] OUTPUT")
        store = Path(paths[0]) if len(paths) == 2 else None
        if store is not None and not store.is_dir():
            raise click.BadParameter(f"{store} is not a directory", param_hint="SOURCE")
        tiered = _open_tiered(tier_values, store)  # usage errors of --tier-* first
        assert tiered is not None
        if store is not None:
            _require_source(store)
        return tiered, paths[-1]
    if not groups:
        if len(paths) != 2:
            raise click.UsageError(
                "give SOURCE and OUTPUT, or --group NAME=DIR (repeat) and OUTPUT"
            )
        source = Path(paths[0])
        if not source.is_dir():
            raise click.BadParameter(f"{source} is not a directory", param_hint="SOURCE")
        _require_source(source)
        return source, paths[1]
    if len(paths) != 1:
        raise click.UsageError(
            "with --group give only OUTPUT (the groups' directories come from --group), "
            f"not {len(paths)} paths"
        )
    seen: dict[str, Path] = {}
    for name, folder in groups:
        if name in seen:
            raise click.BadParameter(
                f"group {name} is given twice ({seen[name]} and {folder}); give each group once",
                param_hint="--group",
            )
        seen[name] = folder
    for name, folder in groups:
        _require_source(folder, group=name)
    return list(groups), paths[0]


@pipeline.command("export")
@click.argument("paths", nargs=-1, metavar="[SOURCE] OUTPUT")
@click.option(
    "--group",
    "groups",
    type=GroupDirParam(),
    multiple=True,
    help="A broker group's name and store directory, instead of SOURCE (repeat, one per "
    "group): each group's files go to OUTPUT/topic=.../date=.../broker=<NAME>/.",
)
@click.option("--topic", "topics", multiple=True, help="Topic to export (repeat); default all.")
@click.option("--since", type=TimestampParam(), help="Store time from (inclusive).")
@click.option("--until", type=TimestampParam(), help="Store time to (exclusive).")
@click.option(
    "--mode",
    type=click.Choice(["errorifexists", "overwrite", "append", "ignore"]),
    default="errorifexists",
    show_default=True,
    help="What to do when OUTPUT exists.",
)
@_tier_options
@master_option
def export_command(
    paths: tuple[str, ...],
    groups: tuple[tuple[str, Path], ...],
    topics: tuple[str, ...],
    since: int | None,
    until: int | None,
    mode: str,
    master: str | None,
    **tier_values: Any,
) -> None:
    """Write messages to Parquet at OUTPUT, partitioned by topic and date (UTC).

    Either one store (SOURCE OUTPUT), or several broker groups' stores in one job
    (--group broker-0=DIR --group broker-1=DIR OUTPUT), each group's files under
    OUTPUT/topic=.../date=.../broker=<NAME>/ (broker is then a column), or a broker group's
    tier (--tier-* [SOURCE] OUTPUT): its offloaded files read from the bucket, then SOURCE's
    files after the tier's end.
    """
    source, output = _export_sources(paths, groups, tier_values)
    from gannet.pipeline import jobs  # noqa: PLC0415 - PySpark only when a job runs

    keep = jobs.ExportFilter(frozenset(topics) if topics else None, since, until)
    spark = jobs.session(master)
    with _segment_errors(), _spark_progress(spark, "exporting", _part_count(source)):
        report = jobs.export(spark, source, output, keep, mode=mode)
    table = _summary("export")
    if isinstance(source, sources.TieredSource):
        table.add_row(
            "tier", f"{len(source.manifest.objects):,} objects under {source.tier.prefix}"
        )
    elif not isinstance(source, Path):
        table.add_row("groups", ", ".join(name for name, _ in source))
    table.add_row("segments", f"{report.segments:,}")
    table.add_row("messages", f"{report.messages:,}")
    table.add_row("files", f"{report.files:,}")
    table.add_row("commit log", _mb_per_s(report.commitlog_bytes, report.elapsed_s))
    table.add_row("output", output)
    console.print(table)


@pipeline.command("rebuild")
@source_argument
@click.argument("target", type=click.Path(path_type=Path, file_okay=False), required=False)
@click.option("--in-place", is_flag=True, help="Replace SOURCE's own files (no broker may run).")
@click.option("--cq-units-per-file", type=int, default=300_000, show_default=True)
@click.option("--index-hash-slots", type=int, default=5_000_000, show_default=True)
@click.option("--index-items-max", type=int, default=20_000_000, show_default=True)
@click.option("--no-index", is_flag=True, help="Rebuild consume queues only.")
@_tier_options
@master_option
def rebuild_command(
    source: Path,
    target: Path | None,
    in_place: bool,
    cq_units_per_file: int,
    index_hash_slots: int,
    index_items_max: int,
    no_index: bool,
    master: str | None,
    **tier_values: Any,
) -> None:
    """Rebuild consume queues and index files from the commit log into TARGET.

    The file sizes must be the broker's (its consume-queue and index settings) for the files
    to match what the broker writes. With the --tier-* options the commit log is the tier's
    objects (read from the bucket) and then SOURCE's files after the tier's end.
    """
    tiered = _open_tiered(tier_values, source)  # usage errors of --tier-* first
    _require_source(source)
    from gannet.pipeline import jobs  # noqa: PLC0415 - PySpark only when a job runs

    if in_place == (target is not None):
        raise click.UsageError("give either TARGET or --in-place")
    found = tiered.parts() if tiered is not None else segments.find_segments(source)
    config = jobs.store_config_for(
        source if in_place else target or source,
        commitlog_file_size_bytes=max((s.size_bytes for s in found), default=1),
        consume_queue_units_per_file=cq_units_per_file,
        index_hash_slots=index_hash_slots,
        index_items_max=index_items_max,
        index_enabled=not no_index,
    )
    spark = jobs.session(master)
    with _segment_errors(), _spark_progress(spark, "rebuilding", len(found)):
        try:
            if in_place:
                report = jobs.rebuild_in_place(spark, config, tiered)
            else:
                report = jobs.rebuild(spark, tiered or source, config)
        except jobs.StoreLockedError as exc:
            err_console.print(f"[red]{exc}[/]")
            sys.exit(EXIT_STORE_UNAVAILABLE)
    _print_rebuild(report, config.root_dir)
    if report.stopped_at is not None:
        if in_place:
            err_console.print("the store's own files were left unchanged")
        sys.exit(EXIT_CHECK_FAILED)


@pipeline.command("verify")
@click.argument(
    "source",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    metavar="[SOURCE]",
    required=False,
)
@_tier_options
@master_option
def verify_command(source: Path | None, master: str | None, **tier_values: Any) -> None:
    """Check every record's structure and CRCs; list damaged ranges and exit 1 on damage.

    With the --tier-* options the tier's objects are checked from the bucket (damage named by
    object key), then SOURCE's files after the tier's end when SOURCE is given.
    """
    tiered = _open_tiered(tier_values, source)  # usage errors of --tier-* first
    if source is not None:
        _require_source(source)
    target: Path | sources.TieredSource
    if tiered is not None:
        target = tiered
    elif source is not None:
        target = source
    else:
        raise click.UsageError("give SOURCE, the --tier-* options, or both")
    from gannet.pipeline import jobs  # noqa: PLC0415 - PySpark only when a job runs

    spark = jobs.session(master)
    with _segment_errors(), _spark_progress(spark, "verifying", _part_count(target)):
        report = jobs.verify(spark, target)
    console.print(
        f"{report.records_ok:,} valid records in {len(report.segments):,} segments; "
        + _mb_per_s(report.commitlog_bytes, report.elapsed_s)
    )
    if report.clean:
        console.print("[green]commit log is clean[/]")
        return
    table = Table(title="damage")
    for column in ("segment", "from", "to", "bytes", "reason"):
        table.add_column(column)
    for d in report.damage:
        table.add_row(
            d.segment, str(d.start_offset), str(d.end_offset),
            f"{d.end_offset - d.start_offset:,}", d.reason,
        )  # fmt: skip
    console.print(table)
    console.print("[red]damage found[/]")
    sys.exit(EXIT_CHECK_FAILED)


def _print_rebuild(report: RebuildReport, target: Path) -> None:
    table = _summary("rebuild")
    table.add_row("segments", f"{report.segments:,}")
    table.add_row("records dispatched", f"{report.records:,}")
    table.add_row("consume queues", f"{report.consume_queues:,}")
    table.add_row("index files", f"{report.index_files:,}")
    table.add_row("dispatched up to", f"{report.dispatched_end_offset:,}")
    table.add_row("commit log", _mb_per_s(report.commitlog_bytes, report.elapsed_s))
    table.add_row("target", str(target))
    console.print(table)
    stop = report.stopped_at
    if stop is not None:
        err_console.print(
            f"[red]stopped at {stop.start_offset:,} ({stop.segment}): {stop.reason}[/]; "
            "later records were not dispatched"
        )


def _summary(title: str) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    return table


def _mb_per_s(size_bytes: int, elapsed_s: float) -> str:
    mb = size_bytes / 1e6
    return f"{mb:,.1f} MB in {elapsed_s:.1f} s ({mb / max(elapsed_s, 1e-9):,.1f} MB/s)"


@contextmanager
def _segment_errors() -> Iterator[None]:
    """Missing segments or a non-empty target: a one-line error and exit 1, no traceback. A
    task that failed on damage or on the tier's bucket (an executor's exception): its last line
    (the exception and its message, e.g. the object key and byte range), exit 1."""
    from pyspark.errors import PythonException  # noqa: PLC0415 - PySpark only when a job runs

    try:
        yield
    except (FileNotFoundError, FileExistsError, sources.SourceError) as exc:
        raise click.ClickException(str(exc)) from exc
    except PythonException as exc:
        line = _task_error_line(str(exc))
        if line is None:
            raise
        raise click.ClickException(f"a Spark task failed: {line}") from exc


TASK_ERRORS = (
    "SegmentDamagedError",
    "TierUnavailable",
    "TierCredentialsRejected",
    "TierRequestRejected",
)


def _task_error_line(text: str) -> str | None:
    """The line of an executor's traceback naming one of :data:`TASK_ERRORS`, if any."""
    for line in reversed(text.splitlines()):
        name = line.split(":", 1)[0].rsplit(".", 1)[-1].strip()
        if name in TASK_ERRORS:
            return line.strip()
    return None


def _part_count(source: Path | list[tuple[str, Path]] | sources.TieredSource) -> int:
    """Segments (and tier objects) of a job's source: the progress bar's total."""
    if isinstance(source, sources.TieredSource):
        return len(source.parts())
    folders = [source] if isinstance(source, Path) else [folder for _, folder in source]
    total = 0
    for folder in folders:
        with suppress(FileNotFoundError):
            total += len(segments.find_segments(folder))
    return total


@contextmanager
def _spark_progress(spark: Any, label: str, total: int) -> Iterator[None]:
    """A progress bar of finished Spark tasks (one task per segment), polled from a thread."""
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    stop = threading.Event()
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        tracker = spark.sparkContext.statusTracker()
        done_by_stage: dict[int, int] = {}

        def poll() -> None:
            while not stop.wait(PROGRESS_POLL_INTERVAL_S):
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        done_by_stage[stage_id] = info.numCompletedTasks
                bar.update(task, completed=min(total, sum(done_by_stage.values())))

        thread = threading.Thread(target=poll, name="gannet-spark-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def main() -> None:
    """``python -m gannet.node.cli.pipeline``, ``spark-submit .../pipeline.py``: the group."""
    pipeline(prog_name="gannet pipeline")


if __name__ == "__main__":
    main()
