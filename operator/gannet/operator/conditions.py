"""Status conditions in the Kubernetes shape (pure; no IO).

A condition is ``{type, status, reason, message, lastTransitionTime, observedGeneration}``.
:func:`merge` puts a new condition into a list the way controllers are expected to: the
transition time changes only when ``status`` changes, so a timer that re-asserts Ready=True
does not make the resource look freshly changed. Handlers write the resulting list whole.

Reasons used by the operator (``Ready`` unless noted): ``Reconciled``, ``NotSupported`` (shrink,
rename, or a field the admin API cannot change), ``ResourceConflict`` (another resource claims
the same topic or group), ``BrokerUnavailable``, ``BrokerRefused``, ``InvalidSpec``,
``Paused``; on GannetCluster also ``ScaleDownBlocked``, ``MemberChangeBlocked``,
``MemberChangeRefused`` (type ``Scaling``; :mod:`gannet.operator.membership_handling`),
``RollingUpdate``; type ``TierOffload`` (``spec.tier``): ``Offloading``, ``TierOffloadFailing``,
``TierCredentialsRejected``, ``TierNotServed`` (:mod:`gannet.operator.tier_planning`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

READY = "Ready"
RECONCILED = "Reconciled"
NOT_SUPPORTED = "NotSupported"
RESOURCE_CONFLICT = "ResourceConflict"
BROKER_UNAVAILABLE = "BrokerUnavailable"
BROKER_REFUSED = "BrokerRefused"
INVALID_SPEC = "InvalidSpec"
PAUSED = "Paused"


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool | None  # None is "Unknown"
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else str(self.status)


def timestamp(now: dt.datetime) -> str:
    """RFC 3339 in UTC with a Z, as Kubernetes writes times."""
    return now.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def merge(
    existing: Sequence[Mapping[str, Any]] | None,
    condition: Condition,
    *,
    generation: int | None,
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """``existing`` with ``condition`` replacing the one of its type (others kept, order kept)."""
    old = next((c for c in existing or () if c.get("type") == condition.type), None)
    changed = old is None or old.get("status") != condition.status_text
    entry: dict[str, Any] = {
        "type": condition.type,
        "status": condition.status_text,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": (
            timestamp(now) if changed or old is None else old.get("lastTransitionTime")
        ),
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    result = [dict(c) for c in existing or () if c.get("type") != condition.type]
    position = next(
        (i for i, c in enumerate(existing or ()) if c.get("type") == condition.type), len(result)
    )
    result.insert(position, entry)
    return result


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or () if c.get("type") == type_), None)


def not_supported(message: str) -> Condition:
    """``Ready=False reason=NotSupported``: a change the operator will not make (shrink,
    rename, a field the admin API cannot change)."""
    return Condition(READY, False, NOT_SUPPORTED, message)
