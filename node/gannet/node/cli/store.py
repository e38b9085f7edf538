"""``gannet store inspect|verify|get|query``: a store directory read without a broker.

``inspect`` lists files, offsets, topics and queues (a running broker may hold the store: the
figures are then a live snapshot, :func:`held_by` says by whom); ``verify`` checks every
record's CRC and every consume-queue entry (exit 1 on damage); ``get`` and ``query`` open the
store read-only with the sizes its files show (:func:`_offline_config`) and find messages by
offset, message id, key or store time. With the ``--tier-*`` options
(:mod:`gannet.node.cli.tier_options`) they understand a tiered store: ``inspect`` lists the
offloaded files beside the local ones, ``verify`` checks each offloaded object against the
manifest (size and MD5 by HEAD; ``--deep``: read back, MD5 of the bytes and every record
walked), ``get`` and ``query`` read offloaded records through the tier. Exit codes: 1 nothing
found or damage, 3 the store cannot be opened, 4 the tier bucket unreachable, 5 the bucket
refused the credentials or the request (:mod:`gannet.node.cli.exits`).

Registered on the ``gannet`` group by :mod:`gannet.node.cli.root`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from gannet.node.cli import options, output
from gannet.node.cli.exits import EXIT_CHECK_FAILED, EXIT_STORE_UNAVAILABLE
from gannet.node.cli.options import data_dir_argument
from gannet.node.cli.output import Column, emit, output_option
from gannet.node.cli.tier_options import Tier, open_tier, tier_exit, tier_options
from gannet.node.store import msgids
from gannet.node.store.config import StoreConfig
from gannet.node.store.errors import MessageIllegal, StoreError, StoreLocked
from gannet.node.store.log.records import Message
from gannet.node.store.queues.consume_queues import Boundary
from gannet.node.store.tier import auditing, manifests, naming, routing
from gannet.node.store.tier.errors import TierError
from gannet.node.store.upkeep import verifying

if TYPE_CHECKING:
    from gannet.node.store.message_store import MessageStore

console = output.console
err_console = output.err_console


@click.group()
def store() -> None:
    """Inspect, verify and query a store directory."""


@store.command("inspect")
@data_dir_argument
@tier_options
@output_option
def store_inspect(data_dir: Path, **tier_values: Any) -> None:
    """Files, offsets, topics and queues of a store directory (read-only; a running broker may
    hold it: the figures are then a live snapshot); with --tier-* also the offloaded files."""
    tier = open_tier(tier_values)  # usage errors first
    _require_store(data_dir)
    holder = held_by(data_dir)
    ins = verifying.inspect(data_dir)
    files = [{"name": name, "size": size} for name, size in ins.commitlog_files]
    queues = [
        {
            "topic": q.topic,
            "queue": q.queue_id,
            "files": q.files,
            "min_offset": q.min_offset,
            "max_offset": q.max_offset,
        }
        for q in ins.queues
    ]
    if holder is not None:
        state = f"held by {holder} (open now; figures are a live snapshot)"
    else:
        state = "last shutdown: " + ("clean" if ins.clean_shutdown else "ABNORMAL (abort file)")
    document = {
        "commitlog_files": files,
        "written_end": ins.commitlog_end,
        "held_by_broker": holder is not None,
        "clean_shutdown": None if holder is not None else ins.clean_shutdown,
        "queues": queues,
        "index_files": len(ins.index_files),
        "checkpoint": dict(ins.checkpoint),
    }
    queue_columns = (
        Column("topic", "topic"),
        Column("queue", "queue", numeric=True),
        Column("files", "files", numeric=True),
        Column("min_offset", "min offset", numeric=True),
        Column("max_offset", "max offset", numeric=True),
    )
    file_columns = (
        Column("name", "file"),
        Column("size", "size", numeric=True, show="{:,}".format),
    )
    tier_lines: list[Any] = []
    if tier is not None:
        local_start = int(ins.commitlog_files[0][0]) if ins.commitlog_files else ins.commitlog_end
        document["tier"], tier_lines = _tier_listing(tier, local_start)
    emit(
        document,
        output.table("commit log", file_columns, files),
        *tier_lines,
        f"written end: {ins.commitlog_end:,}",
        state,
        output.table("consume queues", queue_columns, queues),
        f"index files: {len(ins.index_files)}",
        *(f"checkpoint {name}: {value}" for name, value in ins.checkpoint.items()),
    )


TIER_FILE_COLUMNS = (
    Column("name", "file"),
    Column("size", "size", numeric=True, show="{:,}".format),
    Column("md5", "md5"),
    Column("uploaded_at_ms", "uploaded", show=output.time_text),
    Column("local", "also local"),
)


ORPHANS_NOTE = (
    "objects the manifest does not record (the broker's sweep deletes those below the tier's"
    " end at its next sweep, others once older than --tier-orphan-grace-s, except the one at"
    " the tier's end, which the next upload adopts)"
)


def _tier_listing(tier: Tier, local_start: int) -> tuple[dict[str, Any], list[Any]]:
    """The offloaded files of ``tier`` as a document and as table lines (one LIST for the
    objects the manifest does not record)."""
    manifest = tier.manifest
    rows = [
        {
            "name": naming.commitlog_file_name(o.base_offset),
            "size": o.size_bytes,
            "md5": o.md5_hex,
            "uploaded_at_ms": o.uploaded_at_ms,
            "local": o.base_offset >= local_start,
        }
        for o in manifest.objects
    ]
    try:
        stray = auditing.orphans(tier.bucket, manifest)
    except TierError as exc:
        tier_exit(exc)
    readable_from = routing.readable_min_offset(local_start, manifest)
    gap = manifest.end_offset is not None and manifest.end_offset < local_start
    recorded_gaps = [_gap_row(g) for g in manifest.gaps]
    document = {
        "bucket": tier.config.bucket,
        "endpoint": tier.config.endpoint_url,
        "prefix": manifest.prefix,
        "start_offset": manifest.start_offset,
        "end_offset": manifest.end_offset,
        "readable_from": readable_from,
        "gap_before_local": gap,
        "recorded_gaps": recorded_gaps,
        "files": rows,
        "objects_not_in_manifest": stray,
    }
    lines: list[Any] = [
        output.table(
            f"tier: s3://{tier.config.bucket}/{manifest.prefix}/commitlog/", TIER_FILE_COLUMNS, rows
        ),
        f"tier holds [{manifest.start_offset}, {manifest.end_offset}); readable from "
        f"{readable_from:,}"
        + (" — [red]a gap: the tier ends before the first local file[/]" if gap else ""),
    ]
    if recorded_gaps:
        lines.append(_gaps_line(manifest))
    if stray:
        lines.append(f"{ORPHANS_NOTE}: {stray}")
    return document, lines


def _gap_row(gap: manifests.Gap) -> dict[str, int]:
    return {"from": gap.from_offset, "to": gap.to_offset, "size": gap.size_bytes}


def _gaps_line(manifest: manifests.Manifest) -> str:
    """The recorded gaps as one line (information: the group agreed these offsets are gone)."""
    ranges = ", ".join(f"[{g.from_offset:,}, {g.to_offset:,})" for g in manifest.gaps)
    return (
        f"[yellow]recorded gaps[/] (deleted locally before offload; read as removed): {ranges},"
        f" {manifest.gap_bytes():,} bytes"
    )


def held_by(data_dir: Path) -> str | None:
    """``"a running broker (pid N)"`` while a process holds the store's lock, else None.

    Tries a shared ``flock`` on the lock file the broker holds exclusively (and lets go at
    once); the pid is the one the broker writes into its abort file.
    """
    try:
        fd = os.open(StoreConfig(root_dir=data_dir).lock_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        try:
            pid = (data_dir / "abort").read_text().strip()
        except OSError:
            pid = ""
        return "a running broker" + (f" (pid {pid})" if pid.isdigit() else "")
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@store.command("verify")
@data_dir_argument
@tier_options
@click.option(
    "--deep",
    is_flag=True,
    help="With --tier-*: read every offloaded object back, check its MD5 and walk its records.",
)
@output_option
def store_verify(data_dir: Path, deep: bool, **tier_values: Any) -> None:
    """Check every record's CRC, every consume-queue entry, and that every dispatched record has
    its entry; with --tier-* every offloaded object against the manifest; exit 1 on damage."""
    tier = open_tier(tier_values)  # usage errors first
    if deep and tier is None:
        raise click.UsageError("--deep checks offloaded objects: give the --tier-* options")
    _require_store(data_dir)
    total = verifying.total_bytes(data_dir)
    columns = (
        TextColumn("verifying"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("verify", total=total)
        report = verifying.verify(data_dir, progress=lambda n: bar.advance(task, n))
    damage = [
        {"where": d.where, "from": d.start, "to": d.end, "reason": d.reason} for d in report.damage
    ]
    tier_document: dict[str, Any] | None = None
    tier_lines: list[Any] = []
    if tier is not None:
        files = verifying.commitlog_files(data_dir)
        local_start = int(files[0].name) if files else report.commitlog_end
        tier_document, tier_lines, tier_damage = _verify_tier(tier, local_start, deep=deep)
        damage += tier_damage
    summary = (
        f"{report.records_ok:,} records and {report.cq_units_ok:,} consume-queue entries valid; "
        f"commit log ends at {report.commitlog_end:,}"
    )
    renderables: list[Any] = [summary, *tier_lines]
    if not damage:
        renderables.append("[green]store is clean[/]")
    else:
        damage_columns = (
            Column("where", "where"),
            Column("from", "from", numeric=True),
            Column("to", "to", numeric=True),
            Column("reason", "reason"),
        )
        renderables += [
            output.table("damage", damage_columns, damage),
            "[red]damage found[/]: a broker start cuts a torn tail after a crash (the end of "
            "the last file, past what was flushed) and refuses any other damage; "
            "--force-recover cuts at the last valid record and keeps the rest in quarantine/",
        ]
    emit(
        {
            "records_ok": report.records_ok,
            "consume_queue_entries_ok": report.cq_units_ok,
            "commitlog_end": report.commitlog_end,
            "records_without_entry": report.missing_units,
            "clean": not damage,
            "damage": damage,
            **({"tier": tier_document} if tier_document is not None else {}),
        },
        *renderables,
    )
    if damage:
        sys.exit(EXIT_CHECK_FAILED)


TIER_AUDIT_COLUMNS = (
    Column("name", "file"),
    Column("size", "size", numeric=True, show="{:,}".format),
    Column("records_ok", "records", numeric=True),
    Column("status", "status"),
)


def _verify_tier(
    tier: Tier, local_start: int, *, deep: bool
) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
    """Audit every offloaded object (progress bar over their bytes); the document, the lines
    and the damage rows."""
    manifest = tier.manifest
    last = manifest.objects[-1].base_offset if manifest.objects else -1

    def walk(data: bytes, base: int) -> tuple[int, str | None]:
        name = naming.commitlog_file_name(base)
        ok, _, found = verifying.walk_records(data, base, name, is_last=base == last)
        return ok, None if found is None else f"record at {found.start}: {found.reason}"

    columns = (TextColumn("verifying tier"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    audits: list[auditing.ObjectAudit] = []
    try:
        with Progress(*columns, console=err_console, transient=True) as bar:
            task = bar.add_task("tier", total=manifest.total_bytes())
            for obj in manifest.objects:
                audits.append(
                    auditing.audit_object(
                        tier.bucket,
                        manifest.prefix,
                        obj,
                        walk=walk if deep else None,
                        progress=lambda n: bar.advance(task, n),
                    )
                )
        stray = auditing.orphans(tier.bucket, manifest)
    except TierError as exc:
        tier_exit(exc)
    rows = [
        {
            "name": naming.commitlog_file_name(a.obj.base_offset),
            "size": a.obj.size_bytes,
            "records_ok": a.records_ok,
            "status": "ok" if a.ok else "; ".join(a.problems),
        }
        for a in audits
    ]
    damage = [
        {"where": f"tier {a.key}", "from": a.obj.base_offset, "to": a.obj.end_offset,
         "reason": "; ".join(a.problems)}
        for a in audits
        if not a.ok
    ]  # fmt: skip
    if manifest.end_offset is not None and manifest.end_offset < local_start:
        damage.append(
            {"where": "tier", "from": manifest.end_offset, "to": local_start,
             "reason": "offsets neither offloaded nor local (a gap before the first local file)"}
        )  # fmt: skip
    document = {
        "bucket": tier.config.bucket,
        "prefix": manifest.prefix,
        "deep": deep,
        "objects": rows,
        "recorded_gaps": [_gap_row(g) for g in manifest.gaps],
        "objects_not_in_manifest": stray,
    }
    lines: list[Any] = [output.table("tier objects", TIER_AUDIT_COLUMNS, rows)]
    if manifest.gaps:
        lines.append(_gaps_line(manifest))
    if stray:
        lines.append(f"{ORPHANS_NOTE}: {stray}")
    return document, lines, damage


@store.command("get")
@data_dir_argument
@click.option("--offset", type=click.IntRange(0), help="Commit-log offset of the record.")
@click.option(
    "--msg-id",
    callback=options.message_id_callback,
    help="Message id: the client's (34 hex digits, as every table shows; found through the "
    "index) or an offset message id (32 or 56 hex digits).",
)
@click.option("--topic", help="With --queue-offset; narrows a --msg-id lookup.")
@click.option("--queue", "queue_id", type=click.IntRange(0), default=0, show_default=True)
@click.option("--queue-offset", type=click.IntRange(0))
@tier_options
@output_option
def store_get(
    data_dir: Path,
    offset: int | None,
    msg_id: str | None,
    topic: str | None,
    queue_id: int,
    queue_offset: int | None,
    **tier_values: Any,
) -> None:
    """Print one message, by commit-log offset, message id or queue offset."""
    from gannet.node.store import querying  # noqa: PLC0415 - the engine loads only when used

    chosen = [offset is not None, msg_id is not None, queue_offset is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --offset, --msg-id, --topic/--queue-offset")
    if queue_offset is not None and topic is None:
        raise click.UsageError("--queue-offset needs --topic")
    tier = open_tier(tier_values)
    with _opened(_offline_config(data_dir), start_services=False, tier=tier) as st:
        if offset is not None:
            found = _read_at(st, offset)
            msgs = [found] if found is not None else []
        elif msg_id is not None:
            msgs = by_message_id(st, msg_id, topic)
        else:
            assert topic is not None
            assert queue_offset is not None
            found = querying.by_queue_offset(st, topic, queue_id, queue_offset)
            msgs = [found] if found is not None else []
    if not msgs:
        err_console.print("no message there")
        sys.exit(EXIT_CHECK_FAILED)
    _print_messages(msgs)


def _read_at(st: MessageStore, offset: int) -> Message | None:
    """The record at a commit-log offset; None when no valid record starts there."""
    try:
        return st.read_message(offset)
    except (StoreError, ValueError, IndexError):
        return None


def by_message_id(st: MessageStore, msg_id: str, topic: str | None) -> list[Message]:
    """Messages with this id: an offset message id decodes to a commit-log offset; otherwise
    (or when nothing valid is there) the id is looked up as the client's unique key in the
    index, in ``topic`` or in every topic of the store."""
    from gannet.node.store import querying  # noqa: PLC0415 - the engine loads only when used

    try:
        decoded = msgids.decode_offset_msg_id(msg_id)
    except MessageIllegal:
        decoded = None
    if decoded is not None:
        found = _read_at(st, decoded.commit_offset)
        if found is not None and topic in (None, found.topic):
            return [found]
    topics = [topic] if topic is not None else sorted(_topics_of(st))
    messages: list[Message] = []
    for name in topics:
        messages += querying.by_key(st, name, msg_id, unique=True).messages
    return messages


def _topics_of(st: MessageStore) -> set[str]:
    names = {q.topic for q in st.queues.queues()}
    names.update(t.topic_name for t in st.topic_configs.list())
    return names


@store.command("query")
@data_dir_argument
@click.option("--topic", required=True)
@click.option("--key", help="A KEYS token.")
@click.option(
    "--uniq-key",
    callback=options.message_id_callback,
    help="The client message id (UNIQ_KEY, as tables show); an offset message id works too.",
)
@click.option("--time", "time_text", help="Store time: epoch ms or ISO-8601; prints the offset.")
@click.option("--queue", "queue_id", type=click.IntRange(0), default=0, show_default=True)
@click.option("--upper", is_flag=True, help="With --time: last message at or before the time.")
@click.option("--max", "max_num", type=click.IntRange(1, 64), default=64, show_default=True)
@tier_options
@output_option
def store_query(
    data_dir: Path,
    topic: str,
    key: str | None,
    uniq_key: str | None,
    time_text: str | None,
    queue_id: int,
    upper: bool,
    max_num: int,
    **tier_values: Any,
) -> None:
    """Find messages by key or unique key, or the queue offset for a store time."""
    from gannet.node.store import querying  # noqa: PLC0415 - the engine loads only when used

    if sum(x is not None for x in (key, uniq_key, time_text)) != 1:
        raise click.UsageError("give exactly one of --key, --uniq-key, --time")
    ts = options.parse_time_ms(time_text, "--time") if time_text is not None else None
    tier = open_tier(tier_values)
    with _opened(_offline_config(data_dir), start_services=False, tier=tier) as st:
        if ts is not None:
            boundary = Boundary.UPPER if upper else Boundary.LOWER
            found = querying.offset_by_time(st, topic, queue_id, ts, boundary)
            emit(
                {
                    "topic": topic,
                    "queue": queue_id,
                    "time_ms": ts,
                    "boundary": boundary.name,
                    "offset": found,
                },
                f"{topic}/{queue_id} offset for {ts} ({boundary.name}): {found}",
            )
            return
        if key is not None:
            messages = querying.by_key(st, topic, key, max_num=max_num).messages
        else:
            assert uniq_key is not None
            messages = by_message_id(st, uniq_key, topic)
    if not messages:
        err_console.print("no message matches")
        sys.exit(EXIT_CHECK_FAILED)
    _print_messages(messages)


STORED_COLUMNS = (
    Column("topic", "topic"),
    Column("queue", "queue", numeric=True),
    Column("queue_offset", "queue offset", numeric=True),
    Column("commit_offset", "commit offset", numeric=True),
    Column("message_id", "message id"),
    Column("store_timestamp_ms", "stored", show=output.time_text),
    Column("keys", "keys"),
    Column("tag", "tag"),
    Column("body", "body"),
)


def _print_messages(msgs: list[Message]) -> None:
    rows = [
        {
            "topic": m.topic,
            "queue": m.queue_id,
            "queue_offset": m.queue_offset,
            "commit_offset": m.physical_offset,
            "message_id": m.uniq_key,
            "store_timestamp_ms": m.store_timestamp_ms,
            "keys": list(m.keys),
            "tag": m.tags,
            **output.body_fields(m.body, output.BODY_SHOWN_CHARS),
        }
        for m in msgs
    ]
    table_rows = [{**r, "body": output.body_text(r)} for r in rows]
    emit(rows, output.table(None, STORED_COLUMNS, table_rows))


def _require_store(data_dir: Path) -> None:
    if not (data_dir / "commitlog").is_dir():
        err_console.print(f"{data_dir} is not a store directory (no commitlog/ inside)")
        sys.exit(EXIT_STORE_UNAVAILABLE)


def _offline_config(data_dir: Path) -> StoreConfig:
    _require_store(data_dir)
    files = verifying.commitlog_files(data_dir)
    config = StoreConfig(root_dir=data_dir)
    if files:
        config = dataclasses.replace(config, commitlog_file_size_bytes=files[0].stat().st_size)
    for _, _, qdir in verifying.consume_queue_dirs(data_dir):
        cq_files = [p for p in qdir.iterdir() if p.is_file() and p.name.isdigit()]
        if cq_files:
            units = cq_files[0].stat().st_size // verifying.CQ_UNIT_SIZE
            config = dataclasses.replace(config, consume_queue_units_per_file=units)
            break
    index_dir = data_dir / "index"
    index_files = sorted(index_dir.iterdir()) if index_dir.is_dir() else []
    if index_files:  # sizes follow the default ratio: items = 4 × slots
        slots = (index_files[0].stat().st_size - 40) // 84
        config = dataclasses.replace(config, index_hash_slots=slots, index_items_max=4 * slots)
    wheel = data_dir / "timerwheel"
    if wheel.exists():  # 2 × slots of 32 bytes
        config = dataclasses.replace(config, timer_wheel_slots=wheel.stat().st_size // 64)
    return config


@contextmanager
def _opened(
    config: StoreConfig, *, start_services: bool, tier: Tier | None = None
) -> Iterator[MessageStore]:
    from gannet.node.store.message_store import MessageStore  # noqa: PLC0415 - only when used

    st = MessageStore(config, tier=tier.reader() if tier is not None else None)
    try:
        st.open(start_services=start_services)
    except StoreLocked:
        holder = held_by(config.root_dir) or "another process"
        err_console.print(
            f"[red]cannot open store[/]: {config.root_dir} is held by {holder}; ask the broker "
            "instead (gannet message query, gannet topic describe) or stop it first",
            highlight=False,
        )
        sys.exit(EXIT_STORE_UNAVAILABLE)
    except StoreError as exc:
        err_console.print(f"[red]cannot open store[/]: {exc}")
        sys.exit(EXIT_STORE_UNAVAILABLE)
    try:
        if not start_services:
            st.dispatch.dispatch_available()
        yield st
    finally:
        st.close()
