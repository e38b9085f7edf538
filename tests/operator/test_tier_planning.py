"""The ``TierOffload`` condition and the Events it yields (pure): a Warning once per change of
failure reason, not once per pass; ``TierCredentialsRejected`` said once; a Normal when offload
recovers; nothing new while a leader does not answer or has not run a pass."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gannet.operator import conditions, events, tier_planning
from gannet.operator.tier_planning import TierView

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
OK = TierView(enabled=True, passes_total=3)


def failing(reason: str, error: str, passes: int = 3) -> TierView:
    return TierView(enabled=True, passes_total=passes, failing_reason=reason, last_error=error)


def run(
    answers: list[dict[str, TierView | None]],
) -> tuple[list[dict[str, Any]], list[events.Event]]:
    """Reconcile passes over ``answers``; the conditions after the last and every Event."""
    found: list[dict[str, Any]] = []
    posted: list[events.Event] = []
    for views in answers:
        previous = conditions.find(found, tier_planning.TIER_OFFLOAD)
        condition = tier_planning.tier_condition(views, previous)
        after = (
            found
            if condition is None
            else conditions.merge(found, condition, generation=1, now=NOW)
        )
        posted += events.from_conditions(found, after)
        found = after
    return found, posted


def test_an_unreachable_bucket_posts_one_warning_however_many_passes_fail() -> None:
    passes: list[dict[str, TierView | None]] = [
        {"broker-0": failing("unavailable", f"unavailable: connect timeout after {i} ms")}
        for i in range(5)
    ]
    found, posted = run(passes)
    assert [(e.type, e.reason) for e in posted] == [("Warning", "TierOffloadFailing")]
    assert "broker-0: unavailable" in posted[0].message
    assert "connect timeout after 0 ms" in posted[0].message
    (condition,) = found
    assert (condition["status"], condition["reason"]) == ("False", "TierOffloadFailing")


def test_credentials_rejected_is_said_once_and_names_the_secret() -> None:
    rejected = failing("credentials", "credentials: 403 InvalidAccessKeyId")
    _, posted = run([{"broker-0": rejected}] * 4)
    assert [(e.type, e.reason) for e in posted] == [("Warning", "TierCredentialsRejected")]
    assert "spec.tier.credentialsSecret" in posted[0].message


def test_a_new_reason_or_recovery_posts_again() -> None:
    _, posted = run(
        [
            {"broker-0": OK},
            {"broker-0": failing("unavailable", "unavailable: refused")},
            {"broker-0": failing("unavailable", "unavailable: refused again")},
            {"broker-0": failing("gap", "gap: the oldest local file starts after the tier")},
            {"broker-0": OK},
        ]
    )
    assert [(e.type, e.reason) for e in posted] == [
        ("Normal", "Offloading"),
        ("Warning", "TierOffloadFailing"),
        ("Warning", "TierOffloadFailing"),
        ("Normal", "Offloading"),
    ]
    assert "broker-0: gap" in posted[2].message


def test_credentials_win_over_other_groups_failures() -> None:
    views: dict[str, TierView | None] = {
        "broker-0": failing("unavailable", "unavailable: x"),
        "broker-1": failing("credentials", "credentials: 403"),
    }
    condition = tier_planning.tier_condition(views, None)
    assert condition is not None
    assert condition.reason == "TierCredentialsRejected"
    assert "broker-1: credentials" in condition.message
    assert "broker-0" not in condition.message


def test_no_answer_or_no_pass_yet_changes_nothing() -> None:
    assert tier_planning.tier_condition({"broker-0": None}, None) is None
    assert tier_planning.tier_condition({"broker-0": TierView(enabled=True)}, None) is None
    # One group fine, another silent: a failing state is not cleared by the silence.
    assert tier_planning.tier_condition({"broker-0": OK, "broker-1": None}, None) is None
    found, posted = run(
        [{"broker-0": failing("unavailable", "unavailable: x")}, {"broker-0": None}]
    )
    assert len(posted) == 1
    assert found[0]["status"] == "False"


def test_brokers_without_a_tier_yet_are_unknown() -> None:
    """A pod not rolled yet runs without --tier-*: the condition says so (Unknown)."""
    condition = tier_planning.tier_condition(
        {"broker-0": OK, "broker-1": TierView(enabled=False)}, None
    )
    assert condition is not None
    assert (condition.status, condition.reason) == (None, "TierNotServed")
    assert "broker-1" in condition.message


def test_status_rows_summarise_the_groups_that_answered() -> None:
    views: dict[str, TierView | None] = {
        "broker-1": failing("unavailable", "x"),
        "broker-0": TierView(
            enabled=True, passes_total=4, objects=3, size_bytes=3 << 20, last_success_ms=1_000
        ),
        "broker-2": None,
        "broker-3": TierView(enabled=False),
    }
    assert tier_planning.status_rows(views) == [
        {
            "brokerName": "broker-0",
            "objects": 3,
            "bytes": 3 << 20,
            "lastSuccessTime": "1970-01-01T00:00:01Z",
            "failingReason": None,
        },
        {
            "brokerName": "broker-1",
            "objects": 0,
            "bytes": 0,
            "lastSuccessTime": None,
            "failingReason": "unavailable",
        },
    ]
