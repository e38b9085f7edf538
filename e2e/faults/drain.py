"""The drain after a fault run heals: waiting until every consumer received every acknowledged
send, and telling a slow consumer from a stuck one.

A consumer is *slow* while the acknowledged sends it has not received keep shrinking, however
slowly: on 2 shared cores under other work, the consumers (each a receive of 16 followed by 16
acks one at a time) hand out fewer messages a second than the senders store, and the backlog
they build up during the load takes tens of seconds to drain once the senders stop. A consumer
is *stuck* when nothing it has not received reaches it for ``stall_s``: longer than a long poll
(5 s), an invisible time (10-12 s) and a revive pass together, so a message whose Pop lease
lapsed has been handed out again by then. :func:`wait` waits as long as any lagging consumer
makes progress (up to ``limit_s``) and stops when every consumer is drained or stuck; the
figures it returns per consumer (``result.json``'s ``drain``) say which it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from e2e.faults.history import DECIMALS, Event, History

STALL_S = 30.0
"""No missing message reached a consumer for this long: it is stuck (module docstring)."""
LIMIT_S = 240.0
"""The longest drain, however slowly the consumers progress."""
POLL_S = 1.0

Missing = Callable[[list[Event]], list[str]]
"""The acknowledged sends (ids) a consumer has not received in a history."""


def wait(
    history: History, consumers: dict[str, tuple[str, Missing]], *, stall_s: float = STALL_S,
    limit_s: float = LIMIT_S, poll_s: float = POLL_S,
) -> dict[str, Any]:  # fmt: skip
    """Wait until no consumer misses a message, every one that does is stuck, or ``limit_s``.
    ``consumers``: name (as in ``result.json``'s ``undelivered``) -> (its process in the
    history, what it misses). Returns the drain's figures: ``start_s`` (since the run's start),
    ``s`` (how long), ``end``
    (``drained``, ``stuck`` or ``limit``) and per consumer :func:`figures`."""
    start = _stamp(history)
    events, _ = history.snapshot()
    first = {name: len(missing(events)) for name, (_, missing) in consumers.items()}
    count = dict(first)
    progress = dict.fromkeys(consumers, start)
    pause = threading.Event()
    end = "drained"
    while any(count.values()):
        now = history.now()
        if now - start >= limit_s:
            end = "limit"
            break
        if all(now - progress[name] >= stall_s for name, n in count.items() if n):
            end = "stuck"
            break
        pause.wait(poll_s)
        events, _ = history.snapshot()
        for name, (_, missing) in consumers.items():
            left = len(missing(events))
            if left < count[name]:
                progress[name] = history.now()
            count[name] = left
    stop = _stamp(history)
    events, _ = history.snapshot()
    each = {}
    for name, (process, _) in consumers.items():
        each[name] = figures(events, process, start, stop, first[name], count[name],
                             progress[name], stall_s)  # fmt: skip
    return {"start_s": round(start, 1), "s": round(stop - start, 1), "end": end,
            "consumers": each}  # fmt: skip


def _stamp(history: History) -> float:
    """Now, rounded as the history rounds its events' times: rounding keeps order, so an event
    recorded between two stamps lies between them (unrounded, the last receive of a drain,
    rounded up, could fall after its end)."""
    return round(history.now(), DECIMALS)


def figures(
    events: list[Event], process: str, start: float, stop: float, first: int, left: int,
    progress: float, stall_s: float,
) -> dict[str, Any]:  # fmt: skip
    """One consumer's drain: what it missed at the start (``at_start``) and at the end
    (``undelivered``), how fast that shrank (``rate_per_s``), when it last received a message
    it had missed (``last_progress_s``, seconds into the drain) and last received anything
    (``last_receive_s``, since the run's start), its receives in the drain (answered, of them
    with messages, failed, one still open at the end) and ``state``: ``drained``, ``slow``
    (still progressing at the end) or ``stuck`` (nothing for ``stall_s``)."""
    mine = [e for e in events if e.process == process and e.f == "receive"]
    during = [e for e in mine if start <= e.t <= stop]
    answered = [e for e in during if e.type == "ok"]
    got = [e for e in mine if e.type == "ok" and e.value.get("messages")]
    open_calls = sum(1 if e.type == "invoke" else -1 for e in mine)
    state = "drained" if not left else "stuck" if stop - progress >= stall_s else "slow"
    return {
        "at_start": first,
        "undelivered": left,
        "rate_per_s": round((first - left) / max(stop - start, 1e-3), 1),
        "last_progress_s": round(progress - start, 1),
        "last_receive_s": round(got[-1].t, 1) if got else None,
        "receives": len(answered),
        "receives_with_messages": sum(1 for e in answered if e.value.get("messages")),
        "receives_failed": sum(1 for e in during if e.type in ("fail", "info")),
        "receive_open": open_calls > 0,
        "state": state,
    }


def load_rate(events: list[Event], process: str, until: float) -> float:
    """Messages ``process`` received a second up to ``until`` (the end of the load): its
    throughput while the senders ran."""
    total = sum(
        len(e.value.get("messages", []))
        for e in events
        if e.process == process and e.f == "receive" and e.type == "ok" and e.t <= until
    )
    return round(total / max(until, 1e-3), 1)


def send_rate(events: list[Event], sender_prefix: str, until: float) -> float:
    """Acknowledged sends a second up to ``until`` by the senders whose names begin with
    ``sender_prefix``."""
    total = sum(
        1
        for e in events
        if e.f == "send" and e.type == "ok" and e.process.startswith(sender_prefix)
        and e.t <= until
    )  # fmt: skip
    return round(total / max(until, 1e-3), 1)


def describe(drain: dict[str, Any]) -> str:
    """The drain in a report cell: every consumer that missed messages at its end."""
    late = [
        f"{name} {c['undelivered']} {c['state']} (last {c['last_receive_s']} s)"
        for name, c in drain["consumers"].items()
        if c["undelivered"]
    ]
    return "; ".join(late)
