"""Remoting requests signed as RocketMQ's ACL 1.0 clients sign them, checked against Gannet's
accounts and grants (``--auth-file``; :mod:`gannet.node.protocol.grants` owns the rule).

The 4.x client's ``AclClientRPCHook`` (``rocketmq-acl``) adds to every request's ext fields
``AccessKey``, ``Signature`` and, with a session token, ``SecurityToken``. ``Signature`` is the
base64 HMAC-SHA1, keyed with the UTF-8 secret key, of the values of every other ext field
(``AccessKey`` included) concatenated in the order of their names, followed by the body; the
broker checks it over the fields it received, as RocketMQ's ``PlainAccessValidator`` does
(``_UNIQUE_KEY_QUERY``, which the client adds after signing, is left out). A ``SecurityToken``
is signed over like any field but not checked: Gannet has no session tokens.

What each request needs is translated to :class:`Need` values (:func:`needs`) and decided by
:func:`grants.missing`, as for a v2 call: sends ``pub`` on the topic; pulls, offsets and
send-back ``sub`` on topic and group; routes and topic configs any right on the topic;
consumer lists and queue locks any right on the group; message queries and topic creation
``admin`` on the topic; heartbeats and client checks only a valid signature; transactions and
Pop as :func:`_transaction_and_pop_needs` says. A request code not
classified here needs ``admin`` on the broker: new requests are closed until classified, as new
RPCs are. The name-server requests (routes, cluster info, topic list) are answered unsigned, as
RocketMQ 4's name server answers them: a client with a wrong key then learns its route and gets
the broker's ``NO_PERMISSION`` for its send, not a "no route" that hides the cause.

Every refusal answers ``NO_PERMISSION`` (16) with a remark naming the problem (the 4.x client
raises ``MQBrokerException`` with that code). The protocol signs no time stamp: a captured
request can be sent again; TLS (``--tls-cert``) prevents capture.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping

from gannet.node.protocol.grants import Account, Action, Kind, Need, missing
from gannet.node.remoting import codes
from gannet.node.remoting.codec import Command

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
SIGNATURE_CHARS_MAX = 256


class Refused(Exception):
    """A request that may not be served; ``reason`` is a denial-metrics label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def signature(secret_key: str, ext: Mapping[str, str], body: bytes) -> str:
    """What the ACL client puts in ``Signature`` for ``ext`` (without ``Signature``) and
    ``body``."""
    content = "".join(ext[name] for name in sorted(ext) if name != SIGNATURE).encode("utf-8")
    digest = hmac.new(secret_key.encode("utf-8"), content + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def authenticate(request: Command, secret_of: Callable[[str], str | None]) -> str:
    """The request's access key once its signature checks out; raises :class:`Refused`."""
    ext = request.ext
    access_key = ext.get(ACCESS_KEY, "")
    given = ext.get(SIGNATURE, "")
    if not access_key or not given:
        raise Refused(
            "unsigned",
            "the request is not signed (AccessKey and Signature ext fields): this broker "
            "checks ACL signatures; use rocketmq-acl's AclClientRPCHook",
        )
    secret = secret_of(access_key)
    if secret is None:
        raise Refused("unknown_access_key", f"unknown access key {access_key!r}")
    signed = {k: v for k, v in ext.items() if k != UNIQUE_KEY_QUERY}
    expected = signature(secret, signed, request.body)
    if len(given) > SIGNATURE_CHARS_MAX or not hmac.compare_digest(given, expected):
        raise Refused(
            "bad_signature",
            f"the signature does not match for access key {access_key!r} (wrong secret key?)",
        )
    return access_key


# SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE carry one-letter header names: "b" is the topic.
_SEND_CODES = (codes.SEND_MESSAGE, codes.SEND_MESSAGE_V2, codes.SEND_BATCH_MESSAGE)
_SUB_TOPIC_GROUP = {
    codes.PULL_MESSAGE: "consumerGroup",
    codes.LITE_PULL_MESSAGE: "consumerGroup",
    codes.QUERY_CONSUMER_OFFSET: "consumerGroup",
    codes.UPDATE_CONSUMER_OFFSET: "consumerGroup",
}
_SUB_TOPIC = (codes.GET_MAX_OFFSET, codes.GET_MIN_OFFSET, codes.SEARCH_OFFSET_BY_TIMESTAMP)
_ANY_TOPIC = (codes.GET_TOPIC_CONFIG,)
UNCHECKED = frozenset({
    codes.GET_ROUTEINFO_BY_TOPIC,
    codes.GET_BROKER_CLUSTER_INFO,
    codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
})  # fmt: skip
"""Name-server requests: served without a signature (module docstring)."""
_ADMIN_TOPIC = (codes.QUERY_MESSAGE, codes.UPDATE_AND_CREATE_TOPIC)
_SIGNED_ONLY = (codes.HEART_BEAT, codes.UNREGISTER_CLIENT, codes.CHECK_CLIENT_CONFIG)


def needs(request: Command) -> list[Need]:
    """The rights ``request`` requires (module docstring)."""
    code = request.code
    ext = request.ext
    if code in _SEND_CODES:
        return [Need(Action.PUB, Kind.TOPIC, ext.get("topic") or ext.get("b", ""))]
    if code in _SUB_TOPIC_GROUP:
        return [
            Need(Action.SUB, Kind.TOPIC, ext.get("topic", "")),
            Need(Action.SUB, Kind.GROUP, ext.get(_SUB_TOPIC_GROUP[code], "")),
        ]
    if code in _SUB_TOPIC:
        return [Need(Action.SUB, Kind.TOPIC, ext.get("topic", ""))]
    if code == codes.CONSUMER_SEND_MSG_BACK:
        return [Need(Action.SUB, Kind.GROUP, ext.get("group", ""))]
    if code in _ANY_TOPIC:
        return [Need(None, Kind.TOPIC, ext.get("topic", ""))]
    if code in _ADMIN_TOPIC:
        return [Need(Action.ADMIN, Kind.TOPIC, ext.get("topic", ""))]
    if code == codes.GET_CONSUMER_LIST_BY_GROUP:
        return [Need(None, Kind.GROUP, ext.get("consumerGroup", ""))]
    if code in (codes.LOCK_BATCH_MQ, codes.UNLOCK_BATCH_MQ):
        return [Need(None, Kind.GROUP, _body_group(request))]
    if code in _SIGNED_ONLY:
        return []
    found = _transaction_and_pop_needs(request)
    return found if found is not None else [Need(Action.ADMIN, Kind.CLUSTER, "")]


def _transaction_and_pop_needs(request: Command) -> list[Need] | None:
    """END_TRANSACTION ``pub`` on its topic (a 4.x client names none: a valid signature, the
    transaction id naming a half message its producer sent with ``pub``); POP_MESSAGE ``sub``
    on topic and group; ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME ``sub`` on the group (their
    topic may be the pop retry topic), BATCH_ACK_MESSAGE on every group its body names;
    QUERY_ASSIGNMENT ``sub`` on the body's topic and group. None: not one of these."""
    code, ext = request.code, request.ext
    if code == codes.END_TRANSACTION:
        topic = ext.get("topic", "")
        return [Need(Action.PUB, Kind.TOPIC, topic)] if topic else []
    if code == codes.POP_MESSAGE:
        return [
            Need(Action.SUB, Kind.TOPIC, ext.get("topic", "")),
            Need(Action.SUB, Kind.GROUP, ext.get("consumerGroup", "")),
        ]
    if code in (codes.ACK_MESSAGE, codes.CHANGE_MESSAGE_INVISIBLETIME):
        return [Need(Action.SUB, Kind.GROUP, ext.get("consumerGroup", ""))]
    if code == codes.BATCH_ACK_MESSAGE:
        return [Need(Action.SUB, Kind.GROUP, g) for g in _batch_ack_groups(request)]
    if code == codes.QUERY_ASSIGNMENT:
        return [
            Need(Action.SUB, Kind.TOPIC, _body_field(request, "topic")),
            Need(Action.SUB, Kind.GROUP, _body_field(request, "consumerGroup")),
        ]
    return None


def _batch_ack_groups(request: Command) -> list[str]:
    """The groups a BATCH_ACK_MESSAGE body acks for (``[""]``: none readable, which no grant
    matches)."""
    try:
        data = json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return [""]
    acks = data.get("acks") if isinstance(data, dict) else None
    if not isinstance(acks, list) or not acks:
        return [""]
    groups = {
        str(a.get("c") or a.get("consumerGroup") or "") if isinstance(a, dict) else "" for a in acks
    }
    return sorted(groups)


def _body_group(request: Command) -> str:
    return _body_field(request, "consumerGroup")


def _body_field(request: Command, name: str) -> str:
    try:
        data = json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ""
    return str(data.get(name) or "") if isinstance(data, dict) else ""


class RemotingGate:
    """Checks each remoting request's signature and rights; counts refusals by reason."""

    def __init__(
        self,
        accounts: Callable[[], Mapping[str, Account]],
        denials_total: dict[str, int],
    ) -> None:
        """``accounts``: the current accounts (reloaded by the caller as files change);
        ``denials_total``: the counters refusals are added to (the broker's authenticator's)."""
        self._accounts = accounts
        self.denials_total = denials_total

    def refusal(self, request: Command) -> Command | None:
        """The ``NO_PERMISSION`` answer for a request that may not be served, else None."""
        if request.code in UNCHECKED:
            return None
        accounts = self._accounts()  # one snapshot for the whole check

        def secret_of(access_key: str) -> str | None:
            account = accounts.get(access_key)
            return account.secret_key if account is not None else None

        try:
            account = accounts[authenticate(request, secret_of)]
            need = missing(account, needs(request))
            if need is not None:
                raise Refused(
                    "forbidden", f"access key {account.access_key!r} may not {need.text()}"
                )
        except Refused as refused:
            self.denials_total[refused.reason] = self.denials_total.get(refused.reason, 0) + 1
            return request.response(codes.NO_PERMISSION, str(refused))
        return None
