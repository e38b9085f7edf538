"""Broker groups on Kubernetes, pure parts: the grow/drain planner
(:mod:`gannet.operator.broker_group_planning`), the per-group objects and seeds
(:mod:`gannet.operator.manifests`) and ``spec.brokerGroups`` (:mod:`gannet.operator.specs`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.protocol import credentials
from gannet.node.protocol.grants import Action
from gannet.operator import broker_group_manifests, cluster_key, manifests, member_pods, specs
from gannet.operator import broker_group_planning as bgp
from gannet.operator import membership_planning as mp
from gannet.operator import topic_planning as tp
from gannet.operator.specs import Permission

RW, RO = Permission.ReadWrite, Permission.ReadOnly


def topic(name: str, permission: Permission = RW, queues: int = 4) -> bgp.TopicDef:
    return bgp.TopicDef(name, queues, permission, "NORMAL")


def group(name: str) -> bgp.GroupDef:
    return bgp.GroupDef(name, False, 16)


# ---------------------------------------------------------------- spec
def test_broker_groups_default_to_one_and_are_bounded() -> None:
    assert specs.cluster_spec({}).broker_groups == 1
    assert specs.cluster_spec({"brokerGroups": 3}).broker_groups == 3
    for bad in (0, specs.BROKER_GROUPS_MAX + 1):
        with pytest.raises(specs.SpecError, match=r"spec\.brokerGroups is"):
            specs.cluster_spec({"brokerGroups": bad})


SECURED_GROUPS = {
    "brokerGroups": 2,
    "security": {
        "auth": {"enabled": True, "credentialsSecret": "creds"},
        "tls": {"enabled": True, "secretName": "client-certs"},
    },
}


def _env(sts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


def test_secured_groups_get_the_cluster_key_and_the_cluster_ca() -> None:
    """Auth and TLS with several groups: every member of every group signs its polls with the
    cluster key (env from the one Secret) and trusts the client TLS Secret's CA."""
    spec = specs.cluster_spec(SECURED_GROUPS)
    zero = manifests.build("main", "demo", "uid-1", spec, replicas=3)
    one = broker_group_manifests.group_objects("main", "demo", "uid-1", spec, group=1, replicas=3)
    for objects in (zero, one):
        sts = next(o for o in objects if o["kind"] == "StatefulSet")
        env = _env(sts)
        for name, key in (
            ("GANNET_CLUSTER_ACCESS_KEY", "accessKey"),
            ("GANNET_CLUSTER_SECRET_KEY", "secretKey"),
        ):
            ref = {"secretKeyRef": {"name": "main-cluster-key", "key": key}}
            assert env[name] == {"name": name, "valueFrom": ref}
        ca = {"name": "GANNET_CLUSTER_TLS_CA", "value": f"{manifests.TLS_DIR}/ca.crt"}
        assert env["GANNET_CLUSTER_TLS_CA"] == ca
        volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
        sources = volumes["auth"]["projected"]["sources"]
        assert [s["secret"]["name"] for s in sources] == ["creds", "main-cluster-key"]
        item = {"key": cluster_key.ACCOUNTS_FILE, "path": cluster_key.ACCOUNTS_FILE}
        assert sources[1]["secret"]["items"] == [item]
        kubernetes_validate.validate(sts, "1.33", strict=True)


def test_the_cluster_key_secret_holds_an_admin_key_the_broker_loads(tmp_path: Path) -> None:
    """The generated Secret's credentials file, as the broker reads it from the auth directory
    next to the user's file, grants the env's key admin."""
    secret = manifests.generated_cluster_key("main", "demo", "uid-1", "s3cr3t-value-0123456789")
    kubernetes_validate.validate(secret, "1.33", strict=True)
    assert secret["metadata"]["name"] == "main-cluster-key"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    data = secret["stringData"]
    (tmp_path / "user.json").write_text(json.dumps({"accounts": []}))
    (tmp_path / cluster_key.ACCOUNTS_FILE).write_text(data[cluster_key.ACCOUNTS_FILE])
    accounts = credentials.load(tmp_path)
    account = accounts[data["accessKey"]]
    assert account.secret_key == data["secretKey"]
    assert [Action.ADMIN in g.actions for g in account.grants] == [True]


def test_no_cluster_key_without_auth_and_no_cluster_ca_without_tls() -> None:
    def cluster_env(security: dict[str, Any]) -> list[str]:
        spec = specs.cluster_spec({"brokerGroups": 2, "security": security})
        objects = manifests.build("main", "demo", "u", spec, replicas=3)
        sts = next(o for o in objects if o["kind"] == "StatefulSet")
        return [name for name in _env(sts) if name.startswith("GANNET_CLUSTER_")]

    assert cluster_env({}) == []
    assert cluster_env({"tls": {"enabled": True, "secretName": "c"}}) == ["GANNET_CLUSTER_TLS_CA"]


# ---------------------------------------------------------------- objects
def test_group_zero_keeps_every_name_of_a_one_group_cluster() -> None:
    spec = specs.cluster_spec({"brokerGroups": 2})
    zero = manifests.build("main", "demo", "uid-1", spec, replicas=3)
    names = {(o["kind"], o["metadata"]["name"]) for o in zero}
    assert ("StatefulSet", "main") in names
    assert ("Service", "main-peers") in names
    assert ("Service", "main-client") in names
    assert ("PodDisruptionBudget", "main") in names
    sts = next(o for o in zero if o["kind"] == "StatefulSet")
    assert sts["spec"]["selector"]["matchLabels"] == manifests.selector_labels("main")
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GANNET_BROKER_NAME"] == "broker-0"


def test_group_objects_are_named_per_group_and_owned_by_the_cluster() -> None:
    spec = specs.cluster_spec({"brokerGroups": 3, "replicas": 3})
    objects = broker_group_manifests.group_objects(
        "main", "demo", "uid-1", spec, group=2, replicas=3
    )
    names = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert names == [
        ("NetworkPolicy", "main-g2-peers"),
        ("PodDisruptionBudget", "main-g2"),
        ("Service", "main-g2-client"),
        ("Service", "main-g2-peers"),
        ("StatefulSet", "main-g2"),
    ]
    for obj in objects:
        owner = obj["metadata"]["ownerReferences"][0]
        # The garbage collector looks the owner up by name: it must be the GannetCluster's.
        assert (owner["name"], owner["uid"]) == ("main", "uid-1")
        assert obj["metadata"]["labels"][manifests.CLUSTER_LABEL] == "main"
        assert obj["metadata"]["labels"][manifests.GROUP_LABEL] == "2"
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["GANNET_BROKER_NAME"] == "broker-2"
    assert sts["spec"]["serviceName"] == "main-g2-peers"
    # Group 0's selector must not match group 2's pods (and the other way round).
    zero = manifests.selector_labels("main")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in zero.items())
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["members"]["configMap"]["name"] == "main-g2-members"
    assert volumes["groups"]["configMap"] == {"name": "main-groups", "optional": True}
    assert pod["containers"][0]["envFrom"] == [{"configMapRef": {"name": "main-config"}}]


def test_each_group_has_its_own_roster_and_raft_peers() -> None:
    roster = mp.bootstrap_roster(3)
    data = member_pods.config_map("main-g1", "demo", "uid-1", roster, owner=("main", 1))
    assert data["metadata"]["name"] == "main-g1-members"
    assert data["metadata"]["ownerReferences"][0]["name"] == "main"
    line = data["data"]["main-g1-0"]
    assert "main-g1-0.main-g1-peers.demo.svc:8091" in line
    assert "main-0.main-peers" not in line


def test_seeds_point_each_group_at_the_others_client_services() -> None:
    cm = broker_group_manifests.groups_config_map("main", "demo", "uid-1", 3)
    assert cm["metadata"]["name"] == "main-groups"
    assert cm["data"] == {
        "broker-0": "main-g1-client.demo.svc:8081,main-g2-client.demo.svc:8081",
        "broker-1": "main-client.demo.svc:8081,main-g2-client.demo.svc:8081",
        "broker-2": "main-client.demo.svc:8081,main-g1-client.demo.svc:8081",
    }


def test_a_drained_group_leaves_nothing_behind_but_its_claims() -> None:
    keys = broker_group_manifests.group_object_keys("main", 1)
    spec = specs.cluster_spec({"brokerGroups": 2})
    built = {
        (o["apiVersion"], o["kind"], o["metadata"]["name"])
        for o in broker_group_manifests.group_objects(
            "main", "demo", "u", spec, group=1, replicas=3
        )
    }
    assert built <= set(keys)
    assert ("v1", "ConfigMap", "main-g1-members") in keys


def test_a_group_name_held_by_another_cluster_is_not_taken_over() -> None:
    spec = specs.cluster_spec({"brokerGroups": 2})
    ours = broker_group_manifests.group_objects("a", "demo", "uid-a", spec, group=1, replicas=3)[3]
    assert broker_group_manifests.foreign_owner(ours, "uid-a") is None
    assert broker_group_manifests.foreign_owner(None, "uid-a") is None
    # A GannetCluster named "a-g1" owns a StatefulSet "a-g1" too.
    theirs = manifests.build("a-g1", "demo", "uid-b", spec, replicas=3)
    sts = next(o for o in theirs if o["kind"] == "StatefulSet")
    assert broker_group_manifests.foreign_owner(sts, "uid-a") == "GannetCluster a-g1"
    assert broker_group_manifests.foreign_owner({"metadata": {}}, "uid-a") == "no controlling owner"


# ---------------------------------------------------------------- grow
def test_a_new_group_gets_every_definition_the_others_hold() -> None:
    zero = bgp.GroupState(0, "l0", (topic("orders"), topic("audit")), (group("billing"),))
    one = bgp.GroupState(1, "l1", (topic("audit"),), ())
    missing = bgp.missing_definitions(one, [zero, one])
    assert missing == bgp.CreateDefinitions(1, (topic("orders"),), (group("billing"),))
    assert bgp.missing_definitions(zero, [zero, one]) is None


def test_a_group_without_a_leader_is_not_written_to() -> None:
    zero = bgp.GroupState(0, "l0", (topic("orders"),))
    assert bgp.missing_definitions(bgp.GroupState(1, ""), [zero]) is None
    # nor copied from
    assert bgp.missing_definitions(bgp.GroupState(1, "l1"), [bgp.GroupState(0, "")]) is None


def test_a_drain_undone_gets_group_zeros_permissions_back() -> None:
    zero = bgp.GroupState(0, "l0", (topic("orders"), topic("audit", RO)))
    one = bgp.GroupState(1, "l1", (topic("orders", RO), topic("audit", RO), topic("extra", RO)))
    assert bgp.permissions_to_restore(one, zero) == ((topic("orders", RO), RW),)
    assert bgp.permissions_to_restore(zero, zero) == ()
    assert bgp.permissions_to_restore(bgp.GroupState(1, ""), zero) == ()


# ---------------------------------------------------------------- drain
def test_drain_makes_topics_read_only_first() -> None:
    draining = bgp.GroupState(1, "l1", (topic("orders"), topic("old", RO)))
    step = bgp.drain_step(draining, [draining])
    assert step == bgp.MakeReadOnly(1, (topic("orders"),))
    assert bgp.read_only(RW) is RO
    assert bgp.read_only(Permission.WriteOnly) is Permission.Deny


def test_drain_waits_for_every_subscriber_and_names_it() -> None:
    zero = bgp.GroupState(
        0, "l0", (topic("orders"),), subscriptions={"billing": frozenset({"orders"})}
    )
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("orders", RO), topic("audit", RO)),
        subscriptions={"audit-reader": frozenset({"audit"})},
        lag={("audit-reader", "audit"): 3},
        messages={"orders": 7, "audit": 5},
    )
    step = bgp.drain_step(draining, [zero, draining])
    # billing never consumed on broker-1: its lag there is all 7 messages of orders.
    assert step == bgp.WaitForLag(1, (("billing", "orders", 7), ("audit-reader", "audit", 3)))
    assert isinstance(step, bgp.WaitForLag)
    text = step.message("broker-1")
    assert "billing on orders: 7" in text
    assert "audit-reader on audit: 3" in text
    assert "10 messages" in text


def test_drain_deletes_only_at_lag_zero_and_only_with_a_leader() -> None:
    done = bgp.GroupState(
        1,
        "l1",
        (topic("orders", RO),),
        subscriptions={"billing": frozenset({"orders"})},
        lag={("billing", "orders"): 0},
        messages={"orders": 9},
    )
    assert bgp.drain_step(done, [done]) == bgp.DeleteGroup(1)
    assert bgp.drain_step(bgp.GroupState(1, ""), [done]) == bgp.WaitForLeader(1)


def test_draining_groups_are_the_highest_beyond_the_wanted_count() -> None:
    assert bgp.draining_groups(1, [1, 2]) == [2, 1]
    assert bgp.draining_groups(3, [1, 2]) == []


@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["t1", "t2"])),
        st.integers(0, 5),
    ),
    st.dictionaries(st.sampled_from(["t1", "t2"]), st.integers(0, 9)),
)
def test_a_group_is_never_deleted_while_a_subscriber_has_lag(
    lag: dict[tuple[str, str], int], messages: dict[str, int]
) -> None:
    subs: dict[str, set[str]] = {}
    for consumer, name in lag:
        subs.setdefault(consumer, set()).add(name)
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("t1", RO), topic("t2", RO)),
        subscriptions={c: frozenset(t) for c, t in subs.items()},
        lag=lag,
        messages=messages,
    )
    step = bgp.drain_step(draining, [draining])
    # A topic nobody subscribes still holds the drain while it has messages there.
    unread = sum(n for t, n in messages.items() if not any(t in s for s in subs.values()))
    if any(n > 0 for n in lag.values()) or unread:
        assert isinstance(step, bgp.WaitForLag)
        assert step.total == sum(lag.values())
        assert step.unconsumed_total == unread
    else:
        assert step == bgp.DeleteGroup(1)


def test_drain_waits_for_messages_no_consumer_group_has_consumed_and_names_the_topic() -> None:
    zero = bgp.GroupState(
        0, "l0", (topic("orders"),), subscriptions={"billing": frozenset({"orders"})}
    )
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("orders", RO), topic("audit", RO), topic("empty", RO)),
        subscriptions={"billing": frozenset({"orders"})},
        lag={("billing", "orders"): 0},
        messages={"orders": 4, "audit": 7, "empty": 0},
    )
    step = bgp.drain_step(draining, [zero, draining])
    assert step == bgp.WaitForLag(1, (), (("audit", 7),))
    assert isinstance(step, bgp.WaitForLag)
    text = step.message("broker-1")
    assert text.startswith("draining broker-1: waiting for messages of topics no consumer group")
    assert "(audit: 7; 7 messages in all: consume them with a consumer group" in text
    assert "lag" not in text
    # Once some consumer group consumed audit anywhere, its lag counts instead.
    zero_reads = dataclasses.replace(zero, subscriptions={"auditor": frozenset({"audit"})})
    step = bgp.drain_step(draining, [zero_reads, draining])
    assert step == bgp.WaitForLag(1, (("auditor", "audit", 7),))
    assert isinstance(step, bgp.WaitForLag)
    assert "auditor on audit: 7" in step.message("broker-1")
    # Retention removed them (min offset reached max): nothing is left to wait for.
    gone = dataclasses.replace(draining, messages={"orders": 4, "audit": 0})
    assert bgp.drain_step(gone, [zero, gone]) == bgp.DeleteGroup(1)


def test_drain_waits_for_retry_and_dead_letter_messages_listtopics_leaves_out() -> None:
    """A retry topic is consumed by its consumer group; a dead-letter topic by whoever reads it.
    Both live in the group's store, so deleting the group before they are read loses them."""
    retry, dlq = "%RETRY%billing_orders", "%DLQ%billing"
    zero = bgp.GroupState(
        0, "l0", (topic("orders"),), subscriptions={"billing": frozenset({"orders", retry})}
    )
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("orders", RO),),
        subscriptions={"billing": frozenset({"orders", retry})},
        lag={("billing", "orders"): 0, ("billing", retry): 2},
        messages={"orders": 4, retry: 2, dlq: 3},
    )
    assert draining.drained_topics() == {"orders", retry, dlq}
    step = bgp.drain_step(draining, [zero, draining])
    assert step == bgp.WaitForLag(1, (("billing", retry, 2),), ((dlq, 3),))
    assert isinstance(step, bgp.WaitForLag)
    text = step.message("broker-1")
    assert f"billing on {retry}: 2" in text
    assert f"{dlq}: 3" in text
    # The retry messages consumed and the dead letters removed: the drain may finish.
    done = dataclasses.replace(
        draining, lag={("billing", "orders"): 0, ("billing", retry): 0}, messages={dlq: 0}
    )
    assert bgp.drain_step(done, [zero, done]) == bgp.DeleteGroup(1)


def test_drain_waits_for_delayed_and_prepared_messages_outside_the_queues() -> None:
    """Delayed messages in the draining group's timer wheel and prepared transactions land in
    its queues later (when due, when committed): the group is not deleted before, and the
    condition names each topic, count and the last due time."""
    due_ms = 1_795_654_923_000  # 2026-11-26T01:02:03Z
    zero = bgp.GroupState(0, "l0", (topic("Orders"),), subscriptions={"billing": frozenset()})
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("Orders", RO), topic("Pay", RO)),
        subscriptions={"billing": frozenset({"Orders", "Pay"})},
        lag={("billing", "Orders"): 0, ("billing", "Pay"): 0},
        messages={"Orders": 5, "Pay": 1},
        undelivered={
            "Orders": bgp.Undelivered(delayed=3, last_due_ms=due_ms),
            "Pay": bgp.Undelivered(prepared=2),
        },
    )
    step = bgp.drain_step(draining, [zero, draining])
    assert isinstance(step, bgp.WaitForLag)
    assert step.pending == ()
    assert step.unconsumed == ()
    assert [t for t, _ in step.held] == ["Orders", "Pay"]
    text = step.message("broker-1")
    assert "3 delayed messages in topic Orders, last due 2026-11-26T01:02:03Z" in text
    assert "2 prepared transactions in topic Pay" in text
    # Delivered: they are messages in the queues now, waited for as lag until consumed.
    delivered = dataclasses.replace(
        draining,
        lag={("billing", "Orders"): 3, ("billing", "Pay"): 2},
        undelivered={"Orders": bgp.Undelivered(), "Pay": bgp.Undelivered()},
    )
    step = bgp.drain_step(delivered, [zero, delivered])
    assert isinstance(step, bgp.WaitForLag)
    assert step.held == ()
    assert step.total == 5
    consumed = dataclasses.replace(delivered, lag={("billing", "Orders"): 0, ("billing", "Pay"): 0})
    assert bgp.drain_step(consumed, [zero, consumed]) == bgp.DeleteGroup(1)


def test_drain_waits_while_the_timer_wheel_is_not_counted() -> None:
    """A member that does not run the timer wheel (no leader yet, an older broker) cannot say
    what it holds: unknown is not zero, so the drain waits and says why."""
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("Orders", RO),),
        messages={"Orders": 0},
        undelivered={"Orders": bgp.Undelivered(counted=False)},
    )
    step = bgp.drain_step(draining, [draining])
    assert isinstance(step, bgp.WaitForLag)
    assert "delayed messages of Orders not counted" in step.message("broker-1")
    counted = dataclasses.replace(draining, undelivered={"Orders": bgp.Undelivered()})
    assert bgp.drain_step(counted, [counted]) == bgp.DeleteGroup(1)


def test_drain_waits_for_delayed_messages_of_a_retry_topic() -> None:
    """Retry and dead-letter topics hold delayed messages too; they are drained topics."""
    retry = "%RETRY%billing_Orders"
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("Orders", RO),),
        messages={"Orders": 0, retry: 0},
        undelivered={retry: bgp.Undelivered(delayed=1, last_due_ms=1_000)},
    )
    step = bgp.drain_step(draining, [draining])
    assert isinstance(step, bgp.WaitForLag)
    assert f"1 delayed messages in topic {retry}, last due 1970-01-01T00:00:01Z" in (
        step.message("broker-1")
    )


# ---------------------------------------------------------------- Topic resources during a drain
def test_a_topic_change_during_a_drain_never_makes_the_draining_group_writable() -> None:
    update = tp.UpdateTopic("orders", 8, RW, None)
    # No drain: sent as it is (group 0 fans it out to every group).
    assert tp.scope_to_serving(update, [0, 1], []) is update
    scoped = tp.scope_to_serving(update, [0, 1], [2])
    # Queues still go everywhere, the permission to the serving groups alone.
    assert scoped == tp.ScopedUpdate("orders", tp.UpdateTopic("orders", 8, None, None), RW, (0, 1))
    only_perm = tp.scope_to_serving(tp.UpdateTopic("orders", None, RW, None), [0], [1])
    assert only_perm == tp.ScopedUpdate("orders", None, RW, (0,))
    create = tp.CreateTopic("audit", 4, RW, "NORMAL")
    assert tp.scope_to_serving(create, [0, 1], [2]) == tp.ScopedCreate(create, (0, 1))


@given(
    st.lists(st.integers(0, 5), unique=True),
    st.integers(1, 6),
    st.sampled_from(list(Permission)),
    st.booleans(),
)
def test_no_scoped_topic_write_reaches_a_draining_group(
    present: list[int], desired: int, permission: Permission, leaders: bool
) -> None:
    rows = [{"group": g, "leader": f"p{g}" if leaders else ""} for g in present]
    serving, draining = bgp.groups_of_status(desired, rows)
    assert 0 in serving
    assert set(draining) == {g for g in present if g >= desired}
    scoped = tp.scope_to_serving(tp.UpdateTopic("t", None, permission, None), serving, draining)
    if draining:
        assert isinstance(scoped, tp.ScopedUpdate)
        assert not set(scoped.groups) & set(draining)
        assert scoped.fanned_out is None or scoped.fanned_out.permission is None


def test_groups_of_status_leaves_out_serving_groups_without_a_leader() -> None:
    rows = [
        {"group": 0, "leader": ""},
        {"group": 1, "leader": "wide-g1-0"},
        {"group": 2, "leader": ""},
        {"group": 3, "leader": "wide-g3-0"},
    ]
    assert bgp.groups_of_status(3, rows) == ([0, 1], [3])
    assert bgp.groups_of_status(1, []) == ([0], [])


def test_drain_waits_for_pops_not_settled_and_says_so() -> None:
    """A popped message's offset has moved on once its checkpoint is written; until revive
    has matched the checkpoint with an ack (or redelivered the message to the retry topic) it
    is only in the revive topic: the group is not deleted meanwhile."""
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("Orders", RO),),
        subscriptions={"billing": frozenset({"Orders"})},
        lag={("billing", "Orders"): 0},
        messages={"Orders": 4},
        pops=bgp.UnsettledPops(parked=2, backlog=1),
    )
    step = bgp.drain_step(draining, [draining])
    assert isinstance(step, bgp.WaitForLag)
    assert (step.pending, step.unconsumed, step.held) == ((), (), ())
    text = step.message("broker-1")
    assert "lag" not in text
    assert "for pops not settled (2 checkpoints and acks waiting for the popped" in text
    assert "1 in the revive queues" in text
    unknown = dataclasses.replace(draining, pops=bgp.UnsettledPops(counted=False))
    step = bgp.drain_step(unknown, [unknown])
    assert isinstance(step, bgp.WaitForLag)
    assert "pops not settled (not counted" in step.message("broker-1")
    settled = dataclasses.replace(draining, pops=bgp.UnsettledPops())
    assert bgp.drain_step(settled, [settled]) == bgp.DeleteGroup(1)


def test_a_retry_topic_known_only_from_lag_holds_the_drain() -> None:
    """Revive can create a group's retry topic while the operator reads (after it listed the
    topics): the lag read afterwards names it, and that is enough to wait for it."""
    retry = "%RETRY%billing_Orders"
    draining = bgp.GroupState(
        1,
        "l1",
        (topic("Orders", RO),),
        subscriptions={"billing": frozenset({"Orders", retry})},
        lag={("billing", "Orders"): 0, ("billing", retry): 1},
        messages={"Orders": 4},
    )
    step = bgp.drain_step(draining, [draining])
    assert isinstance(step, bgp.WaitForLag)
    assert step.pending == (("billing", retry, 1),)
