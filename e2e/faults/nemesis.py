"""The nemeses, and their schedule drawn from a seed.

:func:`schedule` is pure: the same seed, duration, cluster size and nemesis list give the same
faults at the same times (``--seed`` replays a run's schedule exactly). Two streams run side by
side: network faults (one at a time; each heals every rule when it ends) and process faults (one
at a time), so a partition may overlap a pause or a crash. A fault names its target by role
(``leader``, resolved when it starts) or by member (drawn from the seed).

Network nemeses (iptables in the members' namespaces; member 0 is the client, ``ctl``):

* ``halves``: a random member alone on one side, the client on a side drawn from the seed;
* ``leader-isolated``: the leader cut from every member and from the client;
* ``leader-peers``: the leader cut from its followers, the client still reaches everyone;
* ``bridge``: two members cut from each other, both still seeing the third (the bridge);
* ``minority``: a random member cut from its peers, the client still reaches it;
* ``ring``: (5 members or more) each member sees its two neighbours only;
* ``loss``: each packet between members dropped at random (10-40 %);
* ``flap``: one link cut and restored every 0.5-3 s;
* ``follower-cut``: a follower (the lowest-numbered member that does not lead when it starts)
  cut from its peers, the client still reaching it: no election needed.

A member added during the run (``membership``'s fourth, ``replace``'s new node) is a peer like
the others: cut from a member cut from its peers, on the larger side of ``halves``, after the
slots in a ``ring``, and its links lossy under ``loss`` (:func:`links_cut`).

Process nemeses: ``pause`` (SIGSTOP, SIGCONT at the end), ``kill`` (SIGKILL, restart at the end),
``disk-full`` (its store's filesystem filled to 95 %, freed at the end), each on the leader or a
random member; ``lose-unfsynced``: SIGKILL of the leader or a random member, then every change
its store did not fsync dropped (the lazy filesystem, :mod:`e2e.faults.lazyfs`: what a power
loss does), restart at the end; ``clock``: a random member's wall clock skewed by 5-60 s either
way, or strobed (the skew on and off every 0.3-1.5 s), through the clock shim
(``clockshim/sitecustomize.py``);
``membership``: a fourth member (a spare namespace) started with ``--join`` and added with
``gannet cluster member add`` when it starts, removed with ``gannet cluster member remove`` and
stopped when it ends, the CLI calls in the background (operations of process ``member`` in the
history) while the other stream's faults go on;
``replace``: a member (the leader or a random slot's) replaced under a new node id — a
brand-new node in a namespace of its own (new address, empty store, ``--join``) takes its slot
(:class:`~e2e.faults.cluster.NetCluster`), as the operator replaces a member whose volume was
lost (``gannet.operator.membership_planning``). Two ways, drawn from the seed: *lost disk*
(the operator's case) — the member is SIGKILLed and its store deleted when the fault starts,
removed with ``gannet cluster member remove`` (the group runs on the others), and the new node
is started and added (learner, caught up, voter) when it ends; *add first* — the new node is
started and added when the fault starts, and the old member removed, stopped and its store
deleted when it ends. Each CLI call is retried (every ``MEMBER_RETRY_S``, up to
``MEMBER_OP_WAIT_S``) until it succeeds, as the operator retries a step every pass: a removal is
refused while the remaining voters have no reachable majority. At most ``REPLACE_MAX`` per run
(one spare namespace each). Later faults naming a member by number name its slot, so they reach
the new node once it holds the slot.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from e2e.faults.cluster import NetCluster
from e2e.faults.history import History

NETWORK = (
    "halves",
    "leader-isolated",
    "leader-peers",
    "bridge",
    "minority",
    "ring",
    "loss",
    "flap",
    "follower-cut",
)
PROCESS = (
    "pause", "kill", "clock", "disk-full", "pause-follower", "kill-follower", "membership",
    "lose-unfsynced", "replace",
)  # fmt: skip
"""Appended to, never reordered: a seed's schedule draws from these tuples. Runs before
``lose-unfsynced`` was added replay with ``--nemeses`` naming the kinds of then."""
FOLLOWER = {"pause-follower": "pause", "kill-follower": "kill"}
ALL = NETWORK + PROCESS
QUIET_START_S = 6.0
QUIET_END_S = 6.0
GAP_S = (2.0, 6.0)
DURATION_S = (3.0, 14.0)
MEMBER_OP_WAIT_S = 150.0
MEMBER_RETRY_S = 1.0
REPLACE_MAX = 2
"""Replacements per run: each takes a spare namespace (node ids ``size+2 ..``)."""


@dataclass(frozen=True)
class Fault:
    start: float
    stop: float
    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.params.items() if k != "toggles")
        return f"{self.kind}({extra})" if extra else self.kind


def schedule(seed: int, duration_s: float, size: int, kinds: tuple[str, ...]) -> list[Fault]:
    """The faults of one run, by start time."""
    rng = random.Random(seed)
    usable = [k for k in kinds if k != "ring" or size >= 5]
    faults: list[Fault] = []
    for stream in (NETWORK, PROCESS):
        choices = [k for k in usable if k in stream]
        if not choices:
            continue
        t = QUIET_START_S + rng.uniform(0, GAP_S[1])
        while choices:
            length = rng.uniform(*DURATION_S)
            if t + length > duration_s - QUIET_END_S:
                break
            kind = rng.choice(choices)
            if kind == "membership":  # one spare namespace: one add and remove per run
                choices = [k for k in choices if k != kind] or choices
            if kind == "replace" and sum(f.kind == kind for f in faults) + 1 >= REPLACE_MAX:
                choices = [k for k in choices if k != kind]  # a spare namespace each
            faults.append(Fault(round(t, 2), round(t + length, 2), kind,
                                _params(rng, kind, size, length)))  # fmt: skip
            t += length + rng.uniform(*GAP_S)
    return sorted(faults, key=lambda f: f.start)


def _params(rng: random.Random, kind: str, size: int, length: float) -> dict[str, Any]:
    members = list(range(1, size + 1))
    if kind == "halves":
        rng.shuffle(members)
        cut = rng.randint(1, (size - 1) // 2)
        return {"small": sorted(members[:cut]), "client_with_small": rng.random() < 0.5}
    if kind in ("bridge", "minority"):
        rng.shuffle(members)
        return {"members": members}
    if kind == "ring":
        rng.shuffle(members)
        return {"order": members}
    if kind == "loss":
        return {"probability": round(rng.uniform(0.1, 0.4), 2)}
    if kind == "flap":
        a, b = rng.sample(members, 2)
        toggles, t = [], 0.0
        while True:
            t += rng.uniform(0.5, 3.0)
            if t >= length:
                break
            toggles.append(round(t, 2))
        return {"link": [a, b], "toggles": toggles}
    if kind == "clock":
        offset = round(rng.choice((-1, 1)) * rng.uniform(5, 60), 1)
        if rng.random() < 0.5:
            return {"member": rng.choice(members), "offset_s": offset}
        toggles, t = [], 0.0
        while True:
            t += rng.uniform(0.3, 1.5)
            if t >= length:
                break
            toggles.append(round(t, 2))
        return {
            "member": rng.choice(members),
            "offset_s": offset,
            "strobe": True,
            "toggles": toggles,
        }
    if kind in ("pause", "kill", "disk-full", "lose-unfsynced"):
        target: int | str = "leader" if rng.random() < 0.5 else rng.choice(members)
        return {"target": target}
    if kind == "replace":
        target = "leader" if rng.random() < 0.5 else rng.choice(members)
        return {"target": target, "lost_disk": rng.random() < 0.5}
    return {}


def replaced_node(resolved: int, members: list[int], leaving: set[int]) -> int:
    """The node a ``replace`` fault replaces: ``resolved`` (its target's node) unless that is
    not a slot's holder (the ``membership`` nemesis' spare leading) or its replacement already
    began (its removal waits in line: seed 904 replaced such a node twice, and the group ended
    with the second successor in it as well); then the first holder not being replaced."""
    if resolved in members and resolved not in leaving:
        return resolved
    for node in members:
        if node not in leaving:
            return node
    raise RuntimeError(f"every member of {members} is being replaced already")


PARTITIONS = tuple(kind for kind in NETWORK if kind not in ("loss", "flap"))
"""The network nemeses that cut links for their whole length (:func:`links_cut`)."""


def links_cut(
    kind: str, params: dict[str, Any], slots: dict[int, int], members: list[int], chosen: int
) -> set[tuple[int, int]]:
    """The links a partition cuts, each ``(a, b)`` with ``a < b`` (0 is the client): pure.

    ``slots`` maps the schedule's member numbers to the nodes holding them, ``members`` is
    every member with a process (a spare added by ``membership`` or ``replace`` included: it
    sides with the larger half and joins the ring after the slots, so a cut-off member is cut
    from it too — seed 1439, where member 2 cut from 1 and 3 still heard member 4), ``chosen``
    the node the fault resolved to (the leader, a follower, the bridge or the minority)."""
    assert kind in PARTITIONS, kind
    assert set(slots.values()) <= set(members), (slots, members)
    cut: set[tuple[int, int]] = set()

    def add(a: int, b: int) -> None:
        cut.add((min(a, b), max(a, b)))

    if kind == "halves":
        small = {slots[slot] for slot in params["small"]}
        large = [i for i in members if i not in small]
        for a in small:
            for b in large:
                add(a, b)
        for member in large if params["client_with_small"] else small:
            add(0, member)
    elif kind in ("leader-isolated", "leader-peers", "follower-cut", "minority"):
        for other in members:
            if other != chosen:
                add(chosen, other)
        if kind == "leader-isolated":
            add(0, chosen)
    elif kind == "bridge":
        add(slots[params["members"][1]], slots[params["members"][2]])
    else:  # ring
        order = [slots[slot] for slot in params["order"]]
        order += [i for i in members if i not in order]
        near = {frozenset((order[i], order[(i + 1) % len(order)])) for i in range(len(order))}
        for a in members:
            for b in members:
                if a < b and frozenset((a, b)) not in near:
                    add(a, b)
    return cut


class Nemesis(threading.Thread):
    """Runs a schedule against a cluster, logging every start and stop in the history."""

    def __init__(self, cluster: NetCluster, history: History, faults: list[Fault]) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.cluster = cluster
        self.history = history
        self.faults = faults
        self.done = threading.Event()
        self.errors: list[str] = []
        self._killed: set[int] = set()
        self._paused: set[int] = set()
        self._full: set[int] = set()
        self._members: list[threading.Thread] = []
        self._leaving: set[int] = set()
        """Nodes whose replacement began (they may hold their slot until their removal)."""
        self._replacing: dict[int, tuple[int, bool]] = {}
        """A node being replaced -> the node taking its slot, and whether its disk was lost."""
        self._replaced_total = 0

    def run(self) -> None:
        steps: list[tuple[float, int, str, Fault]] = []
        for n, fault in enumerate(self.faults):
            steps.append((fault.start, n, "start", fault))
            steps.append((fault.stop, n, "stop", fault))
            for toggle in fault.params.get("toggles", []):
                steps.append((fault.start + toggle, n, "toggle", fault))
        steps.sort(key=lambda s: (s[0], s[2] != "stop"))
        resolved: dict[int, int] = {}
        cut: dict[int, bool] = {}
        for at, n, what, fault in steps:
            if self.done.wait(max(0.0, at - self.history.now())):
                return
            try:
                if what == "start":
                    resolved[n] = self._begin(fault)
                    cut[n] = True
                elif what == "toggle" and n in resolved:
                    cut[n] = not cut[n]
                    self._toggle(fault, cut[n])
                elif n in resolved:
                    self._end(fault, resolved[n])
            except Exception as exc:  # a fault that could not be applied: noted, run goes on
                self.errors.append(f"{what} {fault.describe()}: {type(exc).__name__}: {exc}")
                self.history.add("nemesis", "info", "fault", error=self.errors[-1])

    def _toggle(self, fault: Fault, on: bool) -> None:
        if fault.kind == "flap":
            if on:
                self.cluster.cut(*(self.cluster.node_of(s) for s in fault.params["link"]))
            else:
                self.cluster.heal()
        else:
            member = self.cluster.node_of(fault.params["member"])
            self.cluster.set_clock(member, fault.params["offset_s"] if on else 0.0)
        self.history.add("nemesis", "info", "fault", kind=fault.kind, on=on)

    def _follower(self) -> int:
        leader = self.cluster.newest_leader()
        alive = self.cluster.alive()
        return next(i for i in sorted(self.cluster.ids, key=lambda i: i not in alive)
                    if i != leader)  # fmt: skip

    def _resolve(self, fault: Fault) -> int:
        """The node a process fault acts on: the leader, or the node holding the slot the
        schedule drew."""
        if fault.kind in FOLLOWER:
            return self._follower()
        target = fault.params.get("target", "leader")
        if target == "leader":
            return self.cluster.newest_leader() or self.cluster.ids[0]
        return self.cluster.node_of(int(target))

    def _begin(self, fault: Fault) -> int:
        kind, p, c = fault.kind, fault.params, self.cluster
        chosen = 0
        if kind in PARTITIONS:
            if kind in ("leader-isolated", "leader-peers"):
                chosen = c.newest_leader() or 1
            elif kind == "follower-cut":
                chosen = self._follower()
            elif kind in ("bridge", "minority"):
                chosen = c.node_of(p["members"][0])
            for a, b in sorted(links_cut(kind, p, c.slots, c.members(), chosen)):
                c.cut(a, b)
        elif kind == "loss":
            c.lose(p["probability"])
        elif kind == "flap":
            c.cut(*(c.node_of(slot) for slot in p["link"]))
        elif kind in ("pause", "pause-follower"):
            chosen = self._resolve(fault)
            c.pause(chosen)
            self._paused.add(chosen)
        elif kind in ("kill", "kill-follower"):
            chosen = self._resolve(fault)
            c.kill(chosen)
            self._killed.add(chosen)
        elif kind == "lose-unfsynced":
            chosen = self._resolve(fault)
            c.kill(chosen)
            self._killed.add(chosen)
            lost = c.lose_unfsynced(chosen)
            self.history.add("nemesis", "info", "fault", kind=kind, node=chosen,
                             lost_files=lost["files"],
                             lost_bytes=lost["restored_bytes"])  # fmt: skip
        elif kind == "clock":
            chosen = c.node_of(p["member"])
            c.set_clock(chosen, p["offset_s"])
        elif kind == "disk-full":
            chosen = self._resolve(fault)
            c.fill_disk(chosen)
            self._full.add(chosen)
        elif kind == "membership":
            chosen = c.size + 1
            c.start_joining(chosen)
            self._member_op("add", c.spec(chosen), "--timeout-s", "60")
        elif kind == "replace":
            chosen = self._replace_begin(fault)
        self.history.add("nemesis", "start", "fault", kind=kind, fault=fault.describe(),
                         node=chosen)  # fmt: skip
        return chosen

    def _end(self, fault: Fault, chosen: int) -> None:
        if fault.kind in NETWORK:
            self.cluster.heal()
        elif fault.kind in ("pause", "pause-follower"):
            self.cluster.resume(chosen)
            self._paused.discard(chosen)
        elif fault.kind in ("kill", "kill-follower", "lose-unfsynced"):
            self.cluster.start(chosen)
            self._killed.discard(chosen)
        elif fault.kind == "clock":
            self.cluster.set_clock(chosen, 0.0)
        elif fault.kind == "disk-full":
            self.cluster.free_disk(chosen)
            self._full.discard(chosen)
        elif fault.kind == "membership":
            self._member_op("remove", str(chosen), stop=chosen)
        elif fault.kind == "replace":
            self._replace_end(chosen)
        self.history.add("nemesis", "stop", "fault", kind=fault.kind, fault=fault.describe(),
                         node=chosen)  # fmt: skip

    def _replace_begin(self, fault: Fault) -> int:
        """Start replacing the fault's target (the node in its slot, or the leader); the node
        replaced. The steps run in order with every other membership step (:meth:`_in_order`),
        as the operator makes one change at a time: a disk is lost only once the previous
        replacement finished, never while the group is one member short."""
        c = self.cluster
        old = replaced_node(self._resolve(fault), c.ids, self._leaving)
        if self._replaced_total >= REPLACE_MAX:
            raise RuntimeError(f"no spare namespace left for a replacement of {old}")
        new = c.size + 2 + self._replaced_total
        self._replaced_total += 1
        lost_disk = bool(fault.params["lost_disk"])
        self._replacing[old] = (new, lost_disk)
        self._leaving.add(old)
        if lost_disk:

            def lose_disk() -> None:
                if old in c.alive():
                    c.kill(old)
                c.retire(old)  # the disk is gone with the process
                c.slots[c.slot_of(old)] = new
                self.history.add("member", "info", "lost-disk", node=old, new=new)
                self._cli_until_done("remove", str(old))

            self._in_order("lose-disk", lose_disk)
        else:

            def add() -> None:
                c.start_joining(new, own_store=True)
                self._cli_until_done("add", c.spec(new), "--timeout-s", "60")

            self._in_order("add", add)
        return old

    def _replace_end(self, old: int) -> None:
        """Finish replacing ``old``: start and add the new node (lost disk), or remove ``old``
        and retire it (add first)."""
        c = self.cluster
        if old not in self._replacing:
            return
        new, lost_disk = self._replacing.pop(old)
        if lost_disk:

            def add() -> None:
                c.start_joining(new, own_store=True)
                self._cli_until_done("add", c.spec(new), "--timeout-s", "60")

            self._in_order("add", add)
            return

        def remove() -> None:
            if self._cli_until_done("remove", str(old)):
                c.slots[c.slot_of(old)] = new
                c.retire(old)
                self.history.add("member", "info", "retired", node=old, new=new)

        self._in_order("remove", remove)

    def _cli_until_done(self, *args: str) -> bool:
        """``gannet cluster member <args>`` again every ``MEMBER_RETRY_S`` until it succeeds
        (up to ``MEMBER_OP_WAIT_S``), as the operator retries a step every pass; whether it
        did."""
        deadline = time.monotonic() + MEMBER_OP_WAIT_S
        while True:
            self.history.add("member", "invoke", args[0], args=list(args[1:]))
            ok, text = self.cluster.member_cli(*args)
            self.history.add("member", "ok" if ok else "info", args[0], output=text)
            if ok:
                return True
            if time.monotonic() > deadline:
                self.errors.append(f"member {' '.join(args)}: gave up after "
                                   f"{MEMBER_OP_WAIT_S:.0f} s: {text}")  # fmt: skip
                return False
            threading.Event().wait(MEMBER_RETRY_S)

    def _in_order(self, name: str, work: Callable[[], None]) -> None:
        """``work`` on a thread of its own, after every membership step before it."""
        previous = self._members[-1] if self._members else None

        def run() -> None:
            if previous is not None:
                previous.join()
            try:
                work()
            except Exception as exc:
                self.errors.append(f"member {name}: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=run, name=f"member-{name}", daemon=True)
        thread.start()
        self._members.append(thread)

    def _member_op(self, *args: str, stop: int = 0) -> None:
        """``gannet cluster member <args>`` once, after every membership step before it;
        ``stop``: then stop that member's process."""

        def run() -> None:
            self.history.add("member", "invoke", args[0], args=list(args[1:]))
            ok, text = self.cluster.member_cli(*args)
            self.history.add("member", "ok" if ok else "info", args[0], output=text)
            if stop:
                self.cluster.stop_member(stop)

        self._in_order(args[0], run)

    def heal_all(self) -> None:
        """Stop the schedule and undo whatever is still in force (network first: a
        membership change waiting for a reachable majority then goes through)."""
        self.done.set()
        self.join(30)
        self.cluster.heal()
        for member in list(self._paused):
            self.cluster.resume(member)
        for member in list(self._killed):
            self.cluster.start(member)
        for member in list(self._full):
            self.cluster.free_disk(member)
        if self.cluster.clocks:
            for member in self.cluster.ids:
                self.cluster.set_clock(member, 0.0)
        self._paused.clear()
        self._killed.clear()
        self._full.clear()
        for old in list(self._replacing):  # a replacement begun, never ended: finish it
            self._replace_end(old)
        for thread in self._members:
            thread.join(MEMBER_OP_WAIT_S)
        spare = self.cluster.size + 1
        if spare in self.cluster.processes:  # added and never removed: remove it now
            self._member_op("remove", str(spare), stop=spare)
            self._members[-1].join(MEMBER_OP_WAIT_S)
        self.history.add("nemesis", "info", "fault", healed="all")
