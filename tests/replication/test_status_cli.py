"""``gannet status`` shows the node's Raft state; ``gannet cluster status`` every member's, with
exit codes scripts can trust (0 agreed leader, 2 no agreed leader, 4 a member unreachable).
In-process 3-broker group on 127.0.0.1 (``conftest``) and pure checks of the verdict."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gannet.node.cli import exits, raft_views
from gannet.node.cli.raft_views import MemberStatus
from gannet.node.cli.root import main
from gannet.node.protocol.gen import admin_pb2

from .conftest import Cluster, free_ports

pytestmark = pytest.mark.timeout(90)


def test_cluster_status_and_status_show_roles_terms_and_follower_lag(cluster: Cluster) -> None:
    cluster.start_all()
    leader = cluster.leader()
    cluster.create_topic("StatusTopic")  # committed everywhere: every member names the leader
    endpoints = ",".join(cluster.endpoint(i) for i in sorted(cluster.nodes))
    runner = CliRunner()
    result = runner.invoke(
        main, ["cluster", "status", "--endpoints", endpoints], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("leader") >= 1
    assert result.output.count("follower") == 2
    assert f"peers seen by node {leader} (leader)" in result.output
    status = runner.invoke(
        main, ["status", "--endpoint", cluster.endpoint(leader)], terminal_width=200
    )
    assert status.exit_code == 0, status.output
    assert f"Raft node {leader}" in status.output
    assert "match offset" in status.output
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    partial = runner.invoke(
        main, ["cluster", "status", "--endpoints", f"{endpoints},{dead}"], terminal_width=200
    )
    assert partial.exit_code == exits.EXIT_UNREACHABLE
    assert "unreachable" in partial.output
    one = cluster.endpoint(min(cluster.nodes))
    found = runner.invoke(main, ["cluster", "status", "-o", "json"], env={"GANNET_ENDPOINT": one})
    assert found.exit_code == 0, found.output  # the member at GANNET_ENDPOINT names its peers
    members = json.loads(found.stdout)
    assert members[0]["endpoint"] == one
    assert sorted(m["status"]["node_id"] for m in members) == sorted(str(i) for i in cluster.nodes)
    bad = runner.invoke(main, ["cluster", "status", "--endpoints", "nohostport"])
    assert bad.exit_code == 2
    assert "not host:port" in bad.output


def _status(node: str, role: str, term: int, leader: str) -> admin_pb2.RaftStatus:
    return admin_pb2.RaftStatus(node_id=node, role=role, term=term, leader_id=leader)


def test_agreed_leader_needs_every_reachable_member_to_name_it() -> None:
    one = MemberStatus("a", _status("1", "leader", 3, "1"))
    two = MemberStatus("b", _status("2", "follower", 3, "1"))
    stale = MemberStatus("c", _status("3", "leader", 2, "3"))
    gone = MemberStatus("d", None, "UNAVAILABLE")
    agreed = raft_views.agreed_leader([one, two, gone])
    assert agreed is not None
    assert agreed.node_id == "1"
    assert raft_views.agreed_leader([one, two, stale]) is None  # node 3 still believes itself
    assert raft_views.agreed_leader([two]) is None
    assert raft_views.agreed_leader([gone]) is None
