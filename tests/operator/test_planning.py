"""Pure planning: Topic and ConsumerGroup plans, claims (conflicts), conditions."""

from __future__ import annotations

import dataclasses
import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from gannet.operator import claims, conditions, consumer_group_planning, specs, topic_planning
from gannet.operator.specs import Permission

NOW = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


def topic(**spec: object) -> specs.TopicSpec:
    return specs.topic_spec("orders", {"cluster": "main", **spec})


def observed(queues: int = 8, perm: Permission = Permission.ReadWrite, kind: str = "NORMAL"):
    return topic_planning.BrokerTopic("orders", queues, perm, kind)


def test_missing_topic_is_created_with_the_spec() -> None:
    plan = topic_planning.plan(
        topic(queues=4, messageType="FIFO"), None, held_name=None, winner=None, resource="orders"
    )
    assert plan.action == topic_planning.CreateTopic("orders", 4, Permission.ReadWrite, "FIFO")
    assert (plan.condition.status, plan.condition.reason) == (True, "Reconciled")
    assert plan.holds == "orders"


def test_equal_topic_needs_nothing() -> None:
    plan = topic_planning.plan(
        topic(), observed(), held_name="orders", winner=None, resource="orders"
    )
    assert plan.action is None
    assert plan.condition.status is True


def test_growth_permission_and_type_changes_are_one_update() -> None:
    plan = topic_planning.plan(
        topic(queues=16, permission="ReadOnly", messageType="DELAY"),
        observed(),
        held_name="orders",
        winner=None,
        resource="orders",
    )
    assert plan.action == topic_planning.UpdateTopic("orders", 16, Permission.ReadOnly, "DELAY")


def test_lite_and_priority_topics_are_created_and_left_alone_once_equal() -> None:
    for kind in ("LITE", "PRIORITY"):
        plan = topic_planning.plan(
            topic(queues=4, messageType=kind), None, held_name=None, winner=None, resource="orders"
        )
        assert plan.action == topic_planning.CreateTopic("orders", 4, Permission.ReadWrite, kind)
        same = topic_planning.plan(
            topic(queues=4, messageType=kind),
            observed(queues=4, kind=kind),
            held_name="orders",
            winner=None,
            resource="orders",
        )
        assert same.action is None


def test_the_tier_retention_is_created_set_changed_and_removed() -> None:
    def plan_for(
        spec: specs.TopicSpec, broker: topic_planning.BrokerTopic | None
    ) -> topic_planning.TopicPlan:
        held = None if broker is None else "orders"
        return topic_planning.plan(spec, broker, held_name=held, winner=None, resource="orders")

    week = topic(tier={"remoteRetentionSeconds": 604800})
    assert week.tier_remote_retention_s == 604800
    created = plan_for(topic(tier={"remoteRetentionSeconds": 0}), None)
    assert created.action == topic_planning.CreateTopic(
        "orders", 8, Permission.ReadWrite, "NORMAL", 0
    )
    changed = plan_for(week, dataclasses.replace(observed(), tier_remote_retention_s=0))
    assert changed.action == topic_planning.UpdateTopic("orders", None, None, None, 604800)
    removed = plan_for(topic(), dataclasses.replace(observed(), tier_remote_retention_s=60))
    assert removed.action == topic_planning.UpdateTopic("orders", None, None, None, None, True)
    same = plan_for(week, dataclasses.replace(observed(), tier_remote_retention_s=604800))
    assert same.action is None
    # While a group drains, the retention still goes to every group.
    update = topic_planning.UpdateTopic("orders", None, Permission.ReadOnly, None, 60)
    scoped = topic_planning.scope_to_serving(update, [0, 1], [1])
    assert isinstance(scoped, topic_planning.ScopedUpdate)
    assert scoped.fanned_out == topic_planning.UpdateTopic("orders", None, None, None, 60)
    assert topic_planning.tier_retention_of({"gannet.tier.remote.retention.s": "60"}) == 60
    assert topic_planning.tier_retention_of({}) is None


@given(st.integers(1, 1024), st.integers(1, 1024))
def test_queues_never_shrink(spec_queues: int, broker_queues: int) -> None:
    plan = topic_planning.plan(
        topic(queues=spec_queues),
        observed(queues=broker_queues),
        held_name="orders",
        winner=None,
        resource="orders",
    )
    if spec_queues < broker_queues:
        assert plan.action is None
        assert (plan.condition.status, plan.condition.reason) == (False, "NotSupported")
        assert f"from {broker_queues} to {spec_queues}" in plan.condition.message
    else:
        assert plan.condition.status is True
        queues = None if plan.action is None else plan.action.queues
        assert queues == (None if spec_queues == broker_queues else spec_queues)


def test_rename_is_refused() -> None:
    plan = topic_planning.plan(
        topic(topicName="other"), observed(), held_name="orders", winner=None, resource="orders"
    )
    assert plan.action is None
    assert plan.condition.reason == "NotSupported"
    assert "renaming topic 'orders' to 'other'" in plan.condition.message


def test_loser_of_a_claim_gets_resource_conflict() -> None:
    winner = claims.Claim("first", "2026-01-01T00:00:00Z", holds=True)
    plan = topic_planning.plan(topic(), None, held_name=None, winner=winner, resource="orders")
    assert plan.action is None
    assert plan.condition.reason == "ResourceConflict"
    assert "'first'" in plan.condition.message


def test_unmanaged_and_paused_change_nothing() -> None:
    cases: list[dict[str, bool]] = [{"managed": False}, {"paused": True}]
    for kwargs in cases:
        plan = topic_planning.plan(
            topic(queues=32),
            observed(),
            held_name="orders",
            winner=None,
            resource="orders",
            **kwargs,
        )
        assert plan.action is None
        assert plan.condition.status is None


def test_only_the_managed_owner_deletes() -> None:
    assert topic_planning.should_delete(held_name="orders", managed=True, is_owner=True)
    assert not topic_planning.should_delete(held_name=None, managed=True, is_owner=True)
    assert not topic_planning.should_delete(held_name="orders", managed=False, is_owner=True)
    assert not topic_planning.should_delete(held_name="orders", managed=True, is_owner=False)


claim_strategy = st.builds(
    claims.Claim,
    resource=st.text("abc", min_size=1, max_size=3),
    created=st.sampled_from(["", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"]),
    holds=st.booleans(),
)


@given(st.lists(claim_strategy, min_size=1, max_size=6))
def test_claim_owner_is_stable_and_prefers_holders_then_age(found: list[claims.Claim]) -> None:
    winner = claims.owner(found)
    assert winner is not None
    assert winner == claims.owner(list(reversed(found)))  # order of the index does not matter
    if any(c.holds for c in found):
        assert winner.holds
    dated = [c for c in found if c.holds == winner.holds and c.created]
    if dated:
        assert winner.created == min(c.created for c in dated)
    assert claims.owner([]) is None


def group(**spec: object) -> specs.GroupSpec:
    return specs.group_spec("billing", {"cluster": "main", **spec})


def test_group_create_update_and_retry_policy() -> None:
    plan = consumer_group_planning.plan(
        group(fifo=True, maxDeliveryAttempts=3),
        None,
        held_name=None,
        winner=None,
        resource="billing",
    )
    assert plan.action == consumer_group_planning.CreateGroup("billing", True, 2)
    seen = consumer_group_planning.ObservedGroup("billing", True, 2, True, "CUSTOMIZED")
    plan = consumer_group_planning.plan(
        group(fifo=True, maxDeliveryAttempts=3, consumeEnabled=False),
        seen,
        held_name="billing",
        winner=None,
        resource="billing",
    )
    assert plan.action == consumer_group_planning.UpdateGroup("billing", None, None, False)
    plan = consumer_group_planning.plan(
        group(fifo=True, maxDeliveryAttempts=3, retryPolicy="EXPONENTIAL"),
        seen,
        held_name="billing",
        winner=None,
        resource="billing",
    )
    assert plan.action is None
    assert plan.condition.reason == "NotSupported"


def test_condition_transition_time_moves_only_on_status_change() -> None:
    first = conditions.merge(
        None, conditions.Condition("Ready", True, "Reconciled"), generation=1, now=NOW
    )
    later = NOW + dt.timedelta(minutes=5)
    same = conditions.merge(
        first, conditions.Condition("Ready", True, "Reconciled", "again"), generation=2, now=later
    )
    assert same[0]["lastTransitionTime"] == "2026-05-01T12:00:00Z"
    assert same[0]["observedGeneration"] == 2
    flipped = conditions.merge(
        same, conditions.Condition("Ready", False, "BrokerUnavailable"), generation=2, now=later
    )
    assert flipped[0]["lastTransitionTime"] == "2026-05-01T12:05:00Z"
    both = conditions.merge(
        flipped, conditions.Condition("Scaling", None, "Waiting"), generation=2, now=later
    )
    assert [c["type"] for c in both] == ["Ready", "Scaling"]
    assert both[1]["status"] == "Unknown"
