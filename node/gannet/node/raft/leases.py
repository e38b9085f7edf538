"""Leases: who heard from whom recently, for check-quorum and leader stickiness.

Called by ``core.RaftCore`` (its public ``responsive_followers`` and ``follows_live_leader``),
by ``election`` (a node in a lease ignores disruptive campaigns) and by ``appending`` (a
leader's check-quorum round on its tick). Pure functions over ``node_state.NodeState``.

Two leases, both bounded by one election timeout of ticks and both only with
``Config.check_quorum``:

* a follower's lease on its leader: it heard from it within an election timeout, so a lone
  message that would move its term (a campaign, a later term's append) is suspect;
* a leader's lease on its group: in each check-quorum round a majority of voters answered,
  otherwise it steps down. What a linearizable read (ReadIndex or a lease read) would rest on;
  the core serves none today (reads come from the committed prefix of the store).
"""

from __future__ import annotations

from gannet.node.raft import quorum
from gannet.node.raft.messages import NO_NODE, NodeId
from gannet.node.raft.node_state import NodeState
from gannet.node.raft.ready import Role


def in_lease(node: NodeState) -> bool:
    """A node that heard from a live leader within an election timeout ignores campaigns
    (the leader stickiness PreVote relies on); a leader is in its own lease."""
    if not node.config.check_quorum:
        return False
    if node.role is Role.LEADER:
        return True
    return (
        node.leader_id != NO_NODE
        and node.election_elapsed_ticks < node.config.election_timeout_ticks
    )


def follows_live_leader(node: NodeState) -> bool:
    """A follower that heard from its leader within an election timeout (check-quorum on):
    a lone message from another member that would move its term is suspect then."""
    return node.role is not Role.LEADER and in_lease(node)


def responsive_followers(node: NodeState) -> frozenset[NodeId]:
    """Followers this leader heard from in the current or the previous check-quorum round
    (at most two election timeouts ago); empty unless leading."""
    if node.role is not Role.LEADER:
        return frozenset()
    now = {n for n, pr in node.progress.items() if pr.recent_active}
    return frozenset(now | (node.last_active & set(node.progress)))


def quorum_active(node: NodeState) -> bool:
    """End a check-quorum round: whether a majority of voters (this leader included) was heard
    from in it. Starts the next round."""
    voters = node.members.current.voters
    active = int(node.id in voters) + sum(
        1 for n, pr in node.progress.items() if pr.recent_active and n in voters
    )
    node.last_active = frozenset(n for n, pr in node.progress.items() if pr.recent_active)
    for pr in node.progress.values():
        pr.recent_active = False
    return active >= quorum.majority(len(voters))
