"""The latency view of ``bench/results/REPORT.md``: send→receive and send→ack percentiles at
fixed rates (the open-loop scenarios ``L1K`` and ``L5K``) for every system of the run, as a
table and as one plot, from the ``fixed_rate`` summaries that :mod:`bench.loadgen.run` writes
into ``peers.jsonl`` (:func:`bench.loadgen.fixed_rate.summarize`).

A row's percentiles are medians over the repetitions that kept up with the rate. When a
repetition did not, the row says so (achieved rate, backlog at the last scheduled send, what
went wrong) instead of printing a percentile that would measure the length of the run.
:func:`rows` and :func:`plot_series` are pure; :func:`plot` draws with matplotlib. Called by
:mod:`bench.loadgen.report`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PERCENTILES = ("p50", "p99", "p99.9")
IMAGE = "latency_fixed_rate.png"


@dataclass(frozen=True)
class Row:
    """One (scenario, system) of the latency view, over its repetitions."""

    scenario: str
    system: str
    client: str
    rate_msgs_per_s: float
    messages: int
    runs: int
    sustained_runs: int
    receive_ms: dict[str, float] = field(default_factory=dict)  # medians over sustained runs
    ack_ms: dict[str, float] = field(default_factory=dict)
    achieved_msgs_per_s: float | None = None  # median over every run
    backlog_at_end: int | None = None  # largest over every run
    cpu_us_per_msg: float | None = None
    start_lag_p99_ms: float | None = None  # how late sends left their schedule (median of p99s)
    verdicts: tuple[str, ...] = ()  # what went wrong in the runs that did not keep up

    @property
    def sustained(self) -> bool:
        return self.runs > 0 and self.sustained_runs == self.runs


def client_of(record: Mapping[str, Any]) -> str:
    """The client a line's system was driven with, with its version where recorded."""
    env = record.get("environment") or {}
    client = str(record.get("client", ""))
    if client.startswith("rmq"):
        return f"rocketmq-python-client {env.get('rocketmq_python_client', '?')}"
    if client == "kafka":
        settings = (record.get("settings") or {}).get("system") or {}
        return str(settings.get("client") or f"confluent-kafka {env.get('confluent_kafka', '?')}")
    return client or "?"


def _median(values: Iterable[float | int | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def _medians(summaries: list[Mapping[str, Any]], name: str) -> dict[str, float]:
    out = {}
    for pct in PERCENTILES:
        value = _median((s.get(name) or {}).get(pct) for s in summaries)
        if value is not None:
            out[pct] = value
    return out


def rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """The latency rows of ``records`` (lines of one run each, failed lines counted as runs
    that did not keep up), ordered by rate, then system."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for rec in records:
        if rec.get("fixed_rate") is not None or (rec.get("error") and _is_open_loop(rec)):
            grouped.setdefault((str(rec["scenario"]), str(rec["system"])), []).append(rec)
    out = []
    for (scenario, system), runs in grouped.items():
        summaries = [r["fixed_rate"] for r in runs if r.get("fixed_rate") is not None]
        kept = [s for s in summaries if s.get("sustained")]
        verdicts = [str(s.get("verdict")) for s in summaries if not s.get("sustained")]
        verdicts += [f"failed: {' '.join(str(r['error']).split())[:200]}" for r in runs
                     if r.get("error")]  # fmt: skip
        settings = (runs[-1].get("settings") or {}).get("scenario") or {}
        backlogs = [
            s.get("backlog_at_end") for s in summaries if s.get("backlog_at_end") is not None
        ]
        out.append(
            Row(
                scenario=scenario,
                system=system,
                client=client_of(runs[-1]),
                rate_msgs_per_s=float(settings.get("rate_msgs_per_s") or 0.0),
                messages=int(settings.get("messages") or 0),
                runs=len(runs),
                sustained_runs=len(kept),
                receive_ms=_medians(kept, "send_receive_ms"),
                ack_ms=_medians(kept, "send_ack_ms"),
                achieved_msgs_per_s=_median(s.get("achieved_msgs_per_s") for s in summaries),
                backlog_at_end=max(backlogs) if backlogs else None,
                cpu_us_per_msg=_median(r.get("broker_cpu_us_per_msg") for r in runs),
                start_lag_p99_ms=_median(
                    (s.get("start_lag_ms") or {}).get("p99") for s in summaries
                ),
                verdicts=tuple(dict.fromkeys(verdicts)),
            )
        )
    return sorted(out, key=lambda r: (r.rate_msgs_per_s, r.system))


def _is_open_loop(record: Mapping[str, Any]) -> bool:
    return bool(((record.get("settings") or {}).get("scenario") or {}).get("open_loop"))


def _ms(values: Mapping[str, float]) -> str:
    return " / ".join(f"{values[p]:,.1f}" if p in values else "–" for p in PERCENTILES)


def section(latency_rows: list[Row], image: str | None) -> list[str]:
    """The report's latency section: how it is measured, the table, the plot."""
    out = [
        "## Latency at fixed rates: send → receive",
        "",
        "Open loop: each producer sends on a fixed schedule (message *i* due at start + "
        "*i* ÷ rate) whether or not earlier sends were answered, with a bounded window of "
        "sends in flight; consumers receive at the same time, each acknowledging what it got "
        "before receiving again (a Pop ack per message with the official RocketMQ client, an "
        "offset commit per batch with Kafka's). Every latency runs from the message's "
        "**scheduled** send time, so a system (or client) that falls behind is charged for every "
        "message that waited: coordinated omission is corrected. send→receive ends when a "
        "consumer has the message, send→ack when the producer has the broker's answer. Medians "
        "over repetitions; a row whose runs did not keep up with the rate (a message lost, or "
        "the last one arriving later than max(1 s, 5 % of the schedule) after the last "
        "scheduled send) shows the rate it achieved and its backlog instead of percentiles.",
        "",
    ]
    if not latency_rows:
        return [
            *out,
            "No fixed-rate runs in `peers.jsonl` yet: `make bench-latency` runs them.",
            "",
        ]
    out += [
        "| rate msgs/s | system | client | send→receive p50 / p99 / p99.9 ms | "
        "send→ack p50 / p99 / p99.9 ms | achieved msgs/s | broker CPU µs/msg | runs | note |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in latency_rows:
        achieved = "–" if row.achieved_msgs_per_s is None else f"{row.achieved_msgs_per_s:,.0f}"
        cpu = "–" if row.cpu_us_per_msg is None else f"{row.cpu_us_per_msg:,.0f}"
        if row.sustained:
            receive, ack, note = _ms(row.receive_ms), _ms(row.ack_ms), ""
        else:
            receive = ack = "not sustained"
            backlog = "–" if row.backlog_at_end is None else f"{row.backlog_at_end:,}"
            note = (
                f"{row.runs - row.sustained_runs} of {row.runs} run(s) did not keep up: "
                f"achieved {achieved}/s of {row.rate_msgs_per_s:,.0f}/s, backlog {backlog} "
                f"messages at the last scheduled send; " + "; ".join(row.verdicts)
            )
            if row.start_lag_p99_ms is not None:
                note += (
                    f"; sends left up to {row.start_lag_p99_ms / 1e3:,.1f} s late (p99): the "
                    "producers' window of sends in flight was full or the client fell behind"
                )
        out.append(
            f"| {row.rate_msgs_per_s:,.0f} | {row.system} | {row.client} | {receive} | {ack} | "
            f"{achieved} | {cpu} | {row.runs} | {note} |"
        )
    sizes = sorted({(r.rate_msgs_per_s, r.messages) for r in latency_rows})
    out += [
        "",
        "Measured messages per run: "
        + ", ".join(f"{m:,} at {rate:,.0f}/s" for rate, m in sizes)
        + ". Broker CPU is the whole phase's (send, receive and ack) per message sent.",
        "",
    ]
    if image:
        out += [f"![send→receive latency at fixed rates](img/{image})", ""]
    return out


def plot_series(latency_rows: list[Row]) -> dict[float, dict[str, list[float] | None]]:
    """Per rate, per system: send→receive p50, p99, p99.9 in ms, or None when the system did
    not keep up with that rate (the plot says so instead of drawing a bar)."""
    out: dict[float, dict[str, list[float] | None]] = {}
    for row in latency_rows:
        values = [row.receive_ms.get(p) for p in PERCENTILES]
        complete = row.sustained and all(v is not None for v in values)
        out.setdefault(row.rate_msgs_per_s, {})[row.system] = (
            [float(v) for v in values if v is not None] if complete else None
        )
    return out


def plot(latency_rows: list[Row], img_dir: Path) -> str | None:
    """One panel per rate, a group of bars per percentile, one bar per system (log scale);
    the file name, or None when there is nothing to draw."""
    series = plot_series(latency_rows)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    img_dir.mkdir(parents=True, exist_ok=True)
    systems = sorted({s for per_rate in series.values() for s in per_rate})
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4.2), squeeze=False)
    width = 0.8 / max(1, len(systems))
    for ax, rate in zip(axes[0], sorted(series), strict=True):
        behind = []
        for i, system in enumerate(systems):
            values = series[rate].get(system)
            if values is None:
                if system in series[rate]:
                    behind.append(system)
                continue
            xs = [x + i * width for x in range(len(PERCENTILES))]
            ax.bar(xs, values, width, label=system, color=f"C{i}")
        ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(PERCENTILES))],
                      list(PERCENTILES))  # fmt: skip
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # 20, not 2×10¹
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("send→receive latency (ms)")
        ax.set_title(f"{rate:,.0f} msgs/s")
        if behind:
            ax.text(0.02, 0.97, "did not keep up: " + ", ".join(behind), transform=ax.transAxes,
                    va="top", fontsize=8)  # fmt: skip
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("send→receive latency at fixed rates (from the scheduled send; open loop)")
    fig.tight_layout()
    fig.savefig(img_dir / IMAGE, dpi=90)
    plt.close(fig)
    return IMAGE
