"""Kubernetes Events about the operator's resources: what ``kubectl describe`` shows.

kopf 1.45 does not turn log records into Events (its posting is off), so the operator posts its
own. One reconcile pass (:func:`gannet.operator.handlers.one_pass_at_a_time`) collects them in a
:class:`Pending`: the steps it took (``Normal``: topic created, queues grown, object created,
pod restarted, leadership moved, revive queues changed, cleanup run, topic released) and,
through :func:`from_conditions`, every condition that changed (``Warning`` when it turned
False or Unknown: invalid spec, shrink refused, broker unavailable or refusing, scale-down
blocked; ``Normal`` when it turned True). After the status is written, :func:`post` creates
them as ``core/v1`` Events on the resource, with ``source.component`` ``gannet-operator``.

Events are best effort: one that cannot be posted is logged and dropped, never failing the
pass. A pass posts at most :data:`PER_PASS_MAX` and cuts messages at :data:`MESSAGE_MAX`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from gannet.operator import conditions, resources
from gannet.operator.kube import Kube, KubeError

log = logging.getLogger(__name__)

COMPONENT: Final = "gannet-operator"
MESSAGE_MAX: Final = 1024
PER_PASS_MAX: Final = 20
NORMAL: Final = "Normal"
WARNING: Final = "Warning"


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class Pending:
    """The Events one pass will post, in order (bounded by :data:`PER_PASS_MAX`)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, event: Event) -> None:
        if len(self.events) < PER_PASS_MAX:
            self.events.append(event)

    def normal(self, reason: str, message: str) -> None:
        self.add(Event(NORMAL, reason, message))

    def warning(self, reason: str, message: str) -> None:
        self.add(Event(WARNING, reason, message))


def from_conditions(
    before: Iterable[Mapping[str, Any]] | None, after: Iterable[Mapping[str, Any]] | None
) -> list[Event]:
    """An Event for every condition of ``after`` whose status, reason or message differs from
    ``before``: Warning unless it is True."""
    old = {str(c.get("type")): c for c in before or ()}
    found: list[Event] = []
    for condition in after or ():
        kind = str(condition.get("type"))
        previous = old.get(kind) or {}
        fields = ("status", "reason", "message")
        if all(previous.get(f) == condition.get(f) for f in fields):
            continue
        status = str(condition.get("status"))
        reason = str(condition.get("reason") or kind)
        message = str(condition.get("message") or "")
        text = f"{kind}={status}" + (f": {message}" if message else "")
        found.append(Event(NORMAL if status == "True" else WARNING, reason, text))
    return found


def body(
    kind: str,
    meta: Mapping[str, Any],
    event: Event,
    *,
    now: dt.datetime,
    api_version: str = resources.API_VERSION,
) -> dict[str, Any]:
    """The ``core/v1`` Event object for ``event`` on the resource described by ``meta``."""
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    stamp = conditions.timestamp(now)
    message = event.message
    if len(message) > MESSAGE_MAX:
        message = message[: MESSAGE_MAX - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "uid": str(meta.get("uid") or ""),
            "resourceVersion": str(meta.get("resourceVersion") or ""),
        },
        "type": event.type,
        "reason": event.reason,
        "message": message,
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def post(
    kube: Kube, kind: str, meta: Mapping[str, Any], found: Iterable[Event], *, now: dt.datetime
) -> int:
    """Create each Event on the resource; returns how many the API server took."""
    posted = 0
    for event in found:
        try:
            await kube.create(body(kind, meta, event, now=now))
        except KubeError as exc:
            log.warning(
                "cannot post the %s event %s on %s %s/%s: %s",
                event.type,
                event.reason,
                kind,
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )
        else:
            posted += 1
    return posted
