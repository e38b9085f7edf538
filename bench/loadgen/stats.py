"""Pure arithmetic over benchmark results: latency percentiles, medians over repetitions, and
Gannet ÷ peer ratios. Used by :mod:`bench.loadgen.phases` (percentiles of one run) and
:mod:`bench.loadgen.report` (medians and ratios over ``peers.jsonl``)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PERCENTILES = (50.0, 95.0, 99.0, 99.9)
LATENCY_SAMPLE_LIMIT = 200_000  # per run: bounded memory for latency samples


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (``pct`` in 0..100)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= pct <= 100.0:
        raise ValueError(f"percentile {pct} outside 0..100")
    rank = max(1, math.ceil(round(pct * len(sorted_values) / 100.0, 9)))  # 99.9% of 1000: 999
    return sorted_values[rank - 1]


def latency_summary(latencies_s: Iterable[float]) -> dict[str, float]:
    """p50/p95/p99/p99.9/max in milliseconds; empty dict for no samples."""
    ordered = sorted(latencies_s)
    if not ordered:
        return {}
    summary = {f"p{pct:g}": percentile(ordered, pct) * 1e3 for pct in PERCENTILES}
    summary["max"] = ordered[-1] * 1e3
    return summary


def key_of(record: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """The identity of a measurement: (scenario, system, mode, durability)."""
    durability = str(record["durability"]).split(" (", 1)[0]  # notes in parentheses aside
    return (str(record["scenario"]), str(record["system"]), str(record["mode"]), durability)


METRICS = (
    "produce_msgs_per_s",
    "produce_mb_per_s",
    "consume_msgs_per_s",
    "broker_cpu_us_per_msg",
    "consume_cpu_us_per_msg",
    "broker_peak_rss_bytes",
    "write_amplification",
    "send_p50_ms",
    "send_p99_ms",
    "send_p99.9_ms",
)


def flatten(record: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics of one record (latency percentiles lifted to top-level names)."""
    flat: dict[str, float] = {}
    for name in METRICS:
        value = record.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            flat[name] = float(value)
    for pct, value in (record.get("send_latency_ms") or {}).items():
        flat[f"send_{pct}_ms"] = float(value)
    return flat


def medians(
    records: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Median of every metric over the repetitions of each (scenario, system, mode, durability).
    Failed runs (``"error"`` set) are left out but counted."""
    grouped: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[key_of(record)].append(record)
    result: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for key, runs in grouped.items():
        ok = [r for r in runs if not r.get("error")]
        values: dict[str, list[float]] = defaultdict(list)
        for run in ok:
            for name, value in flatten(run).items():
                values[name].append(value)
        entry: dict[str, Any] = {name: statistics.median(v) for name, v in values.items()}
        entry["runs"] = len(ok)
        entry["failed_runs"] = len(runs) - len(ok)
        entry["errors"] = sorted({str(r["error"]) for r in runs if r.get("error")})
        last = (ok or runs)[-1]
        for field in ("version", "settings", "message_size_bytes", "replicas", "loadavg"):
            entry[field] = last.get(field)
        result[key] = entry
    return result


def ratio(gannet: float | None, peer: float | None) -> float | None:
    """Gannet ÷ peer, or None when either is missing or the peer figure is zero."""
    if gannet is None or peer is None or peer == 0:
        return None
    return gannet / peer


HIGHER_IS_BETTER = {"produce_msgs_per_s", "produce_mb_per_s", "consume_msgs_per_s"}


def ratios(
    table: Mapping[tuple[str, str, str, str], Mapping[str, Any]], metric: str
) -> dict[tuple[str, str, str, str], float]:
    """For every peer row, Gannet's ``metric`` ÷ the peer's, matching scenario, mode and
    durability (Gannet rows themselves are skipped)."""
    out: dict[tuple[str, str, str, str], float] = {}
    for key, row in table.items():
        scenario, system, mode, durability = key
        if system.startswith("gannet"):
            continue
        mine = table.get((scenario, "gannet", mode, durability))
        value = ratio(
            None if mine is None else mine.get(metric),
            row.get(metric),
        )
        if value is not None:
            out[key] = value
    return out
