"""What the replication driver answers instead of accepting a write.

Raised by :class:`~gannet.node.replication.driver.ReplicationNode` (and its commit waiters in
:mod:`~gannet.node.replication.driver_state`); caught by the v2 and admin servicers
(:mod:`gannet.node.api`), which turn them into RocketMQ status codes clients retry on.
"""

from __future__ import annotations

from gannet.node.replication.config import PeerSpec


class ReplicationError(Exception):
    """Base of what the driver answers instead of accepting a write."""


class NotLeaderError(ReplicationError):
    """This node does not lead; ``leader`` is the member it believes does (None: unknown)."""

    def __init__(self, node_id: int, leader: PeerSpec | None) -> None:
        self.leader = leader
        where = (
            f"node {leader.node_id} at {leader.client_endpoint}"
            if leader is not None
            else "not known yet (election in progress)"
        )
        super().__init__(f"node {node_id} is not the Raft leader; the leader is {where}")


class ReplicationBusy(ReplicationError):
    """The leader refuses writes for now (transfer in progress, uncommitted bytes limit)."""


class CommitUncertain(ReplicationError):
    """Written on the leader but not known committed: leadership was lost or time ran out."""
