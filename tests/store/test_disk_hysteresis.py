"""Disk pressure with hysteresis: a level turns on above its threshold and off only below the
threshold minus ``disk_hysteresis_percentage_points``, so a disk hovering at a threshold does not
flip writes between refused and accepted (``cleaning.space_state``, ``cleaning.latched``).

The pure state machine is driven with sequences of readings (up, hover at the threshold with
noise, down); the store with the same readings through its ratio probe, one pass per reading.
The report this answers: brokers flapped between refusing and accepting writes, logging each
flip.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import DiskFull
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep.cleaning import (
    CLEAR,
    CleanPolicy,
    SpaceState,
    latched,
    space_state,
)

TOPIC = "Orders"
POLICY = CleanPolicy(72.0, "04", 75, 0.90, 0.85)  # 2 percentage points by default
UP = [0.70, 0.80, 0.86, 0.89]
HOVER_AT_WARNING = [0.901, 0.899, 0.903, 0.897, 0.9005, 0.885, 0.8995, 0.881, 0.902, 0.889]
DOWN = [0.879, 0.86, 0.84, 0.829, 0.76, 0.74, 0.70]


def fold(readings: list[float], policy: CleanPolicy = POLICY) -> list[SpaceState]:
    """The state after each reading, each pass starting from the previous state."""
    states = []
    state = CLEAR
    for ratio in readings:
        state = space_state(ratio, policy, forcibly_enabled=True, previous=state)
        states.append(state)
    return states


def flips(values: list[bool]) -> int:
    return sum(
        1 for before, after in zip([False, *values], values, strict=False) if before != after
    )


# ---------------------------------------------------------------------------- one level
@pytest.mark.parametrize(
    ("ratio", "was_on", "expected"),
    [
        (0.90, False, False),  # at the threshold: not above it
        (0.9001, False, True),
        (0.89, False, False),
        (0.89, True, True),  # within the margin: stays on
        (0.8801, True, True),  # just above threshold - margin: not below it yet
        (0.8799, True, False),
        (0.95, True, True),
    ],
)
def test_a_level_turns_on_above_and_off_below_the_margin(
    ratio: float, was_on: bool, expected: bool
) -> None:
    assert latched(ratio, 0.90, was_on=was_on, margin=0.02) is expected


# ---------------------------------------------------------------------------- sequences
def test_hovering_at_the_warning_ratio_refuses_writes_once_until_well_below() -> None:
    readings = UP + HOVER_AT_WARNING + DOWN
    warning = [s.warning for s in fold(readings)]
    assert flips(warning) == 2  # on once, off once
    on_at = warning.index(True)
    off_at = warning.index(False, on_at)
    assert readings[on_at] == 0.901  # the first reading above 0.90
    assert readings[off_at] == 0.879  # the first reading below 0.88
    assert all(warning[on_at:off_at])


def test_without_a_margin_the_same_readings_flap() -> None:
    """What the broker did before: every crossing flipped the state."""
    no_margin = dataclasses.replace(POLICY, disk_hysteresis_percentage_points=0.0)
    warning = [s.warning for s in fold(UP + HOVER_AT_WARNING + DOWN, no_margin)]
    assert flips(warning) >= 8


def test_forced_cleanup_stays_on_while_hovering_at_the_clean_forcibly_ratio() -> None:
    readings = [0.80, 0.851, 0.849, 0.852, 0.84, 0.8499, 0.831, 0.855, 0.8301, 0.8299, 0.82]
    states = fold(readings)
    forcibly = [s.forcibly for s in states]
    assert flips(forcibly) == 2
    assert forcibly.index(True) == 1
    assert forcibly.index(False, 1) == readings.index(0.8299)
    assert [s.clean_at_once for s in states] == forcibly
    assert not any(s.warning for s in states)


def test_expiry_at_any_hour_stays_on_while_hovering_at_the_max_used_ratio() -> None:
    readings = [0.70, 0.751, 0.749, 0.7501, 0.74, 0.731, 0.7299, 0.74, 0.751]
    space_delete = [s.space_delete for s in fold(readings)]
    assert space_delete == [False, True, True, True, True, True, False, False, True]


def test_leaving_the_warning_level_keeps_the_clean_forcibly_level() -> None:
    """Below the warning ratio's margin but above the clean-forcibly one's: cleanup is still
    forced (and unconsumed messages would still refuse writes)."""
    (*_, state) = fold([0.91, 0.87])
    assert not state.warning
    assert state.forcibly


def test_raising_a_ratio_clears_its_level_at_once() -> None:
    """An operator who raises the warning ratio above the usage (admin API) is not held back
    by the margin of the old ratio."""
    (on,) = fold([0.91])
    raised = dataclasses.replace(POLICY, disk_warning_ratio=0.95, disk_clean_forcibly_ratio=0.94)
    assert not space_state(0.91, raised, forcibly_enabled=True, previous=on).warning


# ---------------------------------------------------------------------------- the store
def noon_ms() -> int:
    """A local time outside deleteWhen ("04"): only disk pressure can trigger a deletion."""
    when = dt.datetime.now().astimezone().replace(hour=12, minute=0, second=0, microsecond=0)
    return int(when.timestamp() * 1000)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    config = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    with MessageStore(config).open() as opened:
        yield opened


def put(store: MessageStore) -> bool:
    """One producer write; whether it was accepted."""
    try:
        store.put_message(Message(topic=TOPIC, body=b"x" * 100))
    except DiskFull:
        return False
    return True


def reading(ratio: float, path: str) -> float:
    """A ratio probe that measures ``ratio`` whatever the disk."""
    return ratio


def passes(store: MessageStore, readings: list[float]) -> list[bool]:
    """One cleanup pass per reading, then a write; which writes were accepted."""
    accepted = []
    for ratio in readings:
        store.cleaner.ratio_probe = functools.partial(reading, ratio)
        store.cleaner.run(manual=False, now_ms=noon_ms())
        accepted.append(put(store))
    return accepted


def test_a_store_hovering_at_the_warning_ratio_refuses_until_below_the_margin(
    store: MessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    readings = UP + HOVER_AT_WARNING + DOWN
    with caplog.at_level(logging.INFO, logger="gannet.node.store.upkeep.cleaning"):
        accepted = passes(store, readings)
    refused_from = readings.index(0.901)
    accepted_from = readings.index(0.879)
    assert accepted == [not refused_from <= i < accepted_from for i in range(len(readings))]
    messages = [r.getMessage() for r in caplog.records]
    refusals = [m for m in messages if m.startswith("disk full")]
    assert refusals == [
        f"disk full: {store.config.root_dir} is 90.1% used, above the warning ratio (90%); "
        "writes are refused until cleanup frees space (accepted again below 88%) — free disk "
        "space, lower --file-reserved-hours or raise --disk-warning-ratio"
    ]
    resumed = [m for m in messages if "writes are accepted again" in m]
    assert len(resumed) == 1
    assert "is 87.9%" in resumed[0]
    assert "warning ratio 90% until below 88%" in resumed[0]
    pressure = [m for m in messages if m.startswith("disk pressure")]
    assert len(pressure) == 2  # forced cleanup started once (at 0.86) and ended once (0.829)
    assert "86% used, above the clean-forcibly ratio (85%)" in pressure[0]
    assert "82.9% used, below 83%" in pressure[1]


def test_a_refusal_within_the_margin_says_so(store: MessageStore) -> None:
    assert passes(store, [0.91, 0.895]) == [False, False]
    text = store.disk_full_reason
    assert "89.5% used, not yet below 88% after rising above the warning ratio (90%)" in text


def test_unconsumed_messages_hold_writes_while_hovering_at_the_clean_forcibly_ratio(
    store: MessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(240):  # five 64 KiB files
        store.put_message(Message(topic=TOPIC, body=b"o" * 1000))
    assert store.wait_dispatched(store.commitlog.max_offset())
    store.consumer_offsets.commit("Workers", TOPIC, 0, 3)  # a group far behind
    readings = [0.851, 0.849, 0.852, 0.8401, 0.8302, 0.86]
    with caplog.at_level(logging.ERROR, logger="gannet.node.store.upkeep.cleaning"):
        accepted = passes(store, readings)
    assert accepted == [False] * len(readings)
    refusals = [r.getMessage() for r in caplog.records if "disk full" in r.getMessage()]
    assert len(refusals) == 1
    assert "85.1% used, above the clean-forcibly ratio (85%)" in refusals[0]
    assert "Workers" in refusals[0]
    assert passes(store, [0.829]) == [True]  # below 83 %: forced cleanup and refusal end
