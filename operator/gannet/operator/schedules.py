"""When the next cleanup of a GannetCluster is due (pure; no IO, no clock of its own).

``spec.cleanup.schedule`` is a 5-field cron expression in UTC (croniter). The refresh timer of
:mod:`gannet.operator.handlers` calls :func:`decide` with the current time and what the status
remembers; when the decision says ``run``, the handler triggers the admin ``Cleanup`` RPC on
every broker and records :func:`next_after` of that run as ``status.cleanup.nextRunTime``.

Missed runs are not replayed: after an operator outage the cleanup runs once, then waits for the
next scheduled time (like a CronJob with ``concurrencyPolicy: Forbid`` and no backlog).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from croniter import croniter


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    run: bool
    next_run: dt.datetime | None  # the time to record as nextRunTime


def next_after(schedule: str, moment: dt.datetime) -> dt.datetime:
    """The first scheduled time strictly after ``moment`` (UTC)."""
    start = moment.astimezone(dt.UTC)
    result = croniter(schedule, start).get_next(dt.datetime)
    assert isinstance(result, dt.datetime)
    return result.astimezone(dt.UTC)


def decide(schedule: str | None, *, now: dt.datetime, next_run: dt.datetime | None) -> Decision:
    """Run now or not, given the recorded next run time (None: never scheduled yet)."""
    if schedule is None:
        return Decision(False, None)
    if next_run is None:
        return Decision(False, next_after(schedule, now))
    expected = next_after(schedule, next_run - dt.timedelta(seconds=1))
    if expected != next_run:
        # The schedule changed since next_run was recorded: reschedule from now.
        return Decision(False, next_after(schedule, now))
    if now >= next_run:
        return Decision(True, next_after(schedule, now))
    return Decision(False, next_run)


def parse_time(text: object) -> dt.datetime | None:
    """An RFC 3339 time from status, or None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
