"""The ``TierOffload`` condition of a GannetCluster with ``spec.tier`` (pure; no IO).

:mod:`gannet.operator.cluster_handling` asks each broker group's leader for ``GetTierStatus``
(the leader uploads; :meth:`gannet.operator.brokers.Brokers.tier_status`) on every pass and hands
the answers here. :func:`tier_condition` turns them into one condition; the Events follow from
its changes (:func:`gannet.operator.events.from_conditions`: a Warning when it turns False or its
reason or message changes, a Normal when it turns True again). So that a failing bucket posts one
Event per change of reason, not one per pass, the message of a still-failing condition is kept
while the same groups fail for the same reasons (the bucket's error text may differ per pass).

Reasons: ``TierCredentialsRejected`` (the bucket refused the credentials: fix the Secret; said
once), ``TierOffloadFailing`` (any other failure reason of the broker's offload loop:
``unavailable``, ``rejected``, ``gap``, ...; the reason and the broker's message are in the
condition's message), ``Offloading`` (True: every group's latest pass succeeded).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from gannet.operator import conditions
from gannet.operator.conditions import Condition

TIER_OFFLOAD = "TierOffload"
OFFLOADING = "Offloading"
OFFLOAD_FAILING = "TierOffloadFailing"
CREDENTIALS_REJECTED = "TierCredentialsRejected"
CREDENTIALS_REASON = "credentials"
ERROR_CHARS_MAX = 300
"""Of each broker's error message in the condition (Events cut at 1024 characters)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TierView:
    """One broker's ``GetTierStatus`` answer, as far as the operator acts on it."""

    enabled: bool
    passes_total: int = 0
    failing_reason: str = ""
    last_error: str = ""
    objects: int = 0
    size_bytes: int = 0
    last_success_ms: int = 0


def _failing_prefix(failing: list[tuple[str, TierView]]) -> str:
    key = ", ".join(f"{broker}: {view.failing_reason}" for broker, view in failing)
    return f"tier offload failing ({key})"


def tier_condition(
    views: Mapping[str, TierView | None], previous: Mapping[str, Any] | None
) -> Condition | None:
    """The condition for the answers by broker name (None: that leader did not answer); None
    when nothing is known yet (keep ``previous`` as it is)."""
    known = {
        b: v
        for b, v in sorted(views.items())
        if v is not None and (v.passes_total > 0 or not v.enabled)
    }
    failing = [(b, v) for b, v in known.items() if v.enabled and v.failing_reason]
    if failing:
        credentials = [(b, v) for b, v in failing if v.failing_reason == CREDENTIALS_REASON]
        reason = CREDENTIALS_REJECTED if credentials else OFFLOAD_FAILING
        shown = credentials or failing
        prefix = _failing_prefix(shown)
        old = previous or {}
        old_message = str(old.get("message") or "")
        if (
            old.get("status") == "False"
            and old.get("reason") == reason
            and old_message.startswith(prefix + ":")
        ):
            return Condition(TIER_OFFLOAD, False, reason, old_message)
        details = "; ".join(f"{b}: {v.last_error[:ERROR_CHARS_MAX]}" for b, v in shown)
        hint = (
            " (check the Secret named in spec.tier.credentialsSecret)"
            if credentials
            else "; writes go on, offload retries with backoff"
        )
        return Condition(TIER_OFFLOAD, False, reason, f"{prefix}: {details}{hint}")
    if len(known) < len(views) or not known:
        return None  # a leader did not answer or has not run a pass yet: nothing new
    disabled = sorted(b for b, v in known.items() if not v.enabled)
    if disabled:
        return Condition(
            TIER_OFFLOAD,
            None,
            "TierNotServed",
            f"brokers without a tier yet: {', '.join(disabled)} (pods not rolled yet?)",
        )
    return Condition(TIER_OFFLOAD, True, OFFLOADING, "every broker group's offload pass succeeds")


def status_rows(views: Mapping[str, TierView | None]) -> list[dict[str, Any]]:
    """``status.tier.groups``: per broker group that answered, the tier as its leader sees it
    (objects and bytes of the applied manifest, the last successful offload pass, the failing
    reason); groups whose leader did not answer are left out."""
    rows: list[dict[str, Any]] = []
    for broker, view in sorted(views.items()):
        if view is None or not view.enabled:
            continue
        success = (
            conditions.timestamp(dt.datetime.fromtimestamp(view.last_success_ms / 1000, dt.UTC))
            if view.last_success_ms > 0
            else None
        )
        rows.append(
            {
                "brokerName": broker,
                "objects": view.objects,
                "bytes": view.size_bytes,
                "lastSuccessTime": success,
                "failingReason": view.failing_reason or None,
            }
        )
    return rows
