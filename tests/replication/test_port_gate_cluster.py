"""A member left without a leader closes its client port and reopens it once it knows one
(``broker.port_gate``), on an in-process group of three brokers: the two others crash, the
lone member forgets its leader and refuses connections; one of them restarts, a leader is
elected, and the port answers again. Every wait awaits a Raft condition
(:meth:`ReplicationNode.wait_until`)."""

from __future__ import annotations

import grpc
import pytest

from gannet.node.protocol.gen import admin_pb2

from .conftest import Cluster

pytestmark = pytest.mark.slow
CALL_S = 5.0


def test_a_member_without_a_leader_closes_its_client_port_until_it_knows_one(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    alone = next(i for i in cluster.nodes if i != leader)
    others = [i for i in cluster.nodes if i != alone]
    broker = cluster.nodes[alone].broker
    endpoint = cluster.endpoint(alone)
    for node_id in others:
        cluster.crash(node_id)
    raft = cluster.raft(alone)
    cluster.wait(alone, lambda: raft.leader() is None)  # no majority: no leader
    cluster.wait(alone, lambda: broker.server is None)
    assert broker.port_closes_total == 1
    assert broker.not_ready_reason() is not None
    with pytest.raises(grpc.RpcError) as refused:  # a new connection is refused
        cluster.admin(alone, lambda a: a.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=2))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value

    cluster.start(others[0])  # a majority again: a leader is elected, the port reopens
    elected = cluster.leader([alone, others[0]])
    cluster.wait(alone, lambda: broker.server is not None)
    assert cluster.endpoint(alone) == endpoint  # the same port
    status = cluster.admin(
        alone, lambda a: a.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=CALL_S)
    )
    assert int(status.leader_id) == elected
    assert broker.port_closes_total == 1
