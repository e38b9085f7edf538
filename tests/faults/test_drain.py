"""The fault harness's drain (:mod:`e2e.faults.drain`): it waits while a consumer progresses,
however slowly, stops once every consumer that still misses messages got none for the stall
time, and tells which was which."""

from __future__ import annotations

from e2e.faults import drain
from e2e.faults.history import Event, History


def _shrinking(history: History, process: str, sizes: list[int]) -> drain.Missing:
    """A consumer missing ``sizes[n]`` messages at the n-th look, the last size from then on;
    each look that finds fewer records a receive of the difference."""
    looks = iter(sizes)
    last = [sizes[0]]

    def missing(_: list[Event]) -> list[str]:
        size = next(looks, last[0])
        if size < last[0]:
            history.add(process, "invoke", "receive")
            messages = [{"key": f"k{n}", "id": f"m{n}"} for n in range(last[0] - size)]
            history.add(process, "ok", "receive", messages=messages)
        last[0] = size
        return [f"m{n}" for n in range(size)]

    return missing


def test_a_slow_consumer_is_waited_for_past_the_stall_time_until_drained() -> None:
    history = History()
    sizes = list(range(40, -1, -1))  # one message a look: 40 looks, 10 times the stall time
    figures = drain.wait(history, {"jq": ("pq", _shrinking(history, "pq", sizes))},
                         stall_s=0.2, limit_s=60.0, poll_s=0.02)  # fmt: skip
    assert figures["end"] == "drained"
    assert figures["s"] >= 0.2 * 2  # longer than the stall time: it kept progressing
    consumer = figures["consumers"]["jq"]
    assert (consumer["at_start"], consumer["undelivered"], consumer["state"]) == (40, 0, "drained")
    assert consumer["receives_with_messages"] == 40


def test_a_consumer_that_stops_receiving_is_stuck_and_a_drained_one_is_not_waited_for() -> None:
    history = History()
    consumers = {
        "jq": ("pq", _shrinking(history, "pq", [5, 4, 3])),  # then 3 for ever
        "jf": ("pf", _shrinking(history, "pf", [0])),
    }
    figures = drain.wait(history, consumers, stall_s=0.3, limit_s=60.0, poll_s=0.02)
    assert figures["end"] == "stuck"
    assert 0.3 <= figures["s"] < 60.0
    stuck = figures["consumers"]["jq"]
    assert (stuck["at_start"], stuck["undelivered"], stuck["state"]) == (5, 3, "stuck")
    assert figures["consumers"]["jf"]["state"] == "drained"
    assert drain.describe(figures).startswith("jq 3 stuck")


def test_the_limit_ends_a_drain_that_still_progresses() -> None:
    history = History()
    sizes = list(range(100_000, 0, -1))
    figures = drain.wait(history, {"jq": ("pq", _shrinking(history, "pq", sizes))},
                         stall_s=10.0, limit_s=0.3, poll_s=0.02)  # fmt: skip
    assert figures["end"] == "limit"
    consumer = figures["consumers"]["jq"]
    assert consumer["state"] == "slow"
    assert consumer["undelivered"] > 0
    assert consumer["rate_per_s"] > 0
