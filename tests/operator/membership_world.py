"""A model of a GannetCluster's pods and Raft group for the membership planner's tests.

:class:`World` plays what the operator's steps act on — the roster ConfigMap, the StatefulSet's
pods and the group the leader's ``ListMembers`` reports — and :meth:`World.carry_out` applies
one :mod:`gannet.operator.membership_planning` step the way
:mod:`gannet.operator.membership_handling` and a broker would. It checks the safety rules as it
goes (:class:`Unsafe`): no membership change while another is under way, no change that leaves
fewer than a majority of reachable voters, no node id used twice.
"""

from __future__ import annotations

import dataclasses
import itertools

from gannet.operator import membership_planning as mp


class Unsafe(AssertionError):
    """The planner returned a step that breaks a safety rule."""


@dataclasses.dataclass
class Member:
    voter: bool
    lag_bytes: int = 0
    reachable: bool = True


@dataclasses.dataclass
class World:
    desired: int
    roster: mp.Roster | None = None
    pods: dict[int, mp.PodState] = dataclasses.field(default_factory=dict)
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    leader: str = ""
    calls: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    ids_used: set[str] = dataclasses.field(default_factory=set)
    ephemeral: bool = False
    lost: set[int] = dataclasses.field(default_factory=set)  # ordinals not yet replaced
    _uids: itertools.count[int] = dataclasses.field(default_factory=lambda: itertools.count(1))

    # ------------------------------------------------------------------ what the planner sees
    def observed(self) -> mp.Observed:
        group = None
        if self.leader and self.leader in self.members:
            group = mp.Group(
                members=tuple(
                    mp.MemberState(
                        node_id=node,
                        voter=m.voter,
                        lag_bytes=0 if node == self.leader else m.lag_bytes,
                        reachable=True if node == self.leader else m.reachable,
                        leader=node == self.leader,
                    )
                    for node, m in sorted(self.members.items())
                ),
                leader_id=self.leader,
                change_in_flight=any(not m.voter for m in self.members.values()),
            )
        return mp.Observed(
            desired=self.desired,
            roster=self.roster,
            pods=tuple(self.pods[o] for o in sorted(self.pods)),
            group=group,
        )

    def plan(self) -> mp.Step:
        if self.roster is not None:
            self.roster = mp.with_volumes(self.roster, list(self.pods.values()))
        return mp.next_step(self.observed())

    # ------------------------------------------------------------------ helpers
    def _pod(self, ordinal: int) -> mp.PodState:
        uid = f"pod-{next(self._uids)}"
        volume = uid if self.ephemeral else f"claim-{ordinal}-{next(self._uids)}"
        old = self.pods.get(ordinal)
        if old is not None and not self.ephemeral:
            volume = old.volume  # a claim outlives its pod
        return mp.PodState(ordinal=ordinal, uid=uid, up=True, volume=volume)

    def lose_volume(self, ordinal: int) -> None:
        pod = self.pods[ordinal]
        self.lost.add(ordinal)
        self.pods[ordinal] = mp.PodState(ordinal, f"pod-{next(self._uids)}", True, f"new-{pod.uid}")
        node = self.roster.records[ordinal].node_id if self.roster else ""
        if node in self.members:
            self.members[node].reachable = False  # empty and --join: it waits to be added
            self.members[node].lag_bytes = -1

    def voters(self) -> list[str]:
        return sorted(n for n, m in self.members.items() if m.voter)

    def _check_one_change(self, step: mp.Step) -> None:
        learners = [n for n, m in self.members.items() if not m.voter]
        if isinstance(step, (mp.AddLearner, mp.RemoveMember)) and learners:
            raise Unsafe(f"{step} while learner {learners} waits")
        if isinstance(step, mp.Promote) and learners != [step.record.node_id]:
            raise Unsafe(f"{step} with learners {learners}")

    def _check_majority(self, voters_after: list[str]) -> None:
        reachable = sum(1 for n in voters_after if n == self.leader or self.members[n].reachable)
        if voters_after and reachable < mp.majority(len(voters_after)):
            raise Unsafe(f"{reachable} of {len(voters_after)} voters reachable after the change")

    # ------------------------------------------------------------------ carrying a step out
    def carry_out(self, step: mp.Step) -> None:
        self._check_one_change(step)
        if self.roster is not None:
            self.roster = mp.apply(self.roster, step)
        if isinstance(step, mp.Bootstrap):
            self.roster = step.roster
            for record in step.roster.records:
                self.pods[record.ordinal] = self._pod(record.ordinal)
                self.members[record.node_id] = Member(voter=True)
                self.ids_used.add(record.node_id)
            self.leader = step.roster.records[0].node_id
        elif isinstance(step, mp.CreatePod):
            if step.record.node_id in self.ids_used:
                raise Unsafe(f"node id {step.record.node_id} used twice")
            self.ids_used.add(step.record.node_id)
            self.pods[step.record.ordinal] = self._pod(step.record.ordinal)
        elif isinstance(step, mp.Reassign):
            if step.record.node_id in self.ids_used:
                raise Unsafe(f"node id {step.record.node_id} used twice")
            self.ids_used.add(step.record.node_id)
            self.lost.discard(step.record.ordinal)
        elif isinstance(step, mp.AddLearner):
            self.calls.append(("AddLearner", step.record.node_id))
            self.members[step.record.node_id] = Member(voter=False)
        elif isinstance(step, mp.Promote):
            self._check_majority([*self.voters(), step.record.node_id])
            self.calls.append(("Promote", step.record.node_id))
            self.members[step.record.node_id].voter = True
        elif isinstance(step, mp.TransferLeadership):
            self.calls.append(("TransferLeadership", step.away_from.node_id))
            others = [n for n in self.voters() if n != self.leader and self.members[n].reachable]
            if others:
                self.leader = others[0]
        elif isinstance(step, mp.RemoveMember):
            node = step.record.node_id
            if node == self.leader:
                raise Unsafe("removing the leader without moving leadership first")
            self._check_majority([n for n in self.voters() if n != node])
            self.calls.append(("RemoveMember", node))
            self.members.pop(node, None)
        elif isinstance(step, mp.DeletePod):
            if step.record.node_id in self.members:
                raise Unsafe(f"deleting the pod of member {step.record.node_id}")
            self.pods.pop(step.record.ordinal, None)
        elif isinstance(step, mp.RestartPod):
            self.pods[step.record.ordinal] = self._pod(step.record.ordinal)

    def run(self, *, steps_max: int = 200) -> list[mp.Step]:
        """Plan and carry out until Done (or Blocked/Wait twice in a row); the steps taken."""
        taken: list[mp.Step] = []
        for _ in range(steps_max):
            step = self.plan()
            taken.append(step)
            if isinstance(step, (mp.Done, mp.Blocked, mp.Wait)):
                return taken
            self.carry_out(step)
        raise AssertionError(f"no convergence in {steps_max} steps: {taken[-5:]}")
