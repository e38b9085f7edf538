"""gannet.operator.events: which condition changes become Events, and the Event's shape."""

from __future__ import annotations

import datetime as dt

from gannet.operator import events


def test_only_changed_conditions_become_events_warning_unless_true() -> None:
    before = [
        {"type": "Ready", "status": "True", "reason": "Reconciled", "message": "ok"},
        {"type": "Scaling", "status": "True", "reason": "Reconciled", "message": "3"},
    ]
    after = [
        {"type": "Ready", "status": "False", "reason": "NotSupported", "message": "shrink"},
        {"type": "Scaling", "status": "True", "reason": "Reconciled", "message": "3"},
        {"type": "Monitoring", "status": "True", "reason": "Reconciled", "message": ""},
    ]
    assert events.from_conditions(before, after) == [
        events.Event("Warning", "NotSupported", "Ready=False: shrink"),
        events.Event("Normal", "Reconciled", "Monitoring=True"),
    ]
    assert events.from_conditions(after, after) == []


def test_event_body_names_the_resource_and_cuts_long_messages() -> None:
    meta = {"name": "orders", "namespace": "demo", "uid": "u-1", "resourceVersion": "7"}
    now = dt.datetime(2026, 3, 1, 4, 0, tzinfo=dt.UTC)
    body = events.body("Topic", meta, events.Event("Normal", "Created", "x" * 5000), now=now)
    assert body["involvedObject"] == {
        "apiVersion": "gannet.io/v1alpha1",
        "kind": "Topic",
        "name": "orders",
        "namespace": "demo",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert body["metadata"]["name"].startswith("orders.")
    assert body["metadata"]["namespace"] == "demo"
    assert len(body["message"]) == events.MESSAGE_MAX
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-03-01T04:00:00Z"


def test_a_pass_keeps_a_bounded_number_of_events() -> None:
    pending = events.Pending()
    for i in range(events.PER_PASS_MAX + 5):
        pending.normal("Step", str(i))
    assert len(pending.events) == events.PER_PASS_MAX
