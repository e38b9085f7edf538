"""Fixed-rate (open-loop) latency, the pure part: the stamp every message body carries, the
send schedule, and the summary of one run — send→ack and send→receive percentiles, the rate
achieved, the backlog, and whether the system kept up at all.

Open loop: each producer sends message ``i`` at its scheduled time ``start + i / rate`` whether
or not earlier messages were answered (it only waits when its bounded window of requests in
flight is full). Every latency runs from the message's **scheduled** time, not from when the
producer got round to sending it, so a broker (or client) that falls behind is charged for the
wait of every message queued behind the slow one: coordinated omission is corrected. The body
starts with a :data:`STAMP` (scheduled time on ``CLOCK_MONOTONIC``, which every process of the
machine shares), so a consumer in another process computes send→receive from the body alone.

A percentile of a run that did not keep up measures how long the run lasted, not the system:
:func:`summarize` says ``sustained`` only when every measured message was acknowledged and
received, and the last one arrived within :func:`drain_limit_s` of the last scheduled send.
Otherwise the report prints the achieved rate and the backlog instead of percentiles.

Used by :mod:`bench.loadgen.open_loop` (stamps, schedule), :mod:`bench.loadgen.run` (summary of
a run) and :mod:`bench.loadgen.report` (verdicts).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.loadgen import stats

MAGIC = b"GNLT"
# magic, run token, measured flag, producer worker, sequence in that producer, scheduled
# monotonic ns. The run token tells this run's messages from a previous repetition's leftovers.
STAMP = struct.Struct(">4sHBHIq")
DRAIN_LIMIT_MIN_S = 1.0  # the last message may arrive this long after the last scheduled send
DRAIN_LIMIT_SHARE = 0.05  # ... or this share of the schedule's length, whichever is longer
SUMMARY_PERCENTILES = (50.0, 99.0, 99.9)


class StampError(ValueError):
    """A body that does not start with a latency stamp."""


@dataclass(frozen=True, slots=True)
class Stamp:
    run_token: int
    measured: bool
    producer: int
    sequence: int
    scheduled_ns: int

    @property
    def scheduled_s(self) -> float:
        return self.scheduled_ns / 1e9


def stamp(body: bytes, mark: Stamp) -> bytes:
    """``body`` with its first :data:`STAMP` bytes replaced by ``mark`` (same length)."""
    if len(body) < STAMP.size:
        raise StampError(f"body of {len(body)} bytes cannot hold a {STAMP.size}-byte stamp")
    head = STAMP.pack(
        MAGIC, mark.run_token, int(mark.measured), mark.producer, mark.sequence, mark.scheduled_ns
    )
    return head + body[STAMP.size :]


def read_stamp(body: bytes) -> Stamp:
    """The stamp at the start of ``body``; :class:`StampError` naming what is wrong."""
    if len(body) < STAMP.size:
        raise StampError(f"body of {len(body)} bytes is shorter than a stamp ({STAMP.size})")
    magic, token, measured, producer, sequence, scheduled_ns = STAMP.unpack_from(body)
    if magic != MAGIC:
        raise StampError(f"body starts with {magic!r}, not the stamp magic {MAGIC!r}")
    return Stamp(token, bool(measured), producer, sequence, scheduled_ns)


def due_s(start_s: float, index: int, rate_msgs_per_s: float) -> float:
    """When message ``index`` of a producer sending ``rate_msgs_per_s`` from ``start_s`` is due."""
    if rate_msgs_per_s <= 0:
        raise ValueError(f"rate_msgs_per_s={rate_msgs_per_s} (must be > 0)")
    return start_s + index / rate_msgs_per_s


def drain_limit_s(schedule_s: float) -> float:
    """How long after the last scheduled send the last message may arrive in a sustained run:
    a system that keeps up drains in about its tail latency; one that does not has a backlog
    that grows with the run, and draining it takes a share of the run's length."""
    return max(DRAIN_LIMIT_MIN_S, DRAIN_LIMIT_SHARE * schedule_s)


def backlog(scheduled_s: Sequence[float], received_s: Sequence[float], at_s: float) -> int:
    """Messages scheduled by ``at_s`` and not yet received by then (a message never received
    counts as waiting)."""
    due = sum(1 for t in scheduled_s if t <= at_s)
    arrived = sum(1 for t in received_s if t <= at_s)
    return max(0, due - arrived)


def backlog_max(scheduled_s: Sequence[float], received_s: Sequence[float]) -> int:
    """The largest backlog at any moment (a sweep over both event lists)."""
    events = sorted([(t, 1) for t in scheduled_s] + [(t, -1) for t in received_s])
    waiting = peak = 0
    for _, step in events:
        waiting += step
        peak = max(peak, waiting)
    return peak


def _percentiles_ms(latencies_s: Iterable[float]) -> dict[str, float]:
    ordered = sorted(latencies_s)
    if not ordered:
        return {}
    out = {
        f"p{pct:g}": round(stats.percentile(ordered, pct) * 1e3, 3) for pct in SUMMARY_PERCENTILES
    }
    out["max"] = round(ordered[-1] * 1e3, 3)
    return out


def summarize(
    *,
    rate_msgs_per_s: float,
    messages: int,
    sends: Sequence[tuple[float, float]],
    acks: Sequence[tuple[float, float]],
    receives: Sequence[tuple[float, float]],
    send_errors: int = 0,
) -> dict[str, Any]:
    """The figures of one open-loop run of ``messages`` measured messages scheduled at
    ``rate_msgs_per_s`` in all. Each list holds (scheduled, event) times in seconds of one
    measured message: ``sends`` when the producer issued it (a send that raised included),
    ``acks`` when the producer had the broker's answer, ``receives`` when a consumer had the
    message (first delivery only).

    ``achieved_msgs_per_s`` = messages received ÷ (last receive − first scheduled send);
    ``backlog_at_end`` = messages not yet received at the last scheduled send; ``backlog_max``
    the largest such count at any moment; ``drain_s`` = last receive − last scheduled send;
    ``start_lag_ms`` how late sends left against their schedule (the generator's own lag, or
    a full window of requests in flight)."""
    if rate_msgs_per_s <= 0 or messages < 1:
        raise ValueError(f"rate_msgs_per_s={rate_msgs_per_s}, messages={messages}: both > 0")
    scheduled = sorted(s for s, _ in sends)
    received_at = [r for _, r in receives]
    out: dict[str, Any] = {
        "target_msgs_per_s": rate_msgs_per_s,
        "messages": messages,
        "sent": len(sends),
        "acked": len(acks),
        "received": len(receives),
        "send_errors": send_errors,
        "send_ack_ms": _percentiles_ms(a - s for s, a in acks),
        "send_receive_ms": _percentiles_ms(r - s for s, r in receives),
        "start_lag_ms": _percentiles_ms(i - s for s, i in sends),
    }
    if not scheduled or not receives:
        out.update(sustained=False, verdict="nothing was sent or nothing was received")
        return out
    first, last = scheduled[0], scheduled[-1]
    last_receive = max(received_at)
    out["achieved_msgs_per_s"] = round(len(receives) / max(last_receive - first, 1e-9), 1)
    out["backlog_at_end"] = backlog(scheduled, received_at, last)
    out["backlog_max"] = backlog_max(scheduled, received_at)
    out["drain_s"] = round(last_receive - last, 3)
    limit_s = drain_limit_s((messages - 1) / rate_msgs_per_s)
    problems = []
    if len(acks) < messages or send_errors:
        problems.append(
            f"{messages - len(acks)} of {messages} sends not acknowledged"
            + (f" ({send_errors} errors)" if send_errors else "")
        )
    if len(receives) < messages:
        problems.append(f"{messages - len(receives)} of {messages} messages not received")
    if out["drain_s"] > limit_s:
        problems.append(
            f"the last message arrived {out['drain_s']:.1f} s after the last scheduled send "
            f"(limit {limit_s:.1f} s)"
        )
    out["sustained"] = not problems
    out["verdict"] = "; ".join(problems) if problems else "sustained"
    return out
