"""What to do for one ConsumerGroup resource, given what the broker has (pure; no IO).

Called by :mod:`gannet.operator.handlers` like :mod:`topic_planning`. Rules: a missing group is
created (FIFO flag, retry count); FIFO, max delivery attempts and consume-enabled changes are
applied with UpdateGroup; renames are refused (``NotSupported``); a second resource for the same
group gets ``ResourceConflict``; a ``spec.retryPolicy`` different from the broker's is reported
as ``NotSupported`` because the admin API cannot change it.
"""

from __future__ import annotations

import dataclasses

from gannet.operator import claims, conditions
from gannet.operator.conditions import Condition
from gannet.operator.specs import GroupSpec


@dataclasses.dataclass(frozen=True, slots=True)
class ObservedGroup:
    name: str
    fifo: bool
    retry_max_times: int
    consume_enabled: bool
    retry_policy: str


@dataclasses.dataclass(frozen=True, slots=True)
class CreateGroup:
    name: str
    fifo: bool
    retry_max_times: int


@dataclasses.dataclass(frozen=True, slots=True)
class UpdateGroup:
    name: str
    fifo: bool | None
    retry_max_times: int | None
    consume_enabled: bool | None


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPlan:
    action: CreateGroup | UpdateGroup | None
    condition: Condition
    holds: str | None


def plan(
    spec: GroupSpec,
    observed: ObservedGroup | None,
    *,
    held_name: str | None,
    winner: claims.Claim | None,
    resource: str,
    managed: bool = True,
    paused: bool = False,
) -> GroupPlan:
    refused = claims.blocked(
        "group",
        spec.group_name,
        held_name=held_name,
        winner=winner,
        resource=resource,
        managed=managed,
        paused=paused,
    )
    if refused is not None:
        return GroupPlan(None, refused, None)
    if observed is None:
        create = CreateGroup(spec.group_name, spec.fifo, spec.retry_max_times)
        # A new group is consume-enabled; a disabled one needs an update right after the create.
        return GroupPlan(create, _ready(spec), spec.group_name)
    update = UpdateGroup(
        spec.group_name,
        spec.fifo if spec.fifo != observed.fifo else None,
        spec.retry_max_times if spec.retry_max_times != observed.retry_max_times else None,
        spec.consume_enabled if spec.consume_enabled != observed.consume_enabled else None,
    )
    changed = (update.fifo, update.retry_max_times, update.consume_enabled) != (None, None, None)
    condition = _ready(spec)
    if spec.retry_policy is not None and spec.retry_policy != observed.retry_policy:
        condition = conditions.not_supported(
            f"group {spec.group_name!r} uses retry policy {observed.retry_policy}; the admin API "
            f"cannot change it to {spec.retry_policy}",
        )
    return GroupPlan(update if changed else None, condition, spec.group_name)


def _ready(spec: GroupSpec) -> Condition:
    return Condition(
        conditions.READY,
        True,
        conditions.RECONCILED,
        f"group {spec.group_name!r} delivers at most {spec.max_delivery_attempts} times",
    )
