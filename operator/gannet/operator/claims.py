"""Which resource owns a broker-side name when several resources name it (pure; no IO).

Strimzi's rule, kept here: one resource per topic (or group) per cluster. When two Topic
resources in a namespace name the same topic on the same GannetCluster, the one that already
holds it (its ``status.topicName`` says so) wins; otherwise the older one (creationTimestamp),
then the smaller resource name. The others get ``Ready=False reason=ResourceConflict`` and never
touch the broker. The handlers keep a kopf index of :class:`Claim` values keyed by
:class:`ClaimKey`; :func:`blocked` is the gate the topic and group plans share before they look
at the broker (a rename, a lost claim, an unmanaged or paused resource).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from gannet.operator import conditions
from gannet.operator.conditions import Condition


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class ClaimKey:
    namespace: str
    cluster: str
    name: str  # the topic or group name on the brokers


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    resource: str  # metadata.name of the claiming resource
    created: str  # metadata.creationTimestamp (RFC 3339 sorts as text); "" when unknown
    holds: bool  # status already names this topic/group: this resource created it

    def rank(self) -> tuple[bool, bool, str, str]:
        # Holders first; then resources with a known creation time, oldest first; then by name.
        return (not self.holds, not self.created, self.created, self.resource)


def owner(claims: Iterable[Claim]) -> Claim | None:
    """The winning claim, or None when there are none."""
    return min(claims, key=Claim.rank, default=None)


def conflict_message(kind: str, name: str, winner: Claim) -> str:
    return f"{kind} {name!r} is already managed by resource {winner.resource!r}"


def blocked(
    kind: str,
    name: str,
    *,
    held_name: str | None,
    winner: Claim | None,
    resource: str,
    managed: bool,
    paused: bool,
    rename_hint: str = "",
) -> Condition | None:
    """Why resource ``resource`` naming the ``kind`` (``topic``/``group``) ``name`` must not
    touch the brokers, or None when it may: it held another name (a rename, refused;
    ``rename_hint`` is appended to the message), another resource won the claim, or it is
    unmanaged or paused."""
    if held_name and held_name != name:
        return conditions.not_supported(
            f"renaming {kind} {held_name!r} to {name!r} is not supported{rename_hint}"
        )
    if winner is not None and winner.resource != resource:
        return Condition(
            conditions.READY,
            False,
            conditions.RESOURCE_CONFLICT,
            conflict_message(kind, name, winner),
        )
    if not managed or paused:
        reason = "Unmanaged" if not managed else conditions.PAUSED
        return Condition(conditions.READY, None, reason, "changes are not applied to the brokers")
    return None
