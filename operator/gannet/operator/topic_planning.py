"""What to do for one Topic resource, given what the broker has (pure; no IO).

Called by :mod:`gannet.operator.handlers` on create, update, resume and on the refresh timer;
the resulting :class:`TopicPlan` is carried out by :mod:`gannet.operator.brokers` calls and its
condition written to ``status``. Rules, as Strimzi's KafkaTopic:

- the topic is missing → create it with the spec's queues, permission and message type;
- queues may grow (UpdateTopic), never shrink → ``Ready=False reason=NotSupported``;
- permission and message type changes are applied, and so is the topic's tier retention
  (``spec.tier.remoteRetentionSeconds`` → the topic attribute ``gannet.tier.remote.retention.s``,
  set, changed, or removed when the spec drops it);
- the topic name is fixed once created (``status.topicName``); a changed ``spec.topicName``
  (rename) → ``NotSupported`` and the old topic stays as it is;
- another resource owning the same topic → ``ResourceConflict`` (see :mod:`claims`);
- ``gannet.io/managed: "false"`` or ``gannet.io/pause-reconciliation: "true"`` → no changes.

While broker groups of the cluster drain (:mod:`broker_group_planning`), a change is scoped so
that a draining group stays read-only (:func:`scope_to_serving`): a create goes to the serving
groups only, and an update's permission is written to each serving group alone; its queues and
message type still go everywhere (a drain undone finds the same queues).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gannet.operator import claims, conditions
from gannet.operator.conditions import Condition
from gannet.operator.specs import Permission, TopicSpec

TIER_RETENTION_ATTRIBUTE = "gannet.tier.remote.retention.s"
"""The broker's topic attribute for ``spec.tier.remoteRetentionSeconds`` (whole seconds)."""


def tier_retention_of(attributes: Mapping[str, str]) -> int | None:
    """The tier retention a broker's topic attributes carry (None: none, or not a number)."""
    value = attributes.get(TIER_RETENTION_ATTRIBUTE)
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerTopic:
    """A topic as the broker reports it."""

    name: str
    queues: int
    permission: Permission
    message_type: str
    tier_remote_retention_s: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    queues: int
    permission: Permission
    message_type: str
    tier_remote_retention_s: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class UpdateTopic:
    name: str
    queues: int | None
    permission: Permission | None
    message_type: str | None
    tier_remote_retention_s: int | None = None
    """A retention to set (None: unchanged, or removed with ``tier_remote_retention_removed``)."""
    tier_remote_retention_removed: bool | None = None
    """True: remove the topic's tier retention (None, never False, so events list only what
    changes)."""

    def changes(self) -> bool:
        return (
            self.queues,
            self.permission,
            self.message_type,
            self.tier_remote_retention_s,
            self.tier_remote_retention_removed,
        ) != (None, None, None, None, None)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicPlan:
    action: CreateTopic | UpdateTopic | None
    condition: Condition
    # The name to record in status.topicName (None: leave it as it is).
    holds: str | None


def plan(
    spec: TopicSpec,
    observed: BrokerTopic | None,
    *,
    held_name: str | None,
    winner: claims.Claim | None,
    resource: str,
    managed: bool = True,
    paused: bool = False,
) -> TopicPlan:
    """The plan for resource ``resource``; ``observed`` is the broker's topic (None: missing)."""
    refused = claims.blocked(
        "topic",
        spec.topic_name,
        held_name=held_name,
        winner=winner,
        resource=resource,
        managed=managed,
        paused=paused,
        rename_hint=f"; set spec.topicName back to {held_name!r} or create a new Topic resource",
    )
    if refused is not None:
        return TopicPlan(None, refused, None)
    if observed is None:
        return TopicPlan(
            CreateTopic(
                spec.topic_name,
                spec.queues,
                spec.permission,
                spec.message_type,
                spec.tier_remote_retention_s,
            ),
            _ready(spec),
            spec.topic_name,
        )
    if spec.queues < observed.queues:
        return TopicPlan(
            None,
            conditions.not_supported(
                f"decreasing queues of topic {spec.topic_name!r} from {observed.queues} to "
                f"{spec.queues} is not supported",
            ),
            spec.topic_name,
        )
    retention = spec.tier_remote_retention_s
    retention_changed = retention != observed.tier_remote_retention_s
    update = UpdateTopic(
        spec.topic_name,
        spec.queues if spec.queues != observed.queues else None,
        spec.permission if spec.permission != observed.permission else None,
        spec.message_type if spec.message_type != observed.message_type else None,
        retention if retention_changed else None,
        True if retention_changed and retention is None else None,
    )
    return TopicPlan(update if update.changes() else None, _ready(spec), spec.topic_name)


def _ready(spec: TopicSpec) -> Condition:
    return Condition(
        conditions.READY,
        True,
        conditions.RECONCILED,
        f"topic {spec.topic_name!r} has {spec.queues} queues",
    )


def should_delete(*, held_name: str | None, managed: bool, is_owner: bool) -> bool:
    """Whether deleting the resource deletes the topic: only the owner's, only when managed."""
    return bool(held_name) and managed and is_owner


@dataclasses.dataclass(frozen=True, slots=True)
class ScopedCreate:
    """A CreateTopic limited to the serving broker groups (``CreateTopic.broker_groups``)."""

    create: CreateTopic
    groups: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ScopedUpdate:
    """An UpdateTopic while groups drain: ``fanned_out`` (queues, message type and tier
    retention, no permission; None when none changes) goes to every group as usual;
    ``permission`` is written to each of ``groups`` (the serving ones) alone."""

    name: str
    fanned_out: UpdateTopic | None
    permission: Permission | None
    groups: tuple[int, ...]


def scope_to_serving(
    action: CreateTopic | UpdateTopic, serving: Sequence[int], draining: Sequence[int]
) -> CreateTopic | UpdateTopic | ScopedCreate | ScopedUpdate:
    """``action`` as it must be sent while ``draining`` groups drain: unchanged when none
    does; else no write that could make a draining group's queues writable (the drain owns
    their permission: read-only until they are deleted, or group 0's again when undone)."""
    if not draining:
        return action
    groups = tuple(sorted(set(serving) - set(draining)))
    if isinstance(action, CreateTopic):
        return ScopedCreate(action, groups)
    rest = dataclasses.replace(action, permission=None)
    fanned_out = rest if rest.changes() else None
    return ScopedUpdate(action.name, fanned_out, action.permission, groups)
