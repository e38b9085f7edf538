"""Rights: what an access key may do (grants with name patterns) and what each RPC needs.

Each access key (:class:`Account`) has grants of actions ``pub``, ``sub``, ``admin`` on topic
and group name patterns (:func:`fnmatch.fnmatchcase` wildcards, case-sensitive, ``*`` for
all). :func:`needs` says what each RPC requires: SendMessage ``pub`` on its topic;
ReceiveMessage, Ack, ChangeInvisibleDuration, DLQ forwarding, Pull and the offset RPCs ``sub``
on topic and group; QueryRoute, Heartbeat and the Telemetry settings any right on the resource;
every admin RPC ``admin`` (on the topic or group it names, if any). An RPC not listed needs
``admin`` on the broker: new RPCs are closed until classified.

Pure data and functions; :class:`gannet.node.protocol.auth.Authenticator` asks :func:`missing`
and turns the answer into a ``FORBIDDEN`` refusal; :mod:`gannet.node.protocol.credentials` builds
the accounts from files.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class Action(enum.StrEnum):
    PUB = "pub"
    SUB = "sub"
    ADMIN = "admin"


class Kind(enum.StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    """Broker-wide (admin RPCs naming no topic or group): any grant of the action."""


@dataclass(frozen=True, slots=True)
class Need:
    """One right a request requires; ``action`` None means any right on the resource."""

    action: Action | None
    kind: Kind
    name: str

    def text(self) -> str:
        what = "use" if self.action is None else str(self.action)
        if self.kind is Kind.CLUSTER:
            return f"{what} the broker"
        return f"{what} {self.kind} {self.name!r}"


@dataclass(frozen=True, slots=True)
class Grant:
    actions: frozenset[Action]
    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def allows(self, action: Action | None, kind: Kind, name: str) -> bool:
        """``action`` None: any action of this grant."""
        if action is not None and action not in self.actions:
            return False
        if kind is Kind.CLUSTER:
            return True
        patterns = self.topics if kind is Kind.TOPIC else self.groups
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    grants: tuple[Grant, ...] = ()

    def allows(self, need: Need) -> bool:
        return any(g.allows(need.action, need.kind, need.name) for g in self.grants)


def missing(account: Account, required: Sequence[Need]) -> Need | None:
    """The first right of ``required`` that ``account`` lacks, or None."""
    for need in required:
        if not account.allows(need):
            return need
    return None


_PUB_TOPIC = {"SendMessage": None, "EndTransaction": "topic", "RecallMessage": "topic"}
_SUB_TOPIC_GROUP = {
    "ReceiveMessage": ("message_queue", "group"),
    "PullMessage": ("message_queue", "group"),
    "UpdateOffset": ("message_queue", "group"),
    "GetOffset": ("message_queue", "group"),
    "AckMessage": ("topic", "group"),
    "ChangeInvisibleDuration": ("topic", "group"),
    "ForwardMessageToDeadLetterQueue": ("topic", "group"),
    "QueryAssignment": ("topic", "group"),
    "SyncLiteSubscription": ("topic", "group"),
}
_ADMIN_TOPIC = {"CreateTopic", "UpdateTopic", "DeleteTopic", "DescribeTopic"}
_ADMIN_GROUP = {"CreateGroup", "UpdateGroup", "DeleteGroup", "DescribeGroup"}


def needs(service: str, method: str, request: Any) -> list[Need]:
    """The rights ``method`` of ``service`` ("v2" or "admin") requires for ``request``.

    ``request`` is the decoded protobuf (a Telemetry command for "Telemetry"). A method not
    listed here needs ``admin`` on the broker: new RPCs are closed until classified.
    """
    if service == "admin":
        return _admin_needs(method, request)
    if method == "SendMessage":
        topics = sorted({m.topic.name for m in request.messages})
        return [Need(Action.PUB, Kind.TOPIC, t) for t in topics]
    if method in _PUB_TOPIC:
        return [Need(Action.PUB, Kind.TOPIC, request.topic.name)]
    if method in _SUB_TOPIC_GROUP:
        topic_field, group_field = _SUB_TOPIC_GROUP[method]
        topic = getattr(request, topic_field)
        topic_name = topic.topic.name if topic_field == "message_queue" else topic.name
        group_name = getattr(request, group_field).name
        return [Need(Action.SUB, Kind.TOPIC, topic_name), Need(Action.SUB, Kind.GROUP, group_name)]
    if method == "QueryOffset":
        return [Need(Action.SUB, Kind.TOPIC, request.message_queue.topic.name)]
    if method == "QueryRoute":
        return [Need(None, Kind.TOPIC, request.topic.name)]
    if method in ("Heartbeat", "NotifyClientTermination"):
        group = request.group.name
        return [Need(None, Kind.GROUP, group)] if group else []
    if method == "Telemetry":
        return _settings_needs(request)
    return [Need(Action.ADMIN, Kind.CLUSTER, "")]


def _settings_needs(command: Any) -> list[Need]:
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    found: list[Need] = []
    if settings.HasField("publishing"):
        found += [Need(None, Kind.TOPIC, t.name) for t in settings.publishing.topics]
    if settings.HasField("subscription"):
        sub = settings.subscription
        if sub.HasField("group"):
            found.append(Need(None, Kind.GROUP, sub.group.name))
        found += [Need(None, Kind.TOPIC, s.topic.name) for s in sub.subscriptions]
    return found


def _admin_needs(method: str, request: Any) -> list[Need]:
    if method in _ADMIN_TOPIC:
        return [Need(Action.ADMIN, Kind.TOPIC, request.name)]
    if method in _ADMIN_GROUP:
        return [Need(Action.ADMIN, Kind.GROUP, request.name)]
    if method == "QueryMessage":
        return [Need(Action.ADMIN, Kind.TOPIC, request.topic)]
    if method == "PullRecords":  # a read, as v2 PullMessage
        return [Need(Action.SUB, Kind.TOPIC, request.topic)] + (
            [Need(Action.SUB, Kind.GROUP, request.group)] if request.group else []
        )
    if method == "ResetOffset":
        return [Need(Action.ADMIN, Kind.GROUP, request.group)] + (
            [Need(Action.ADMIN, Kind.TOPIC, request.topic)] if request.topic else []
        )
    return [Need(Action.ADMIN, Kind.CLUSTER, "")]
