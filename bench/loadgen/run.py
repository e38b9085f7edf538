"""``python -m bench.loadgen.run``: run scenarios against Gannet and its peers and append one
JSON line per (scenario, system, repetition) to ``bench/results/peers.jsonl``.

For each scenario and system: start the system fresh in a temporary directory (its topics and
group created), then per repetition a produce phase (producers only; consumers not yet running)
and a consume phase (Pop receive + ack until every message is back), each metered on the broker
processes; stop the system. A system that cannot run a scenario (no sync flush, no R3) gets a
``skipped`` line saying why, so the report can state it. Load generators run on CPU 1, brokers
on CPU 0 (``docs/benchmarks.md`` §1). JSON line fields are documented in :func:`record`.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import platform
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bench.loadgen import drivers, fixed_rate, open_loop, phases
from bench.loadgen.scenarios import Mode, Scenario, select
from bench.peers import gannet, kafka, natsjs, processes, redisstreams, rocketmq
from bench.peers.base import Layout, Running

RESULTS = Path(__file__).resolve().parent.parent / "results"
BUSY_PRELIMINARY_MIN = 0.15  # of all CPUs, with the system under test idle: other work runs
LOADGEN_CPUS = (1,) if (os.cpu_count() or 1) > 1 else ()

Starter = Callable[[Path, str, int, Layout], Running]
SYSTEMS: dict[str, Starter] = {
    "gannet": gannet.start,
    "rocketmq": rocketmq.start,
    "nats": natsjs.start,
    "redis": redisstreams.start,
    "kafka": kafka.start,
}
CLIENTS = {
    ("gannet", Mode.STOCK): "rmq_stock",
    ("gannet", Mode.BATCHED): "rmq_raw",
    ("rocketmq", Mode.STOCK): "rmq_stock",
    ("rocketmq", Mode.BATCHED): "rmq_raw",
    ("nats", Mode.STOCK): "nats",
    ("nats", Mode.BATCHED): "nats",
    ("redis", Mode.STOCK): "redis",
    ("redis", Mode.BATCHED): "redis",
    ("kafka", Mode.STOCK): "kafka",
    ("kafka", Mode.BATCHED): "kafka",
}
console = Console(stderr=True)


def specs_for(
    role: str,
    running: Running,
    client: str,
    scenario: Scenario,
    layout: Layout,
    run_token: int = 0,
) -> list[drivers.WorkerSpec]:
    """Worker specs of one phase: producers split the messages; consumers share the group
    (in an open-loop run they stop once the group has every measured message)."""
    workers = scenario.producers if role == "produce" else max(1, scenario.consumers)
    total = scenario.messages + (0 if scenario.open_loop else scenario.warmup_messages)
    return [
        drivers.WorkerSpec(
            system=running.system,
            client=client,
            endpoint=running.endpoint,
            scenario=scenario,
            worker=i,
            workers=workers,
            topics=layout.topics,
            group=layout.group,
            messages=scenario.share(i, workers, scenario.messages),
            warmup_messages=scenario.share(i, workers, scenario.warmup_messages),
            expected_total=total,
            deadline_s=scenario.max_duration_s,
            cpus=LOADGEN_CPUS,
            run_token=run_token,
        )
        for i in range(workers)
    ]


def _version_or_none(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


@functools.cache
def commit() -> str:
    """The repository's HEAD commit, with ``+dirty`` when tracked files differ from it (the
    code that ran), or ``unknown`` outside a git checkout. Read once per run."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")  # fmt: skip


def environment() -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "commit": commit(),
        "python": platform.python_version(),
        "grpcio": version("grpcio"),
        "protobuf": version("protobuf"),
        "rocketmq_python_client": version("rocketmq-python-client"),
        "nats_py": version("nats-py"),
        "redis_py": version("redis"),
        "confluent_kafka": _version_or_none("confluent-kafka"),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "pinning": "broker CPU 0, load generator CPU 1" if LOADGEN_CPUS else "none (1 CPU)",
    }


def record(
    run_id: str,
    scenario: Scenario,
    running: Running,
    client: str,
    repetition: int,
    produce: phases.PhaseResult | None,
    consume: phases.PhaseResult | None,
    load_before: tuple[float, float, float],
    error: str = "",
    cpu_busy_before: float | None = None,
    fixed_rate_summary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One JSON line. Rates are msgs/s over the measured part; ``broker_cpu_us_per_msg`` is
    broker CPU (user+system of every broker process) during the produce phase per message
    produced, ``consume_cpu_us_per_msg`` the same for the consume phase;
    ``produce_client_cpu_us_per_msg`` / ``consume_client_cpu_us_per_msg`` are the load
    generator's own CPU per message (every worker process, all threads, over its measured part:
    the workers share :data:`LOADGEN_CPUS`, so 1e6 ÷ that figure is the client side's ceiling);
    ``write_amplification`` = bytes the broker processes wrote to storage during both phases
    (``/proc/<pid>/io`` write_bytes) ÷ payload bytes produced; ``other_busy_before`` is the share
    of all CPUs that processes other than the system under test kept busy during 1 s before
    the repetition, and
    ``preliminary`` is true when it exceeded :data:`BUSY_PRELIMINARY_MIN` (other work on the
    machine); without it (older lines), when the 1-minute load average exceeded 0.5.

    Open-loop scenarios run producers and consumers together: ``broker_cpu_us_per_msg`` is
    then the broker CPU of the whole phase (send, receive and ack) per message sent, and
    ``fixed_rate`` holds :func:`bench.loadgen.fixed_rate.summarize` of the run (latencies
    from each message's scheduled send time)."""
    rec: dict[str, Any] = {
        "run_id": run_id,
        "ts": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "scenario": scenario.id,
        "title": scenario.title,
        "system": running.system,
        "version": running.version,
        "mode": scenario.mode.value,
        "client": client,
        "durability": running.durability,
        "replicas": scenario.replicas,
        "message_size_bytes": scenario.message_size_bytes,
        "repetition": repetition,
        "settings": {"scenario": scenario.settings(), "system": running.settings},
        "loadavg": list(load_before),
        "loadavg_after": list(processes.loadavg()),
        "other_busy_before": None if cpu_busy_before is None else round(cpu_busy_before, 3),
        "preliminary": (
            load_before[0] > 0.5
            if cpu_busy_before is None
            else cpu_busy_before > BUSY_PRELIMINARY_MIN
        ),
        "environment": environment(),
    }
    if error:
        rec["error"] = error[-2000:]
    if fixed_rate_summary is not None:
        rec["fixed_rate"] = fixed_rate_summary
    if produce is not None:
        rec.update(
            messages_sent=produce.done,
            produce_errors=produce.errors,
            produce_elapsed_s=round(produce.elapsed_s, 4),
            produce_msgs_per_s=round(produce.msgs_per_s, 1),
            produce_mb_per_s=round(produce.payload_bytes / max(produce.elapsed_s, 1e-9) / 1e6, 3),
            send_latency_ms={k: round(v, 3) for k, v in produce.latency_ms.items()},
            broker_cpu_us_per_msg=round(produce.usage.cpu_s / max(produce.done, 1) * 1e6, 2),
            produce_client_cpu_us_per_msg=round(produce.client_cpu_us_per_msg, 2),
            broker_peak_rss_bytes=produce.usage.peak_rss_bytes,
            produce_write_bytes=produce.usage.write_bytes,
        )
        if produce.first_error:
            rec["produce_first_error"] = produce.first_error
    if consume is not None:
        rec.update(
            messages_received=consume.done,
            consume_errors=consume.errors,
            consume_elapsed_s=round(consume.elapsed_s, 4),
            consume_msgs_per_s=round(consume.msgs_per_s, 1),
            receive_ack_latency_ms={k: round(v, 3) for k, v in consume.latency_ms.items()},
            consume_cpu_us_per_msg=round(consume.usage.cpu_s / max(consume.done, 1) * 1e6, 2),
            consume_client_cpu_us_per_msg=round(consume.client_cpu_us_per_msg, 2),
            consume_write_bytes=consume.usage.write_bytes,
        )
        if consume.first_error:
            rec["consume_first_error"] = consume.first_error
        rec["broker_peak_rss_bytes"] = max(
            rec.get("broker_peak_rss_bytes", 0), consume.usage.peak_rss_bytes
        )
    if produce is not None and produce.payload_bytes:
        written = produce.usage.write_bytes + (consume.usage.write_bytes if consume else 0)
        rec["write_amplification"] = round(written / produce.payload_bytes, 3)
    return rec


def skipped(run_id: str, scenario: Scenario, system: str, reason: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "ts": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "scenario": scenario.id,
        "title": scenario.title,
        "system": system,
        "mode": scenario.mode.value,
        "durability": f"{scenario.flush.value} flush, R{scenario.replicas}",
        "settings": {"scenario": scenario.settings()},
        "skipped": reason,
    }


def run_open_loop(
    running: Running, client: str, scenario: Scenario, layout: Layout
) -> tuple[phases.PhaseResult, phases.PhaseResult, dict[str, Any]]:
    """One repetition of a fixed-rate scenario: producers and consumers together. The broker's
    usage of the phase goes with the produce side (the consume side gets none, so that it is
    not counted twice); the summary is :func:`bench.loadgen.fixed_rate.summarize`."""
    token = random.randrange(1, 1 << 16)
    done = phases.run_open_loop(
        specs_for("produce", running, client, scenario, layout, token),
        specs_for("consume", running, client, scenario, layout, token),
        running.pids,
    )
    assert scenario.rate_msgs_per_s is not None
    summary = fixed_rate.summarize(
        rate_msgs_per_s=scenario.rate_msgs_per_s,
        messages=scenario.messages,
        sends=[x for r in done.producers for x in r.sends],
        acks=[x for r in done.producers for x in r.acks],
        receives=[x for r in done.consumers for x in r.receives],
        send_errors=sum(r.errors for r in done.producers),
    )
    idle = processes.Usage(cpu_s=0.0, write_bytes=0, peak_rss_bytes=done.usage.peak_rss_bytes)
    return (
        phases.combine(done.producers, done.usage),
        phases.combine(done.consumers, idle),
        summary,
    )


def run_system(run_id: str, scenario: Scenario, system: str, workdir: Path) -> list[dict[str, Any]]:
    """Every repetition of ``scenario`` against ``system`` (started once, stopped after)."""
    name = system if scenario.replicas == 1 else f"{system}-r{scenario.replicas}"
    if scenario.open_loop and CLIENTS[(system, scenario.mode)] not in open_loop.PRODUCERS:
        reason = (
            f"no open-loop latency driver for {system} (fixed-rate runs: gannet, rocketmq, kafka)"
        )
        console.print(f"[yellow]{scenario.id} {name}: skipped: {reason}")
        return [skipped(run_id, scenario, name, reason)]
    tag = uuid.uuid4().hex[:6]
    layout = Layout(tuple(scenario.topic_names(tag)), scenario.queues_per_topic, f"g-{tag}")
    try:
        running = SYSTEMS[system](workdir, scenario.flush.value, scenario.replicas, layout)
    except processes.PeerError as exc:
        console.print(f"[yellow]{scenario.id} {name}: skipped: {str(exc)[:300]}")
        return [skipped(run_id, scenario, name, str(exc)[:1000])]
    client = CLIENTS[(system, scenario.mode)]
    lines = []
    try:
        for repetition in range(scenario.repetitions):
            load_before = processes.loadavg()
            busy_before = processes.cpu_busy_fraction(exclude_roots=running.pids)
            produce = consume = None
            summary = None
            error = ""
            try:
                if scenario.open_loop:
                    produce, consume, summary = run_open_loop(running, client, scenario, layout)
                else:
                    produce = phases.run(
                        "produce",
                        specs_for("produce", running, client, scenario, layout),
                        running.pids,
                    )
                if scenario.consume and scenario.consumers and not scenario.open_loop:
                    consume = phases.run(
                        "consume",
                        specs_for("consume", running, client, scenario, layout),
                        running.pids,
                    )
            except phases.PhaseError as exc:
                error = str(exc)
            rec = record(
                run_id, scenario, running, client, repetition, produce, consume, load_before,
                error, busy_before, summary,
            )  # fmt: skip
            lines.append(rec)
            _print(rec)
    finally:
        running.stop()
    return lines


def _print(rec: dict[str, Any]) -> None:
    if rec.get("error"):
        console.print(f"[red]{rec['scenario']} {rec['system']}: {rec['error'][:400]}")
        return
    if rec.get("fixed_rate"):
        fr = rec["fixed_rate"]
        e2e = fr.get("send_receive_ms") or {}
        console.print(
            f"{rec['scenario']} {rec['system']:>9} rep {rec['repetition']}: target "
            f"{fr['target_msgs_per_s']:,.0f}/s, "
            f"achieved {fr.get('achieved_msgs_per_s', 0):,.0f}/s, "
            f"send→receive p50/p99/p99.9 {e2e.get('p50', 0):.1f}/{e2e.get('p99', 0):.1f}/"
            f"{e2e.get('p99.9', 0):.1f} ms, {fr['verdict']}"
        )
        return
    console.print(
        f"{rec['scenario']} {rec['system']:>9} {rec['mode']:>7} rep {rec['repetition']}: "
        f"produce {rec.get('produce_msgs_per_s', 0):>9,.0f}/s "
        f"(p99 {rec.get('send_latency_ms', {}).get('p99', 0):.1f} ms, "
        f"{rec.get('broker_cpu_us_per_msg', 0):.0f} µs cpu/msg), "
        f"consume {rec.get('consume_msgs_per_s', 0):>8,.0f}/s, "
        f"WA {rec.get('write_amplification', 0):.2f}, errors "
        f"{rec.get('produce_errors', 0)}/{rec.get('consume_errors', 0)}"
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--scenarios", default="S1,S3", show_default=True, help="Ids, comma separated, or 'all'."
)
@click.option(
    "--systems",
    default="gannet,redis",
    show_default=True,
    help=f"Comma separated, from: {', '.join(SYSTEMS)}.",
)
@click.option("--quick", is_flag=True, help="A fifth of the messages, one repetition.")
@click.option(
    "--scale",
    type=click.FloatRange(min=0.0, min_open=True, max=100.0),
    default=None,
    help="Multiply every scenario's message and warm-up counts by this (0.2 = the quick sizes).",
)
@click.option(
    "--repetitions",
    type=click.IntRange(min=1, max=100),
    default=None,
    help="Repetitions per scenario and system, instead of each scenario's own (3).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=RESULTS / "peers.jsonl",
    show_default=True,
)
@click.option("--report/--no-report", default=True, help="Regenerate REPORT.md afterwards.")
def main(
    scenarios: str,
    systems: str,
    quick: bool,
    scale: float | None,
    repetitions: int | None,
    out: Path,
    report: bool,
) -> None:
    """Run scenarios S1-S9 against Gannet and peer brokers; append results as JSON lines.

    The effective message counts, repetitions and scale of each scenario are recorded in every
    line's settings.scenario and stated in the report. Exit code 0 when every run completed,
    1 when some run failed (its line holds the error), 2 for bad arguments."""
    chosen_systems = [s.strip() for s in systems.split(",") if s.strip()]
    unknown = [s for s in chosen_systems if s not in SYSTEMS]
    if unknown:
        raise click.BadParameter(f"unknown system(s) {unknown}", param_hint="--systems")
    try:
        chosen = select(
            [s.strip() for s in scenarios.split(",")],
            quick=quick,
            scale=scale,
            repetitions=repetitions,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--scenarios/--quick") from exc
    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = 0
    lines: list[dict[str, Any]] = []
    started = time.monotonic()
    for scenario in chosen:
        for system in chosen_systems:
            with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as tmp:
                for rec in run_system(run_id, scenario, system, Path(tmp)):
                    failed += bool(rec.get("error"))
                    lines.append(rec)
                    with out.open("a") as f:
                        f.write(json.dumps(rec, sort_keys=True) + "\n")
    console.print(f"{len(lines)} lines appended to {out} in {time.monotonic() - started:.0f} s")
    _summary(lines)
    if report:
        from bench.loadgen import report as report_module

        report_module.write(out, RESULTS / "REPORT.md", RESULTS / "img")
    sys.exit(1 if failed else 0)


def _summary(lines: list[dict[str, Any]]) -> None:
    table = Table(title="runs")
    for column in ("scenario", "system", "mode", "produce/s", "consume/s", "cpu µs/msg", "note"):
        table.add_column(column)
    for rec in lines:
        table.add_row(
            rec["scenario"],
            rec["system"],
            rec["mode"],
            f"{rec.get('produce_msgs_per_s', 0):,.0f}",
            f"{rec.get('consume_msgs_per_s', 0):,.0f}",
            f"{rec.get('broker_cpu_us_per_msg', 0):.0f}",
            (rec.get("skipped") or rec.get("error") or "")[:60],
        )
    console.print(table)


if __name__ == "__main__":
    main()
