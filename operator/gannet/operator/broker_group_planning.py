"""What to do next about a GannetCluster's broker groups (pure; no IO).

Called by :mod:`gannet.operator.broker_group_handling` once per GannetCluster pass, with what it
read from the API server (which groups have a StatefulSet) and from the brokers (each group's
leader, its topics and consumer groups, and the lag of a draining group). It answers with the
steps of this pass:

- **Grow.** Groups ``0 .. spec.brokerGroups - 1`` are *serving*: their objects are applied
  (:func:`serving_groups`). A serving group that has a leader but lacks a topic or consumer group
  that the other serving groups define gets it created there alone (:class:`CreateDefinitions`;
  the write is scoped to that group, so nothing else changes). New queues start empty; data stays
  where it is, as in RocketMQ.
- A serving group whose topic permission differs from group 0's gets group 0's
  (:func:`permissions_to_restore`: a drain undone by raising ``brokerGroups`` again).
- **Shrink = drain**, each group ``>= spec.brokerGroups`` that still has a StatefulSet
  (:func:`drain_step`): (1) every topic of the group that is still writable there becomes
  read-only on that group only (:class:`MakeReadOnly`; the other groups keep their permission),
  so producers move to the other groups at the next route refresh; (2) the operator waits until
  every consumer group has lag 0 on the group's queues (:class:`WaitForLag` names each
  consumer group, topic and lag); a consumer group counts for a topic when it has offsets for it
  in any group (a subscriber that has not reached this group yet still has to drain it), and
  the messages of a topic no consumer group has ever consumed hold the drain too
  (:func:`unconsumed`: they would be lost unread). Retry (``%RETRY%``) and dead-letter
  (``%DLQ%``) topics holding messages count like the others (they stay writable: revive keeps
  writing redeliveries there while the drain waits). Messages the group holds outside its
  queues hold the drain too (:func:`undelivered`): delayed messages still in its timer wheel
  and prepared transactional messages not yet committed or rolled back; once delivered they
  are in the queues and count as lag like any other message. So do pops not settled yet
  (:class:`UnsettledPops`): a popped message's consumer offset moves on when its checkpoint is
  written to the revive topic, and until revive has matched it with its ack (or redelivered it
  to the retry topic, where it counts as lag again) only the revive topic knows it; (3) the
  other groups forget it and its objects are deleted (:class:`DeleteGroup`). Without a leader
  in the group nothing can be read, so nothing is deleted (:class:`WaitForLeader`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence

from gannet.operator.specs import Permission

READ, WRITE = 4, 2  # RocketMQ perm bits
LAG_ROWS_SHOWN = 5
"""Consumer-group/topic pairs named in a WaitForLag message (the rest are counted)."""
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%")
"""Topics of a group a drain waits for although ``ListTopics`` does not list them."""


@dataclasses.dataclass(frozen=True, slots=True)
class TopicDef:
    """A topic's definition as one group holds it."""

    name: str
    queues: int
    permission: Permission
    message_type: str
    tier_remote_retention_s: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDef:
    """A consumer group's definition as one group holds it."""

    name: str
    fifo: bool
    retry_max_times: int


@dataclasses.dataclass(frozen=True, slots=True)
class Undelivered:
    """Messages of one topic a broker group holds outside its queues (``DescribeTopic``):
    delayed ones in its timer wheel (the latest due at ``last_due_ms``, Unix ms) and prepared
    transactional ones. ``counted`` is False when the member asked does not run the timer
    wheel (not the leader, or a broker that does not count them): then nothing is known."""

    delayed: int = 0
    last_due_ms: int = 0
    prepared: int = 0
    counted: bool = True

    @property
    def holds(self) -> bool:
        return self.delayed > 0 or self.prepared > 0 or not self.counted


@dataclasses.dataclass(frozen=True, slots=True)
class UnsettledPops:
    """Pops a broker group has not settled (``GetReviveQueues``): checkpoints and acks still
    parked in its timer wheel until the popped messages' invisible time ends (``parked``) and
    those in its revive queues that revive has not handled yet (``backlog``). ``counted`` is
    False when the member asked does not run the timer wheel: then nothing is known."""

    parked: int = 0
    backlog: int = 0
    counted: bool = True

    @property
    def holds(self) -> bool:
        return self.parked > 0 or self.backlog > 0 or not self.counted

    def text(self) -> str:
        if not self.counted:
            return (
                "pops not settled (not counted: the member asked does not run the timer wheel, "
                "or its Gannet is older than the operator's)"
            )
        return (
            f"pops not settled ({self.parked} checkpoints and acks waiting for the popped "
            f"messages' invisible time to end, {self.backlog} in the revive queues)"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class GroupState:
    """What the operator read of one broker group this pass (``leader`` empty: none known,
    then ``topics``/``groups`` are empty too)."""

    group: int
    leader: str
    topics: tuple[TopicDef, ...] = ()
    groups: tuple[GroupDef, ...] = ()
    # consumer group -> topics it holds offsets for in this broker group
    subscriptions: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    # (consumer group, topic) -> lag in this broker group, where it holds offsets
    lag: Mapping[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    # topic -> messages stored in this broker group (max - min offset over its queues); the
    # group's retry (%RETRY%) and dead-letter (%DLQ%) topics too, which ``topics`` leaves out
    messages: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # topic -> its messages outside the queues (timer wheel, prepared transactions), for the
    # same topics as ``messages``
    undelivered: Mapping[str, Undelivered] = dataclasses.field(default_factory=dict)
    pops: UnsettledPops = UnsettledPops()

    def drained_topics(self) -> set[str]:
        """Every topic a drain waits for here: the listed ones plus the retry and dead-letter
        topics that hold messages or that a consumer group has lag on (a retry topic is
        consumed by its consumer group, a dead-letter topic by whoever reads it; both are lost
        with the group's store)."""
        system = {name for name in self.messages if name.startswith(SYSTEM_TOPIC_PREFIXES)}
        system.update(t for _, t in self.lag if t.startswith(SYSTEM_TOPIC_PREFIXES))
        return {t.name for t in self.topics} | system


@dataclasses.dataclass(frozen=True, slots=True)
class CreateDefinitions:
    group: int
    topics: tuple[TopicDef, ...]
    groups: tuple[GroupDef, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class MakeReadOnly:
    group: int
    topics: tuple[TopicDef, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class WaitForLeader:
    group: int


@dataclasses.dataclass(frozen=True, slots=True)
class WaitForLag:
    group: int
    pending: tuple[tuple[str, str, int], ...]  # (consumer group, topic, lag), largest first
    # (topic, messages) of topics no consumer group has ever consumed, largest first
    unconsumed: tuple[tuple[str, int], ...] = ()
    # (topic, its messages outside the queues) still to be delivered, by topic name
    held: tuple[tuple[str, Undelivered], ...] = ()
    pops: UnsettledPops | None = None  # when they hold the drain

    @property
    def total(self) -> int:
        return sum(lag for _, _, lag in self.pending)

    @property
    def unconsumed_total(self) -> int:
        return sum(n for _, n in self.unconsumed)

    def message(self, broker_name: str) -> str:
        parts = []
        if self.pending:
            shown = ", ".join(f"{g} on {t}: {n}" for g, t, n in self.pending[:LAG_ROWS_SHOWN])
            parts.append(
                "for consumer groups to consume its queues "
                f"(lag {shown}{_more(self.pending)}; {self.total} messages in all)"
            )
        if self.unconsumed:
            shown = ", ".join(f"{t}: {n}" for t, n in self.unconsumed[:LAG_ROWS_SHOWN])
            parts.append(
                "for messages of topics no consumer group has consumed "
                f"({shown}{_more(self.unconsumed)}; {self.unconsumed_total} messages in all: "
                "consume them with a consumer group, delete the topic, or let retention "
                "remove them)"
            )
        if self.held:
            parts.append(f"for messages not in its queues yet ({_held_text(self.held)})")
        if self.pops is not None:
            parts.append(f"for {self.pops.text()}")
        return f"draining {broker_name}: waiting " + ", and ".join(parts)


def _held_text(held: Sequence[tuple[str, Undelivered]]) -> str:
    delayed, prepared, unknown = [], [], []
    for topic, u in held:
        if not u.counted:
            unknown.append(topic)
        elif u.delayed:
            delayed.append(
                f"{u.delayed} delayed messages in topic {topic}, last due {_utc(u.last_due_ms)}"
            )
        if u.prepared:
            prepared.append(f"{u.prepared} prepared transactions in topic {topic}")
    parts = [*delayed[:LAG_ROWS_SHOWN]]
    if len(delayed) > LAG_ROWS_SHOWN:
        parts.append(f"delayed messages in {len(delayed) - LAG_ROWS_SHOWN} more topics")
    parts += prepared[:LAG_ROWS_SHOWN]
    if len(prepared) > LAG_ROWS_SHOWN:
        parts.append(f"prepared transactions in {len(prepared) - LAG_ROWS_SHOWN} more topics")
    text = "; ".join(parts)
    if delayed:
        text += " (delivered to the queues when due, then consumed like any message)"
    if prepared:
        text += (
            "; prepared transactions wait for their producers to commit or roll back, or for "
            "the broker's transaction checks to give up on them"
        )
    if unknown:
        shown = ", ".join(unknown[:LAG_ROWS_SHOWN]) + _more(unknown)
        text += (
            f"{'; ' if text else ''}delayed messages of {shown} not counted: the member asked "
            "does not run the timer wheel (no leader yet, or a broker version without the count)"
        )
    return text


def _utc(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def _more(rows: Sequence[object]) -> str:
    more = len(rows) - LAG_ROWS_SHOWN
    return f" and {more} more" if more > 0 else ""


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteGroup:
    group: int


DrainStep = MakeReadOnly | WaitForLeader | WaitForLag | DeleteGroup


def serving_groups(desired: int) -> range:
    return range(desired)


def draining_groups(desired: int, existing: Sequence[int]) -> list[int]:
    """Groups with objects but beyond the desired count, highest first."""
    return sorted((g for g in set(existing) if g >= desired), reverse=True)


def groups_of_status(
    desired: int, rows: Sequence[Mapping[str, object]]
) -> tuple[list[int], list[int]]:
    """(serving groups with a leader, draining groups) as ``status.brokerGroups`` ``rows``
    last showed them, for a Topic resource's reconcile (:func:`topic_planning.scope_to_serving`).
    Group 0 always serves; a serving group without a leader yet is left out (it gets group 0's
    permissions once it has one, :func:`permissions_to_restore`)."""
    existing: list[int] = []
    led = {0}
    for row in rows:
        group = row.get("group")
        if isinstance(group, int) and group >= 0:
            existing.append(group)
            if row.get("leader"):
                led.add(group)
    serving = sorted(g for g in led if g < max(desired, 1))
    return serving, sorted(draining_groups(max(desired, 1), existing))


def missing_definitions(
    target: GroupState, others: Sequence[GroupState]
) -> CreateDefinitions | None:
    """What ``target`` lacks of the topics and consumer groups the other serving groups with a
    leader define (the first definition found, in group order, wins). None when nothing is
    missing or ``target`` has no leader yet."""
    if not target.leader:
        return None
    have_topics = {t.name for t in target.topics}
    have_groups = {g.name for g in target.groups}
    topics: dict[str, TopicDef] = {}
    groups: dict[str, GroupDef] = {}
    for other in sorted(others, key=lambda s: s.group):
        if other.group == target.group or not other.leader:
            continue
        for t in other.topics:
            if t.name not in have_topics:
                topics.setdefault(t.name, t)
        for g in other.groups:
            if g.name not in have_groups:
                groups.setdefault(g.name, g)
    if not topics and not groups:
        return None
    return CreateDefinitions(
        target.group,
        tuple(topics[n] for n in sorted(topics)),
        tuple(groups[n] for n in sorted(groups)),
    )


def permissions_to_restore(
    target: GroupState, reference: GroupState
) -> tuple[tuple[TopicDef, Permission], ...]:
    """Topics of serving group ``target`` whose permission differs from ``reference``'s (group
    0, where Topic resources are reconciled): a drain undone by raising ``brokerGroups`` again
    left them read-only. Empty without leaders on both sides, or for group 0 itself."""
    if not target.leader or not reference.leader or target.group == reference.group:
        return ()
    wanted = {t.name: t.permission for t in reference.topics}
    return tuple(
        (t, wanted[t.name])
        for t in sorted(target.topics, key=lambda t: t.name)
        if t.name in wanted and wanted[t.name] != t.permission
    )


def drain_lag(draining: GroupState, all_groups: Sequence[GroupState]) -> list[tuple[str, str, int]]:
    """(consumer group, topic, lag) still to be consumed on ``draining``, largest lag first.
    A consumer group subscribes a topic when it holds offsets for it in any group; where it has
    none on ``draining`` its lag there is every message the topic holds there."""
    topics = draining.drained_topics()
    subscribed: set[tuple[str, str]] = set()
    for state in all_groups:
        for consumer, names in state.subscriptions.items():
            subscribed.update((consumer, t) for t in names if t in topics)
    found: list[tuple[str, str, int]] = []
    for consumer, topic in sorted(subscribed):
        lag = draining.lag.get((consumer, topic))
        if lag is None:
            lag = draining.messages.get(topic, 0)
        if lag > 0:
            found.append((consumer, topic, lag))
    found.sort(key=lambda row: (-row[2], row[0], row[1]))
    return found


def unconsumed(draining: GroupState, all_groups: Sequence[GroupState]) -> list[tuple[str, int]]:
    """(topic, messages stored on ``draining``) of its topics that no consumer group holds
    offsets for in any group, largest first: deleting the group would lose them unread (a
    RocketMQ broker removed takes its data along; Gannet waits instead)."""
    subscribed = {
        t for state in all_groups for names in state.subscriptions.values() for t in names
    }
    found = [
        (name, n)
        for name in draining.drained_topics()
        if name not in subscribed and (n := draining.messages.get(name, 0)) > 0
    ]
    found.sort(key=lambda row: (-row[1], row[0]))
    return found


def undelivered(draining: GroupState) -> list[tuple[str, Undelivered]]:
    """(topic, what of it is still outside the queues) of every drained topic of ``draining``
    that holds delayed or prepared transactional messages, by name: deleting the group would
    lose them before they were ever delivered."""
    return [(name, u) for name, u in sorted(draining.undelivered.items()) if u.holds]


def drain_step(draining: GroupState, all_groups: Sequence[GroupState]) -> DrainStep:
    """The next step of draining one group (module docstring)."""
    if not draining.leader:
        return WaitForLeader(draining.group)
    writable = tuple(t for t in draining.topics if t.permission.value & WRITE)
    if writable:
        return MakeReadOnly(draining.group, writable)
    pending = drain_lag(draining, all_groups)
    left = unconsumed(draining, all_groups)
    held = undelivered(draining)
    pops = draining.pops if draining.pops.holds else None
    if pending or left or held or pops:
        return WaitForLag(draining.group, tuple(pending), tuple(left), tuple(held), pops)
    return DeleteGroup(draining.group)


def read_only(permission: Permission) -> Permission:
    """The permission a draining group's topic gets: reads stay as they were, writes stop."""
    return Permission.ReadOnly if permission.value & READ else Permission.Deny
