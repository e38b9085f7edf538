"""One seeded run of a simulated Gannet Raft group: random faults, then heal and converge.

Called by ``tests/raft/test_simulation.py``; re-run one seed with
``GANNET_SIM_SEED=<seed> pytest tests/raft/test_simulation.py -k seed``. A run draws its
group size (1, 3 or 5), limits and fault mix from the seed, plays ``event_count`` random
events (deliver, drop, duplicate or reorder a message, tick, sync a disk, propose, crash,
restart, partition, one-way link cut, heal, transfer leadership) with ``Checker.check``
after each, then heals everything and requires the group to converge (liveness) with every
acknowledged record on every node.

With ``membership=True`` (``tests/raft/test_membership_simulation.py``) two spare nodes start
to join, and membership changes are mixed into the faults: add a learner, promote a learner,
remove a voter (the leader included) or a learner, proposed to whoever leads; convergence then
concerns the members of the final configuration (removed nodes are stopped, as the operator
deletes their pods).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from gannet.node.invariants import InvariantViolation
from gannet.node.raft.membership import Membership
from gannet.node.raft.messages import NodeId, Proposed
from gannet.node.raft.ready import Role
from gannet.node.testing.raft_checks import Checker
from gannet.node.testing.raft_sim import (
    MEMBERSHIP_RECORD_ID_BASE,
    Cluster,
    SimulationFailure,
    describe,
)

RERUN_HINT = "GANNET_SIM_SEED={seed} .venv/bin/pytest -q tests/raft/test_simulation.py -k one_seed"
MEMBERSHIP_RERUN_HINT = (
    "GANNET_SIM_SEED={seed} .venv/bin/pytest -q tests/raft/test_membership_simulation.py"
    " -k one_seed"
)
SPARE_NODES = 2
CONVERGE_ROUNDS_MAX = 400
TRACE_TAIL_EVENTS = 25


@dataclass(frozen=True, slots=True)
class RunStats:
    seed: int
    node_count: int
    proposals_acked: int
    leaders_elected: int
    committed_bytes: int
    membership_changes: int = 0


class Run:
    """The state of one seeded run. Invariant: ``trace`` names every event played."""

    def __init__(self, seed: int, *, membership: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.node_count = self.rng.choice([1, 3, 3, 3, 5, 5])
        self.membership = membership
        self.membership_changes = 0
        self.retired: set[NodeId] = set()
        timing = {
            "election_timeout_ticks": 10,
            "heartbeat_interval_ticks": self.rng.choice([1, 2, 3]),
            "append_bytes_max": self.rng.choice([40, 200, 4096]),
            "inflight_messages_max": self.rng.choice([1, 4, 32]),
            "inflight_bytes_max": self.rng.choice([100, 100_000]),
            "pre_vote": self.rng.random() < 0.5,
            "check_quorum": self.rng.random() < 0.5,
        }
        spares = SPARE_NODES if membership else 0
        self.cluster = Cluster(self.node_count, seed=seed, timing=timing, spare_count=spares)
        self.checker = Checker(self.cluster)
        self.trace: list[str] = [f"seed {seed}: {self.node_count} nodes {timing}"]
        self.next_record_id = 1
        self.faults = self.rng.random() < 0.85
        # Some runs crash often: elections interrupted by crashes test vote persistence.
        self.crash_weight = self.rng.choice([1, 1, 6])

    def play(self, event_count: int) -> RunStats:
        try:
            for _ in range(event_count):
                self.random_event()
                self.checker.check()
            self.converge()
        except (SimulationFailure, InvariantViolation) as failure:
            tail = "\n  ".join(self.trace[-TRACE_TAIL_EVENTS:])
            hint = (MEMBERSHIP_RERUN_HINT if self.membership else RERUN_HINT).format(seed=self.seed)
            raise SimulationFailure(
                f"seed {self.seed} failed at event {len(self.trace) - 1}: {failure}\n"
                f"re-run: {hint}\nlast events:\n  {tail}"
            ) from failure
        return RunStats(
            self.seed,
            self.node_count,
            len(self.cluster.acked),
            len(self.checker.leader_of_term),
            len(self.checker.committed),
            self.membership_changes,
        )

    # ---------------------------------------------------------------- events

    def random_event(self) -> None:
        events: list[tuple[int, Callable[[], None]]] = [
            (45, self.deliver),
            (14, self.tick_all),
            (12, self.sync_one),
            (12, self.propose),
        ]
        if self.faults:
            events += [
                (4, self.drop),
                (2, self.duplicate),
                (self.crash_weight, self.crash),
                (3 * self.crash_weight, self.restart),
                (1, self.partition),
                (1, self.cut_one_way),
                (2, self.heal),
                (1, self.transfer),
            ]
        if self.membership:
            events.append((4, self.change_membership))
        total = sum(weight for weight, _ in events)
        pick = self.rng.randrange(total)
        for weight, event in events:
            if pick < weight:
                event()
                return
            pick -= weight

    def deliver(self) -> None:
        in_flight = self.cluster.in_flight
        if not in_flight:
            self.tick_all()
            return
        # Mostly oldest-first with a random skip: delays and reorders without starving.
        index = min(int(self.rng.expovariate(0.5)), len(in_flight) - 1)
        message = in_flight.pop(index)
        delivered = self.cluster.deliver(message)
        self.trace.append(f"deliver {describe(message)}" + ("" if delivered else " (lost)"))

    def drop(self) -> None:
        if self.cluster.in_flight:
            index = self.rng.randrange(len(self.cluster.in_flight))
            self.trace.append(f"drop {describe(self.cluster.in_flight.pop(index))}")

    def duplicate(self) -> None:
        if self.cluster.in_flight:
            message = self.rng.choice(self.cluster.in_flight)
            self.cluster.send(message)
            self.trace.append(f"duplicate {describe(message)}")

    def tick_all(self) -> None:
        self.trace.append("tick all")
        for node_id in self.cluster.up_ids():
            self.cluster.tick(node_id)

    def sync_one(self) -> None:
        up = self.cluster.up_ids()
        if up:
            node_id = self.rng.choice(up)
            self.trace.append(f"sync n{node_id}")
            self.cluster.sync(node_id)

    def propose(self) -> None:
        up = self.cluster.up_ids()
        if not up:
            return
        leaders = self.cluster.leaders()
        node_id = self.rng.choice(leaders) if leaders and self.rng.random() < 0.9 else None
        node_id = node_id or self.rng.choice(up)
        record_id = self.next_record_id
        self.next_record_id += 1
        length_bytes = self.rng.randrange(16, 120)
        outcome = self.cluster.propose(node_id, record_id, length_bytes)
        self.trace.append(f"propose n{node_id} id={record_id} {length_bytes}B: {outcome}")

    def crash(self) -> None:
        up = self.cluster.up_ids()
        if up:
            node_id = self.rng.choice(up)
            # Usually every unsynced byte is lost; sometimes some unsynced records survive.
            kept = self.rng.choice([0, 0, 1, 3])
            self.trace.append(f"crash n{node_id} keeping {kept} unsynced records")
            self.cluster.crash(node_id, kept)

    def restart(self) -> None:
        down = [n for n, node in self.cluster.nodes.items() if not node.up]
        if down:
            node_id = self.rng.choice(down)
            self.trace.append(f"restart n{node_id}")
            self.cluster.restart(node_id)

    def partition(self) -> None:
        groups = {node_id: self.rng.randrange(2) for node_id in self.cluster.nodes}
        self.cluster.group_of = groups
        self.trace.append(f"partition {groups}")

    def cut_one_way(self) -> None:
        if len(self.cluster.nodes) > 1:
            a, b = self.rng.sample(sorted(self.cluster.nodes), 2)
            self.cluster.cut_links.add((a, b))
            self.trace.append(f"cut n{a} -> n{b}")

    def heal(self) -> None:
        self.cluster.group_of = {}
        self.cluster.cut_links.clear()
        self.trace.append("heal")

    def transfer(self) -> None:
        leaders = self.cluster.leaders()
        others = [NodeId(n) for n in self.cluster.nodes if n not in leaders]
        if leaders and others:
            leader, target = leaders[0], self.rng.choice(others)
            outcome = self.cluster.core(leader).transfer_leadership(target)
            self.cluster.drain(leader)
            self.trace.append(f"transfer n{leader} -> n{target}: {outcome}")

    def change_membership(self) -> None:
        """Propose one single-server change to a node (usually the leader)."""
        leaders = self.cluster.leaders()
        up = self.cluster.up_ids()
        if not up:
            return
        node_id = self.rng.choice(leaders) if leaders and self.rng.random() < 0.9 else None
        node_id = node_id or self.rng.choice(up)
        current = self.cluster.core(node_id).members.current
        outsiders = [n for n in self.cluster.nodes if n not in current.members()]
        choices: list[tuple[str, NodeId]] = [("add", n) for n in outsiders]
        choices += [("promote", n) for n in current.learners]
        choices += [("remove", n) for n in current.members() if len(current.voters) > 1]
        if not choices:
            return
        kind, target = self.rng.choice(sorted(choices))
        if kind == "add":
            new = Membership(current.voters, current.learners | {target})
        elif kind == "promote":
            new = Membership(current.voters | {target}, current.learners - {target})
        else:
            new = Membership(current.voters - {target}, current.learners - {target})
        record_id = MEMBERSHIP_RECORD_ID_BASE + self.next_record_id
        self.next_record_id += 1
        outcome = self.cluster.propose_membership(node_id, record_id, new)
        if isinstance(outcome, Proposed):
            self.membership_changes += 1
        self.trace.append(f"membership n{node_id} {kind} n{target}: {outcome}")

    # ------------------------------------------------------------- liveness

    def converge(self) -> None:
        """Heal, restart everyone, and require one leader with every log equal to its own
        and fully committed within ``CONVERGE_ROUNDS_MAX`` rounds."""
        self.trace.append("converge")
        self.heal()
        for node_id, node in self.cluster.nodes.items():
            if not node.up:
                self.cluster.restart(node_id)
        marker = self.next_record_id
        for _ in range(CONVERGE_ROUNDS_MAX):
            self.round_robin()
            self.retire_non_members()
            leaders = self.cluster.leaders()
            if len(leaders) == 1 and marker not in self.cluster.acked:
                # A final write proves the group accepts writes after the faults; a leader
                # change may drop it, so it is proposed again to whoever leads.
                pending = self.cluster.nodes[leaders[0]].pending
                if not any(p.record_id == marker for p in pending):
                    self.cluster.propose(leaders[0], marker, 20)
            if marker in self.cluster.acked and self.converged():
                self.checker.final_logs_hold_acknowledged(frozenset(self.retired))
                return
        raise SimulationFailure(f"liveness: no convergence after {CONVERGE_ROUNDS_MAX} rounds")

    def retire_non_members(self) -> None:
        """Once a leader's configuration is committed, stop the nodes outside it."""
        leaders = self.cluster.leaders()
        if not self.membership or len(leaders) != 1:
            return
        core = self.cluster.core(leaders[0])
        if core.members.latest().end_offset > core.committed_offset:
            return
        for node_id in self.cluster.up_ids():
            if node_id not in core.members.current.members():
                self.cluster.crash(node_id)
                self.retired.add(node_id)
                self.trace.append(f"retire n{node_id}")

    def round_robin(self) -> None:
        for _ in range(len(self.cluster.in_flight)):
            self.cluster.deliver(self.cluster.in_flight.pop(0))
        for node_id in self.cluster.up_ids():
            self.cluster.sync(node_id)
            self.cluster.tick(node_id)
        self.checker.check()

    def converged(self) -> bool:
        leaders = self.cluster.leaders()
        if len(leaders) != 1:
            return False
        leader = self.cluster.nodes[leaders[0]]
        end = leader.log.end_offset
        for node_id in self.cluster.nodes:
            if node_id in self.retired:
                continue
            if not self.cluster.nodes[node_id].up:
                return False
            core = self.cluster.core(node_id)
            node = self.cluster.nodes[node_id]
            if core.committed_offset != end or node.log.data != leader.log.data:
                return False
            if node_id != leaders[0] and core.role is not Role.FOLLOWER:
                return False
        return True


def run_simulation(seed: int, event_count: int = 400) -> RunStats:
    return Run(seed).play(event_count)


def run_membership_simulation(seed: int, event_count: int = 400) -> RunStats:
    return Run(seed, membership=True).play(event_count)
