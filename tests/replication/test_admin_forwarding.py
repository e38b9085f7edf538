"""Admin writes sent to a follower are forwarded to the Raft leader (``admin_forwarding``).

In-process 3-broker groups on 127.0.0.1 (see ``conftest``; real store files and gRPC
sockets): topic, group, offset, revive-queue and membership writes sent to a follower succeed
and reach every member; the CLI takes any member as ``--endpoint``; a write while no leader
can be elected answers a retryable ``UNAVAILABLE`` within the caller's deadline, and one sent
just after the leader crashed is held until the new leader takes it; ``Cleanup`` stays on the
member called; with ``--auth-file`` a caller without the right is refused by the follower and
nothing is forwarded. Waits are on Raft conditions (``Cluster.wait``), never sleeps; the one
test of ``gannet broker run`` processes (peer secret on) runs the real ``gannet`` command and
polls the other processes' answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner

from gannet.node.api import admin_forwarding
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli import admin as admin_cli
from gannet.node.cli import root as cli
from gannet.node.protocol import auth
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

from .conftest import Cluster
from .test_cluster import _send_all
from .test_processes import DEADLINE_S, Group

pytestmark = pytest.mark.timeout(180)

CALL_S = 30.0
"""Deadline of the admin calls that must succeed (generous: a loaded 2-core machine)."""


def test_every_admin_rpc_is_forwarded_or_named_local() -> None:
    """A new admin write must be classified: forwarded to the leader, or local on purpose."""
    methods = admin_pb2.DESCRIPTOR.services_by_name["Admin"].methods_by_name
    reads = ("Get", "List", "Describe", "Query", "Pull")
    unclassified = [
        name
        for name in methods
        if name not in admin_forwarding.FORWARDED
        and name not in admin_forwarding.LOCAL_WRITES
        and not name.startswith(reads)
    ]
    assert unclassified == []
    assert admin_forwarding.is_write("ResetOffset", admin_pb2.ResetOffsetRequest(offset=1))
    assert not admin_forwarding.is_write(
        "ResetOffset", admin_pb2.ResetOffsetRequest(offset=1, dry_run=True)
    )
    assert not admin_forwarding.is_write("Cleanup", admin_pb2.CleanupRequest())


def _follower(cluster: Cluster, leader: int) -> int:
    return next(i for i in sorted(cluster.nodes) if i != leader)


def _forwarded(cluster: Cluster, node_id: int, method: str) -> int:
    forwarder = cluster.nodes[node_id].broker.messaging.forwarder  # type: ignore[union-attr]
    assert forwarder is not None
    return forwarder.stats.forwarded_total.get(method, 0)


def _settle(cluster: Cluster, leader: int) -> None:
    """Every member has committed and applied what the leader has."""
    cluster.wait_replicated(cluster.last_offset(leader))


def test_topic_group_offset_and_revive_writes_through_a_follower(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = _follower(cluster, leader)

    def admin(call: Callable[[admin_pb2_grpc.AdminStub], Any]) -> Any:
        return cluster.admin(follower, call)

    created = admin(
        lambda a: a.CreateTopic(
            admin_pb2.CreateTopicRequest(name="FwdT", queue_nums=2), timeout=CALL_S
        )
    )
    assert created.topic.write_queue_nums == 2
    assert _forwarded(cluster, follower, "CreateTopic") >= 1
    admin(
        lambda a: a.UpdateTopic(
            admin_pb2.UpdateTopicRequest(name="FwdT", queue_nums=3), timeout=CALL_S
        )
    )
    admin(
        lambda a: a.CreateGroup(
            admin_pb2.CreateGroupRequest(name="FwdG", retry_max_times=3), timeout=CALL_S
        )
    )
    admin(
        lambda a: a.UpdateGroup(
            admin_pb2.UpdateGroupRequest(name="FwdG", retry_max_times=5), timeout=CALL_S
        )
    )
    # The leader's refusal comes back with its own code and message, not as a forwarding error.
    with pytest.raises(grpc.RpcError) as exists:
        admin(lambda a: a.CreateTopic(admin_pb2.CreateTopicRequest(name="FwdT"), timeout=CALL_S))
    assert exists.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "already exists" in (exists.value.details() or "")
    with pytest.raises(grpc.RpcError) as shrink:
        admin(
            lambda a: a.UpdateTopic(
                admin_pb2.UpdateTopicRequest(name="FwdT", queue_nums=1), timeout=CALL_S
            )
        )
    assert shrink.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "only growing" in (shrink.value.details() or "")

    _send_all(cluster.endpoint(leader), "FwdT", [b"a", b"b", b"c", b"d"])
    reset = admin(
        lambda a: a.ResetOffset(
            admin_pb2.ResetOffsetRequest(group="FwdG", topic="FwdT", offset=0), timeout=CALL_S
        )
    )
    assert len(reset.queues) == 3
    revive = admin(
        lambda a: a.SetReviveQueueCount(
            admin_pb2.SetReviveQueueCountRequest(count=3), timeout=CALL_S
        )
    )
    assert revive.active_count == 3
    _settle(cluster, leader)
    for node_id in cluster.nodes:
        store = cluster.nodes[node_id].broker.store
        topic = store.topic_configs.get("FwdT")
        assert topic is not None, f"node {node_id}"
        assert topic.write_queue_nums == 3, f"node {node_id}"
        group = store.group_configs.get("FwdG")
        assert group is not None, f"node {node_id}"
        assert group.retry_max_times == 5, f"node {node_id}"
        assert set(store.consumer_offsets.query_all("FwdG", "FwdT")) == {0, 1, 2}
        revive_topics = [t for t in store.topic_configs.list() if "REVIVE" in t.topic_name]
        assert revive_topics, f"node {node_id}"
        assert all(t.read_queue_nums >= 3 for t in revive_topics), f"node {node_id}"

    admin(lambda a: a.DeleteGroup(admin_pb2.DeleteGroupRequest(name="FwdG"), timeout=CALL_S))
    admin(lambda a: a.DeleteTopic(admin_pb2.DeleteTopicRequest(name="FwdT"), timeout=CALL_S))
    _settle(cluster, leader)
    for node_id in cluster.nodes:
        store = cluster.nodes[node_id].broker.store
        assert "FwdT" not in store.topic_configs, f"node {node_id}"
        assert "FwdG" not in store.group_configs, f"node {node_id}"
    assert _forwarded(cluster, follower, "DeleteTopic") >= 1


def test_cleanup_stays_on_the_member_called(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = _follower(cluster, leader)
    before = cluster.nodes[leader].broker.store.cleaner.policy.file_reserved_hours
    wanted = before + 7
    change = admin_pb2.CleanupPolicyChange(file_reserved_hours=wanted)
    reply = cluster.admin(
        follower, lambda a: a.Cleanup(admin_pb2.CleanupRequest(change=change), timeout=CALL_S)
    )
    assert reply.policy.file_reserved_hours == wanted
    assert cluster.nodes[follower].broker.store.cleaner.policy.file_reserved_hours == wanted
    assert cluster.nodes[leader].broker.store.cleaner.policy.file_reserved_hours == before
    assert _forwarded(cluster, follower, "Cleanup") == 0


def test_cli_takes_any_member(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = _follower(cluster, leader)
    endpoint = cluster.endpoint(follower)
    runner = CliRunner()
    created = runner.invoke(
        cli.main, ["topic", "create", "CliFwd", "--queues", "2", "--endpoint", endpoint]
    )
    assert created.exit_code == 0, created.output
    assert "created" in created.output
    again = runner.invoke(cli.main, ["topic", "create", "CliFwd", "--endpoint", endpoint])
    assert again.exit_code == 5, again.output  # the leader's ALREADY_EXISTS, exit code kept
    assert "already exists" in again.output
    group = runner.invoke(cli.main, ["group", "create", "CliFwdG", "--endpoint", endpoint])
    assert group.exit_code == 0, group.output
    reset = runner.invoke(
        cli.main,
        [
            "group", "reset-offset", "CliFwdG", "CliFwd", "--to-offset", "0", "--execute",
            "-o", "json", "--endpoint", endpoint,
        ],
    )  # fmt: skip
    assert reset.exit_code == 0, reset.output
    json.loads(reset.stdout)  # -o json is still one JSON document on stdout
    _settle(cluster, leader)
    for node_id in cluster.nodes:
        store = cluster.nodes[node_id].broker.store
        assert "CliFwd" in store.topic_configs, f"node {node_id}"
        assert "CliFwdG" in store.group_configs, f"node {node_id}"


def test_membership_and_transfer_through_a_follower(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    follower = _follower(cluster, leader)
    transfer = admin_pb2.TransferLeadershipRequest(target_node_id=str(follower))
    moved = cluster.admin(follower, lambda a: a.TransferLeadership(transfer, timeout=CALL_S))
    assert moved.leader_id == str(follower)
    assert cluster.leader() == follower
    old = leader
    leader = follower
    third = next(i for i in cluster.nodes if i not in (old, leader))
    # Through a follower again (the old leader): remove the third member.
    remove = admin_pb2.RemoveMemberRequest(node_id=str(third))
    removed = cluster.admin(old, lambda a: a.RemoveMember(remove, timeout=CALL_S))
    assert {m.node_id for m in removed.members} == {str(old), str(leader)}
    for node_id in (old, leader):
        raft = cluster.raft(node_id)
        cluster.wait(node_id, lambda r=raft: third not in r.member_table.members)  # type: ignore[misc]
    assert _forwarded(cluster, old, "RemoveMember") >= 1
    # Add it back through the follower, as a learner (it still runs with its old log).
    spec = cluster.peers[third - 1]
    add = admin_pb2.AddMemberRequest(
        node_id=str(third),
        peer_endpoint=spec.peer_endpoint,
        client_endpoint=spec.client_endpoint,
        learner_only=True,
    )
    added = cluster.admin(old, lambda a: a.AddMember(add, timeout=CALL_S))
    assert str(third) in {m.node_id for m in added.members}
    for node_id in (old, leader):
        raft = cluster.raft(node_id)
        cluster.wait(node_id, lambda r=raft: third in r.member_table.members)  # type: ignore[misc]


def test_a_write_through_a_follower_is_held_across_a_leader_crash(cluster: Cluster) -> None:
    # The hold path itself, with the port kept open (no port gate): with the gate, a member
    # that knows no leader for 0.5 s answers UNAVAILABLE and closes its port, and an election
    # on a loaded machine can take longer than that (test_port_gate_processes).
    cluster.leaderless_close_after_s = None
    cluster.start_all()
    leader = cluster.leader()
    follower = _follower(cluster, leader)
    cluster.crash(leader)
    # Sent at once: the follower still names the dead leader, then none, then the new one.
    request = admin_pb2.CreateTopicRequest(name="HeldT", queue_nums=1)
    cluster.admin(follower, lambda a: a.CreateTopic(request, timeout=CALL_S))
    new = cluster.leader(sorted(cluster.nodes))
    _settle(cluster, new)
    for node_id in cluster.nodes:
        assert "HeldT" in cluster.nodes[node_id].broker.store.topic_configs


def test_no_leader_answers_unavailable_within_the_deadline(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The member keeps its port open (no port gate): what it answers while it holds a request
    # without a leader. With the gate it closes the port instead (test_port_gate_processes).
    # The CLI's call deadline is the direct call's below (3 s, not its 10 s): the member holds
    # each until just before it, and the same answer comes 7 s sooner.
    monkeypatch.setattr(admin_cli, "CALL_TIMEOUT_S", 3.0)
    cluster.leaderless_close_after_s = None
    cluster.start_all()
    leader = cluster.leader()
    follower = _follower(cluster, leader)
    for node_id in [i for i in cluster.nodes if i != follower]:
        cluster.crash(node_id)
    raft = cluster.raft(follower)
    cluster.wait(follower, lambda: raft.leader() is None)  # alone: no majority, no leader
    request = admin_pb2.CreateTopicRequest(name="NoLeader")
    with pytest.raises(grpc.RpcError) as refused:
        # Answered by the broker shortly before the deadline (a late answer would be the
        # client's own DEADLINE_EXCEEDED instead).
        cluster.admin(follower, lambda a: a.CreateTopic(request, timeout=3.0))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    assert "no Raft leader" in (refused.value.details() or "")
    assert "retry" in (refused.value.details() or "")
    # The CLI says what the broker said (not "cannot reach a broker"), exit code 4 as before.
    result = CliRunner().invoke(
        cli.main, ["topic", "create", "NoLeader", "--endpoint", cluster.endpoint(follower)]
    )
    assert result.exit_code == 4, result.output
    assert "no Raft leader" in result.output
    assert "NoLeader" not in cluster.nodes[follower].broker.store.topic_configs


# ---------------------------------------------------------------------------- auth
ADMIN = ("root", "root-secret")
READER = ("reader", "reader-secret")
ACCOUNTS = {
    "accounts": [
        {
            "access_key": ADMIN[0],
            "secret_key": ADMIN[1],
            "allow": [{"actions": ["pub", "sub", "admin"], "topics": ["*"], "groups": ["*"]}],
        },
        {
            "access_key": READER[0],
            "secret_key": READER[1],
            "allow": [{"actions": ["sub"], "topics": ["*"], "groups": ["*"]}],
        },
    ]
}


class SecuredCluster(Cluster):
    """Every member requires signed calls (one ``--auth-file`` for all)."""

    def __init__(self, root: Path, size: int) -> None:
        super().__init__(root, size)
        self.accounts = root / "accounts.json"
        self.accounts.write_text(json.dumps(ACCOUNTS))

    def config(self, node_id: int) -> BrokerConfig:
        config = super().config(node_id)
        return BrokerConfig(
            store=config.store,
            listen_port=config.listen_port,
            replication=config.replication,
            auth_file=self.accounts,
        )


def _signed_create(endpoint: str, key: tuple[str, str] | None, name: str) -> None:
    with grpc.insecure_channel(endpoint) as raw:
        channel = raw if key is None else grpc.intercept_channel(raw, auth.SigningInterceptor(*key))
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        stub.CreateTopic(admin_pb2.CreateTopicRequest(name=name, queue_nums=1), timeout=CALL_S)


def test_a_follower_refuses_an_unauthorised_write_and_forwards_an_authorised_one(
    tmp_path: Path,
) -> None:
    secured = SecuredCluster(tmp_path, 3)
    try:
        secured.start_all()
        leader = secured.leader()
        follower = _follower(secured, leader)
        endpoint = secured.endpoint(follower)
        with pytest.raises(grpc.RpcError) as unsigned:
            _signed_create(endpoint, None, "AuthNope")
        assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as forbidden:
            _signed_create(endpoint, READER, "AuthNope")
        assert forbidden.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may not admin topic 'AuthNope'" in (forbidden.value.details() or "")
        assert _forwarded(secured, follower, "CreateTopic") == 0  # refused before forwarding
        _signed_create(endpoint, ADMIN, "AuthYes")
        assert _forwarded(secured, follower, "CreateTopic") == 1
        _settle(secured, leader)
        for node_id in secured.nodes:
            store = secured.nodes[node_id].broker.store
            assert "AuthYes" in store.topic_configs, f"node {node_id}"
            assert "AuthNope" not in store.topic_configs, f"node {node_id}"
    finally:
        secured.stop_all()


# ---------------------------------------------------------------------------- processes
@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Group]:
    made = Group(tmp_path)
    made.start()
    yield made
    made.stop()


def _gannet(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    return subprocess.run(
        [sys.executable, "-m", "gannet.node.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _topics(group: Group, node_id: int) -> set[str]:
    with grpc.insecure_channel(group.peers[node_id - 1].client_endpoint) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        reply = stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
    return {t.name for t in reply.topics}


def test_the_gannet_command_creates_a_topic_through_a_follower_process(
    processes: Group,
) -> None:
    members = [p.node_id for p in processes.peers]
    leader = processes.leader(members)
    follower = next(i for i in members if i != leader)
    endpoint = processes.peers[follower - 1].client_endpoint
    created = _gannet("topic", "create", "ProcFwd", "--queues", "2", "--endpoint", endpoint)
    assert created.returncode == 0, created.stderr
    assert "created" in created.stdout
    listed = _gannet("topic", "list", "-o", "json", "--endpoint", endpoint)
    assert listed.returncode == 0, listed.stderr
    json.loads(listed.stdout)
    # Other processes: nothing to await, so their answers are polled (the leader answered once
    # the change was applied there; the followers apply it at their next commit notice).
    deadline = time.monotonic() + DEADLINE_S
    pause = threading.Event()
    missing = set(members)
    while missing and time.monotonic() < deadline:
        missing = {i for i in missing if "ProcFwd" not in _topics(processes, i)}
        pause.wait(0.1)
    assert not missing, f"members {sorted(missing)} do not have the topic"
