"""Who may call the broker: v2 request signatures (authentication) and per-key rights (ACL).

The official RocketMQ 5 clients sign every call with two metadata headers
(``v2-protocol.md`` §2.2; ground truth: the Python client's ``v5/util/signature.py``)::

    x-mq-date-time: 20261122T062105Z
    authorization:  MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>

``Signature`` is the lowercase hex HMAC-SHA1, keyed with the UTF-8 secret key, of the exact
``x-mq-date-time`` string. The Python client formats its *local* time with a literal ``Z``, so
:class:`Authenticator` accepts a date-time within ``skew_s`` (default 15 min) of either the
broker's UTC or its local wall clock. Clients in another time zone than both must run with
``TZ=UTC``.

The signature covers only a one-second time stamp, so the same signature legitimately arrives
many times a second — every call of one client, and the calls of every host sharing an access
key (a fleet of producers). Signatures cannot be told apart, so replay protection is per call:
a signed request must carry ``x-mq-request-id`` (every official client puts a fresh uuid4 in
each call) and each ``(signature, request id)`` pair is accepted once within twice the skew
window (:class:`ReplayGuard`, bounded). A captured signature sent again with a *new* request id
inside the window is not detectable — the protocol signs nothing else; TLS prevents capture.

Rights (:class:`Account`): each access key has grants of actions ``pub``, ``sub``, ``admin``
on topic and group name patterns (:func:`fnmatch.fnmatchcase` wildcards, ``*`` for all).
:func:`needs` says what each RPC requires: SendMessage ``pub`` on its topic; ReceiveMessage,
Ack, ChangeInvisibleDuration, DLQ forwarding, Pull and the offset RPCs ``sub`` on topic and
group; QueryRoute, Heartbeat and the Telemetry settings any right on the resource; every admin
RPC ``admin`` (on the topic or group it names, if any).

Refusals raise :class:`Denied` with a v2 code (``UNAUTHORIZED`` / ``FORBIDDEN``), a reason
key counted in :attr:`Authenticator.denials_total` (plain ints for the metrics registry) and a
message naming the problem. Credentials come from :func:`load`: a JSON or YAML file, or a
directory mounted from a Kubernetes Secret (every ``*.json``/``*.yaml``/``*.yml`` file in it).

File format (JSON shown; YAML has the same shape)::

    {"accounts": [
      {"access_key": "orders-app", "secret_key": "...",
       "allow": [{"actions": ["pub", "sub"], "topics": ["orders-*"], "groups": ["billing"]},
                 {"actions": ["admin"], "topics": ["*"], "groups": ["*"]}]}]}

Pure core (the clock is injected); :mod:`gannet.node.api.wire` calls :class:`WireGate` for
every request when the broker runs with ``--auth-file``.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import hmac
import importlib
import json
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from rocketmq.grpc_protocol import Code

from gannet.node.api import statuses

SCHEME = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"
REQUEST_ID_HEADER = "x-mq-request-id"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
SKEW_S_DEFAULT = 15 * 60.0
REPLAY_ENTRIES_MAX = 100_000
AUTHORIZATION_BYTES_MAX = 1024
ACCOUNTS_MAX = 10_000
PATTERNS_MAX = 1_000
_DATE_TIME = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_SECRET_FILE_SUFFIXES = (".json", ".yaml", ".yml")
UNAUTHORIZED: int = Code.UNAUTHORIZED


class Action(enum.StrEnum):
    PUB = "pub"
    SUB = "sub"
    ADMIN = "admin"


class Kind(enum.StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    """Broker-wide (admin RPCs naming no topic or group): any grant of the action."""


class CredentialsError(ValueError):
    """The credentials file or directory is unusable; the message names file and field."""


class Denied(statuses.ApiError):
    """A refused request: ``code`` is a v2 Code, ``reason`` a metrics label."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(code, message)
        self.reason = reason


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


# ------------------------------------------------------------------ credentials files
def load(path: Path) -> dict[str, Account]:
    """Accounts by access key from a file or a Secret-mounted directory."""
    if path.is_dir():
        files = sorted(
            p
            for p in path.iterdir()
            if not p.name.startswith(".") and p.suffix in _SECRET_FILE_SUFFIXES and p.is_file()
        )
        if not files:
            raise CredentialsError(
                f"{path}: no *.json, *.yaml or *.yml file (the Secret's keys become file names)"
            )
    elif path.is_file():
        files = [path]
    else:
        raise CredentialsError(f"{path}: no such credentials file or directory")
    accounts: dict[str, Account] = {}
    for file in files:
        for account in parse_accounts(_read_document(file), str(file)):
            if account.access_key in accounts:
                raise CredentialsError(f"{file}: access key {account.access_key!r} is repeated")
            accounts[account.access_key] = account
    return accounts


def _read_document(file: Path) -> object:
    text = file.read_text(encoding="utf-8")
    if file.suffix in (".yaml", ".yml"):
        try:
            yaml: Any = importlib.import_module("yaml")  # only YAML credential files need it
        except ImportError:
            raise CredentialsError(
                f"{file}: reading YAML needs PyYAML (pip install PyYAML); or use JSON"
            ) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CredentialsError(f"{file}: not valid YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CredentialsError(f"{file}: not valid JSON: {exc}") from None


def parse_accounts(document: object, source: str) -> list[Account]:
    """The accounts of one parsed document; ``source`` names it in errors."""
    if not isinstance(document, dict) or not isinstance(document.get("accounts"), list):
        raise CredentialsError(f"{source}: expected an object with an 'accounts' list")
    items: list[Any] = document["accounts"]
    if len(items) > ACCOUNTS_MAX:
        raise CredentialsError(f"{source}: {len(items)} accounts; at most {ACCOUNTS_MAX}")
    return [_parse_account(item, f"{source}: accounts[{i}]") for i, item in enumerate(items)]


def _parse_account(item: object, where: str) -> Account:
    if not isinstance(item, dict):
        raise CredentialsError(f"{where}: expected an object")
    access_key = _text(item, "access_key", where)
    secret_key = _text(item, "secret_key", where)
    allow = item.get("allow", [])
    if not isinstance(allow, list):
        raise CredentialsError(f"{where}.allow: expected a list of grants")
    grants = tuple(_parse_grant(g, f"{where}.allow[{i}]") for i, g in enumerate(allow))
    return Account(access_key, secret_key, grants)


def _text(item: Mapping[str, object], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CredentialsError(f"{where}.{key}: expected a non-empty string")
    return value


def _parse_grant(item: object, where: str) -> Grant:
    if not isinstance(item, dict):
        raise CredentialsError(f"{where}: expected an object")
    actions_raw = item.get("actions")
    if not isinstance(actions_raw, list) or not actions_raw:
        raise CredentialsError(f"{where}.actions: expected a non-empty list of pub, sub, admin")
    actions = set()
    for action in actions_raw:
        if action not in {a.value for a in Action}:
            raise CredentialsError(f"{where}.actions: {action!r} is not one of pub, sub, admin")
        actions.add(Action(action))
    return Grant(
        frozenset(actions),
        _patterns(item, "topics", where),
        _patterns(item, "groups", where),
    )


def _patterns(item: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
    raw = item.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise CredentialsError(f"{where}.{key}: expected a list of name patterns")
    if len(raw) > PATTERNS_MAX:
        raise CredentialsError(f"{where}.{key}: {len(raw)} patterns; at most {PATTERNS_MAX}")
    return tuple(raw)


# ------------------------------------------------------------------ signatures
def sign(secret_key: str, date_time: str) -> str:
    """The client's signature: hex HMAC-SHA1 of ``date_time`` keyed with ``secret_key``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def signed_metadata(access_key: str, secret_key: str, now_s: float) -> list[tuple[str, str]]:
    """Headers a client sends (``x-mq-date-time`` in UTC); for Gannet's own admin clients."""
    date_time = datetime.fromtimestamp(now_s, UTC).strftime(DATE_TIME_FORMAT)
    authorization = (
        f"{SCHEME} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )
    return [(DATE_TIME_HEADER, date_time), (AUTHORIZATION_HEADER, authorization)]


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signed_headers: str
    signature: str


def parse_authorization(value: str) -> Authorization:
    """Split the header; raises :class:`Denied` (``malformed_authorization``) naming the part."""
    if len(value) > AUTHORIZATION_BYTES_MAX:
        raise _malformed(f"is {len(value)} characters; at most {AUTHORIZATION_BYTES_MAX}")
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise _malformed(f"scheme is {scheme[:40]!r}; expected {SCHEME}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if not sep:
            raise _malformed(f"part {item.strip()[:40]!r} is not key=value")
        parts[key] = val.strip()
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if k not in parts]
    if missing:
        raise _malformed(f"lacks {', '.join(missing)}")
    return Authorization(
        parts["Credential"].split("/", 1)[0], parts["SignedHeaders"], parts["Signature"]
    )


def _malformed(detail: str) -> Denied:
    return Denied(UNAUTHORIZED, "malformed_authorization", f"the authorization header {detail}")


class ReplayGuard:
    """``(signature, request id)`` pairs seen within ``window_s``.

    Invariant: the table holds at most ``entries_max`` pairs, oldest first; pairs older than
    ``window_s`` are dropped when met, and the oldest pairs when the table is full.
    """

    def __init__(self, window_s: float, entries_max: int = REPLAY_ENTRIES_MAX) -> None:
        self._window_s = window_s
        self._entries_max = entries_max
        self._requests: OrderedDict[tuple[str, str], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._requests)

    def check(self, signature: str, request_id: str, now_s: float) -> str | None:
        """Remember this use; a message saying why it is a replay, or None."""
        self._expire(now_s)
        key = (signature, request_id)
        if key in self._requests:
            return f"request replayed: {REQUEST_ID_HEADER} {request_id[:64]!r} was already used"
        self._requests[key] = now_s
        while len(self._requests) > self._entries_max:
            self._requests.popitem(last=False)
        return None

    def _expire(self, now_s: float) -> None:
        oldest = now_s - self._window_s
        while self._requests and next(iter(self._requests.values())) < oldest:
            self._requests.popitem(last=False)


class Authenticator:
    """Verifies signatures and rights against ``accounts``; counts refusals by reason."""

    def __init__(
        self,
        accounts: Mapping[str, Account],
        *,
        skew_s: float = SKEW_S_DEFAULT,
        replay_entries_max: int = REPLAY_ENTRIES_MAX,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.accounts = dict(accounts)
        self.skew_s = skew_s
        self._clock = clock
        self._replays = ReplayGuard(2 * skew_s, replay_entries_max)
        self.denials_total: dict[str, int] = {}
        """Refusals by reason (``bad_signature``, ``forbidden``, …) since start."""

    def authenticate(self, metadata: Iterable[tuple[str, str]]) -> Account:
        """The caller's account; raises :class:`Denied` (``UNAUTHORIZED``)."""
        try:
            return self._authenticate(dict(metadata))
        except Denied as denied:
            self._count(denied.reason)
            raise

    def _authenticate(self, headers: Mapping[str, str]) -> Account:
        value = headers.get(AUTHORIZATION_HEADER, "")
        if not value.strip():
            raise _unauthorized("unsigned", "the request is not signed: no authorization header")
        parsed = parse_authorization(value)
        if not parsed.access_key:
            raise _unauthorized(
                "unsigned", "the request is not signed: Credential names no access key"
            )
        if parsed.signed_headers.lower() != DATE_TIME_HEADER:
            raise _malformed(f"signs {parsed.signed_headers[:60]!r}; expected {DATE_TIME_HEADER}")
        date_time = headers.get(DATE_TIME_HEADER, "")
        if not _DATE_TIME.fullmatch(date_time):
            raise _unauthorized(
                "bad_date_time",
                f"{DATE_TIME_HEADER} is {date_time[:40]!r}; expected yyyyMMddTHHmmssZ",
            )
        account = self.accounts.get(parsed.access_key)
        secret = account.secret_key if account is not None else ""
        signature_ok = _signature_matches(secret, date_time, parsed.signature)
        if account is None:
            raise _unauthorized("unknown_access_key", f"unknown access key {parsed.access_key!r}")
        if not signature_ok:
            raise _unauthorized(
                "bad_signature",
                f"the signature of access key {parsed.access_key!r} does not match its secret",
            )
        now_s = self._clock()
        off_s = _skew_s(date_time, now_s)
        if off_s is None or off_s > self.skew_s:
            shown = "unparseable" if off_s is None else f"{off_s:.0f} s"
            raise _unauthorized(
                "clock_skew",
                f"{DATE_TIME_HEADER} {date_time} is {shown} off the broker clock (UTC and local);"
                f" at most {self.skew_s:.0f} s",
            )
        request_id = headers.get(REQUEST_ID_HEADER, "")
        if not request_id.strip():
            raise _unauthorized(
                "no_request_id",
                f"a signed request needs an {REQUEST_ID_HEADER} header (a fresh id per call)",
            )
        replay = self._replays.check(parsed.signature.lower(), request_id, now_s)
        if replay is not None:
            raise _unauthorized("replayed", replay)
        return account

    def authorize(self, account: Account, required: Sequence[Need]) -> None:
        """Raises :class:`Denied` (``FORBIDDEN``) naming the first right ``account`` lacks."""
        for need in required:
            if not account.allows(need):
                self._count("forbidden")
                raise Denied(
                    statuses.FORBIDDEN,
                    "forbidden",
                    f"access key {account.access_key!r} may not {need.text()}",
                )

    def _count(self, reason: str) -> None:
        self.denials_total[reason] = self.denials_total.get(reason, 0) + 1


def _unauthorized(reason: str, message: str) -> Denied:
    return Denied(UNAUTHORIZED, reason, message)


def _signature_matches(secret: str, date_time: str, given_hex: str) -> bool:
    """Constant-time comparison of the given hex signature with the expected HMAC."""
    expected = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).digest()
    try:
        given = bytes.fromhex(given_hex)
    except ValueError:
        given = b""
    return hmac.compare_digest(expected, given)


def _skew_s(date_time: str, now_s: float) -> float | None:
    """Seconds between ``date_time`` and the nearer of the broker's UTC and local clocks."""
    try:
        stamp = datetime.strptime(date_time, DATE_TIME_FORMAT)
    except ValueError:
        return None
    now_utc = datetime.fromtimestamp(now_s, UTC).replace(tzinfo=None)
    now_local = datetime.fromtimestamp(now_s)
    return min(abs((stamp - now_utc).total_seconds()), abs((stamp - now_local).total_seconds()))


# ------------------------------------------------------------------ what each RPC needs
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
    if method == "ResetOffset":
        return [Need(Action.ADMIN, Kind.GROUP, request.group)] + (
            [Need(Action.ADMIN, Kind.TOPIC, request.topic)] if request.topic else []
        )
    return [Need(Action.ADMIN, Kind.CLUSTER, "")]


class WireGate:
    """What :mod:`gannet.node.api.wire` calls: authenticate once per call, authorize each
    request (each Telemetry command on a stream). ``service`` is "v2" or "admin"."""

    def __init__(self, authenticator: Authenticator, service: str) -> None:
        self.authenticator = authenticator
        self.service = service

    def authenticate(self, metadata: Iterable[tuple[str, str]]) -> Account:
        return self.authenticator.authenticate(metadata)

    def authorize(self, account: object, method: str, request: object) -> None:
        if not isinstance(account, Account):
            raise TypeError(f"wire passed back {type(account).__name__}, not an Account")
        self.authenticator.authorize(account, needs(self.service, method, request))


class DenialsCollector:
    """``gannet_auth_denials_total{reason}``: refusals of an :class:`Authenticator` by reason,
    read at scrape time; the broker registers it on its metrics registry when auth is on."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "gannet_auth_denials",
            "Requests refused by authentication or authorization, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self._authenticator.denials_total.items()):
            family.add_metric([reason], count)
        return [family]


class SigningInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Signs every call of a synchronous gRPC channel as the official clients do (fresh
    ``x-mq-date-time``, signature and ``x-mq-request-id`` per call), for Gannet's own admin
    clients: ``grpc.intercept_channel(channel, SigningInterceptor(ak, sk))``."""

    def __init__(
        self, access_key: str, secret_key: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.access_key = access_key
        self._secret_key = secret_key
        self._clock = clock

    def metadata(self) -> list[tuple[str, str]]:
        return [
            *signed_metadata(self.access_key, self._secret_key, self._clock()),
            (REQUEST_ID_HEADER, str(uuid.uuid4())),
        ]

    def _signed(self, details: Any) -> Any:
        return details._replace(metadata=[*(details.metadata or ()), *self.metadata()])

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._signed(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._signed(details), request)
