"""Fault injection: a partitioned transport drops what arrives and counts it by kind
(``PeerTransport.dropped_while_partitioned``), so that a test heals only once what a peer sent
before has arrived (``test_log_reset.py``: the ResetLogStart behind the leader's older appends).
"""

from __future__ import annotations

from gannet.node.raft.messages import (
    AppendEntries,
    ByteOffset,
    Heartbeat,
    Message,
    NodeId,
    ResetLogStart,
    Term,
)
from gannet.node.replication.config import PeerSpec, ReplicationConfig
from gannet.node.replication.transport import PeerTransport

from .conftest import free_ports

ONE, TWO = NodeId(1), NodeId(2)
ZERO = ByteOffset(0)


def test_a_partitioned_transport_drops_and_counts_what_arrives_by_kind() -> None:
    port1, port2, client1, client2 = free_ports(4)
    peers = (PeerSpec(1, "127.0.0.1", port1, client1), PeerSpec(2, "127.0.0.1", port2, client2))
    delivered: list[Message] = []
    transport = PeerTransport(
        ReplicationConfig(node_id=2, peers=peers, peer_listen=f"127.0.0.1:{port2}"),
        delivered.append,
    )
    append = AppendEntries(ONE, TWO, Term(1), ZERO, Term(0), ByteOffset(8), Term(1), ZERO)
    reset = ResetLogStart(ONE, TWO, Term(1), ByteOffset(64), Term(1), ZERO)
    heartbeat = Heartbeat(ONE, TWO, Term(1), ZERO)

    transport.partitioned = True
    for message in (append, reset, reset, heartbeat):
        transport.deliver(message)
    assert delivered == []
    assert transport.dropped_while_partitioned == {
        "AppendEntries": 1,
        "ResetLogStart": 2,
        "Heartbeat": 1,
    }

    transport.partitioned = False
    transport.deliver(reset)
    assert delivered == [reset]
    assert transport.dropped_while_partitioned["ResetLogStart"] == 2
