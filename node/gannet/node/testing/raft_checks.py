"""Invariant checks of a simulated Gannet Raft group, run after every simulated event.

Called by ``raft_runs.run_simulation`` (and usable from any test holding a
``raft_sim.Cluster``). Each check is one named method; a failure raises
``raft_sim.SimulationFailure`` with the check's name. The properties are those of
``docs/architecture.md`` ("Safety properties the simulations check"), stated on commit-log
bytes:

* ``single_leader_per_term``: no two nodes lead in the same term.
* ``monotonic_terms``: a node's term never decreases, restarts included (term and vote are
  persisted before any message leaves).
* ``committed_prefix_identical``: every node's bytes below its commit offset are a prefix of
  the longest committed byte string seen so far (so replicas agree byte for byte, record ids
  and terms included), and a node's commit offset never passes its log end nor goes back.
* ``commit_on_majority_durable``: the committed bytes are *synced*, identically, on a majority
  of the voters (crashed nodes' disks count: they keep synced bytes) of the configuration in
  force at the commit offset or of a configuration entry seen after it (the one in flight at
  the leader when the bytes committed, possibly cut off since: at most one is in flight, see
  ``raft.membership``).
* ``quorums_overlap``: on every node, consecutive configuration entries differ by at most one
  voter, so any majorities of two consecutive configurations share a node.
* ``leader_completeness``: a node that becomes leader holds every committed byte.
* ``consumers_see_only_committed``: what a node's driver dispatches to consumers (the commit
  offsets of executed Readies) lies inside the committed bytes.
* ``acknowledged_writes_kept``: a proposal answered as committed lies inside the committed
  bytes at the offset it was given.
"""

from __future__ import annotations

import itertools

from gannet.node.raft import quorum
from gannet.node.raft.membership import change_refusal
from gannet.node.raft.messages import ByteOffset, NodeId, Term
from gannet.node.testing.raft_sim import Cluster, SimulationFailure, memberships_in, node_term


def require(condition: bool, check: str, detail: str) -> None:
    if not condition:
        raise SimulationFailure(f"{check}: {detail}")


class Checker:
    """Remembers what was observed so far in one simulated run.

    Invariant: ``committed`` is the longest committed byte string observed on any node.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.committed = b""
        self.leader_of_term: dict[Term, NodeId] = {}
        self.max_term: dict[NodeId, Term] = {}
        self.commit_seen: dict[tuple[NodeId, int], int] = {}
        self.leaders_checked: set[tuple[Term, NodeId]] = set()
        self.verified: dict[NodeId, tuple[int, int, int]] = {}
        """Per node, (restarts, log version, commit offset) at its last full prefix check."""
        self.durable_verified: tuple[int, ...] = ()
        self.configurations_seen: set[tuple[int, frozenset[NodeId]]] = set()
        """Every configuration entry observed on any node, even one cut off later: the one
        in force at a leader when it committed may be gone by the next check."""
        self.bootstrap_voters = frozenset(
            n for n, node in cluster.nodes.items() if n in node.voters
        )

    def check(self) -> None:
        self.monotonic_terms()
        self.single_leader_per_term()
        self.committed_prefix_identical()
        self.commit_on_majority_durable()
        self.consumers_see_only_committed()
        self.acknowledged_writes_kept()
        self.quorums_overlap()

    def quorums_overlap(self) -> None:
        for node_id in self.cluster.up_ids():
            entries = self.cluster.core(node_id).members.entries()
            self.configurations_seen.update(
                (e.start_offset, e.membership.voters) for e in entries[1:]
            )
            if not entries[0].membership.voters:
                entries = entries[1:]  # a joining node's empty bootstrap
            for before, after in itertools.pairwise(entries):
                refusal = change_refusal(before.membership, after.membership)
                require(
                    refusal is None,
                    "quorums_overlap",
                    f"n{node_id} configuration at {after.start_offset}: {refusal}",
                )

    def monotonic_terms(self) -> None:
        for node_id, node in self.cluster.nodes.items():
            term = node_term(node)
            before = self.max_term.get(node_id, Term(0))
            require(term >= before, "monotonic_terms", f"n{node_id} term {before} -> {term}")
            self.max_term[node_id] = term

    def single_leader_per_term(self) -> None:
        for node_id in self.cluster.leaders():
            core = self.cluster.core(node_id)
            first = self.leader_of_term.setdefault(core.term, node_id)
            require(
                first == node_id,
                "single_leader_per_term",
                f"n{first} and n{node_id} both lead term {core.term}",
            )
            if (core.term, node_id) not in self.leaders_checked:
                self.leader_completeness(node_id)
                self.leaders_checked.add((core.term, node_id))

    def leader_completeness(self, node_id: NodeId) -> None:
        data = self.cluster.nodes[node_id].log.data
        require(
            bytes(data[: len(self.committed)]) == self.committed,
            "leader_completeness",
            f"n{node_id} leads without all {len(self.committed)} committed bytes",
        )

    def committed_prefix_identical(self) -> None:
        for node_id in self.cluster.up_ids():
            node = self.cluster.nodes[node_id]
            core = self.cluster.core(node_id)
            offset = core.committed_offset
            require(
                core.log.last_offset == node.log.end_offset,
                "driver_contract",
                f"n{node_id} core log end {core.log.last_offset} vs disk {node.log.end_offset}",
            )
            require(
                offset <= node.log.end_offset,
                "committed_prefix_identical",
                f"n{node_id} commit {offset} beyond its log end {node.log.end_offset}",
            )
            key = (node_id, node.restarts)
            require(
                offset >= self.commit_seen.get(key, 0),
                "monotonic_commit",
                f"n{node_id} commit went back to {offset}",
            )
            self.commit_seen[key] = offset
            stamp = (node.restarts, node.log.version, offset)
            if self.verified.get(node_id) == stamp:
                continue  # nothing below the commit offset changed since the last check
            self.verified[node_id] = stamp
            prefix = bytes(node.log.data[:offset])
            shared = min(len(prefix), len(self.committed))
            require(
                prefix[:shared] == self.committed[:shared],
                "committed_prefix_identical",
                f"n{node_id} committed bytes differ below {shared}",
            )
            if len(prefix) > len(self.committed):
                self.committed = prefix

    def commit_on_majority_durable(self) -> None:
        length = len(self.committed)
        if length == 0:
            return
        stamp = (length, *(n.log.version for n in self.cluster.nodes.values()))
        if stamp == self.durable_verified:
            return  # no truncation anywhere and no new committed bytes since the last check
        self.durable_verified = stamp
        holders = {
            node_id
            for node_id, node in self.cluster.nodes.items()
            if node.log.synced_offset >= length and bytes(node.log.data[:length]) == self.committed
        }
        in_force = memberships_in(ByteOffset(0), self.committed)
        configurations = [in_force[-1].membership.voters if in_force else self.bootstrap_voters]
        configurations += [v for start, v in self.configurations_seen if start >= length]
        require(
            any(len(holders & v) >= quorum.majority(len(v)) for v in configurations if v),
            "commit_on_majority_durable",
            f"{length} committed bytes synced only on {sorted(holders)}",
        )

    def consumers_see_only_committed(self) -> None:
        for node_id in self.cluster.up_ids():
            node = self.cluster.nodes[node_id]
            visible = node.dispatched_offset
            require(
                visible <= len(self.committed)
                and bytes(node.log.data[:visible]) == self.committed[:visible],
                "consumers_see_only_committed",
                f"n{node_id} dispatches up to {visible}, beyond the committed bytes",
            )

    def acknowledged_writes_kept(self) -> None:
        for record_id in self.cluster.newly_acked:
            start, end = self.cluster.acked[record_id]
            require(
                end <= len(self.committed),
                "acknowledged_writes_kept",
                f"record {record_id} [{start},{end}) acknowledged beyond the committed bytes",
            )
        self.cluster.newly_acked.clear()

    def final_logs_hold_acknowledged(self, retired: frozenset[NodeId] = frozenset()) -> None:
        """After the cluster converged: every node (but the ``retired`` non-members) holds
        every acknowledged record."""
        for node_id, node in self.cluster.nodes.items():
            if node_id in retired:
                continue
            for record_id, (start, _end) in self.cluster.acked.items():
                record = node.log.record_at(start)
                require(
                    record is not None and record.record_id == record_id,
                    "acknowledged_writes_kept",
                    f"n{node_id} lost acknowledged record {record_id} at {start}",
                )
