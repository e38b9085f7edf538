"""v2 request signatures: the pure check of ``MQv2-HMAC-SHA1`` headers plus the replay guard.

The official RocketMQ 5 clients sign every call with two metadata headers
(``docs/protocol.md`` §3; ground truth: the Python client's ``v5/util/signature.py``)::

    x-mq-date-time: 20261122T062105Z
    authorization:  MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>

``Signature`` is the lowercase hex HMAC-SHA1, keyed with the UTF-8 secret key, of the exact
``x-mq-date-time`` string. The Python client formats its *local* time with a literal ``Z``, so
:func:`check` accepts a date-time within ``skew_s`` of either the broker's UTC or its local
wall clock. Clients in another time zone than both must run with ``TZ=UTC``.

The signature covers only a one-second time stamp, so the same signature legitimately arrives
many times a second — every call of one client, and the calls of every host sharing an access
key. Replay protection is therefore per call: a signed request must carry ``x-mq-request-id``
(every official client puts a fresh uuid4 in each call) and each ``(signature, request id)``
pair is accepted once within twice the skew window (:class:`ReplayGuard`, bounded). A captured
signature sent again with a *new* request id inside the window is not detectable — the protocol
signs nothing else; TLS prevents capture.

Pure: the clock reading and the secret lookup are passed in. Called by
:class:`gannet.node.protocol.auth.Authenticator` (server side) and
:class:`gannet.node.protocol.auth.SigningInterceptor` (Gannet's own clients).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from rocketmq.grpc_protocol import Code

from gannet.node.protocol import statuses

SCHEME = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"
REQUEST_ID_HEADER = "x-mq-request-id"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
SKEW_S_DEFAULT = 15 * 60.0
REPLAY_ENTRIES_MAX = 100_000
AUTHORIZATION_BYTES_MAX = 1024
DENIAL_REASONS = (
    "unsigned",
    "malformed_authorization",
    "bad_date_time",
    "unknown_access_key",
    "bad_signature",
    "clock_skew",
    "no_request_id",
    "replayed",
)
"""Every ``reason`` :func:`check` can refuse with (metrics labels, exported at 0 from start)."""
_DATE_TIME = re.compile(r"[0-9]{8}T[0-9]{6}Z")
UNAUTHORIZED: int = Code.UNAUTHORIZED


class Denied(statuses.ApiError):
    """A refused request: ``code`` is a v2 Code, ``reason`` a metrics label."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(code, message)
        self.reason = reason


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


def check(
    headers: Mapping[str, str],
    secret_of: Callable[[str], str | None],
    *,
    now_s: float,
    skew_s: float,
    replays: ReplayGuard,
) -> str:
    """The access key that signed ``headers``; raises :class:`Denied` (``UNAUTHORIZED``).

    ``secret_of`` gives an access key's secret, None for an unknown key. An HMAC is computed
    for unknown keys too, so their answer takes as long as a bad signature's.
    """
    value = headers.get(AUTHORIZATION_HEADER, "")
    if not value.strip():
        raise _unauthorized("unsigned", "the request is not signed: no authorization header")
    parsed = parse_authorization(value)
    if not parsed.access_key:
        raise _unauthorized("unsigned", "the request is not signed: Credential names no access key")
    if parsed.signed_headers.lower() != DATE_TIME_HEADER:
        raise _malformed(f"signs {parsed.signed_headers[:60]!r}; expected {DATE_TIME_HEADER}")
    date_time = headers.get(DATE_TIME_HEADER, "")
    if not _DATE_TIME.fullmatch(date_time):
        raise _unauthorized(
            "bad_date_time", f"{DATE_TIME_HEADER} is {date_time[:40]!r}; expected yyyyMMddTHHmmssZ"
        )
    secret = secret_of(parsed.access_key)
    signature_ok = _signature_matches(secret or "", date_time, parsed.signature)
    if secret is None:
        raise _unauthorized("unknown_access_key", f"unknown access key {parsed.access_key!r}")
    if not signature_ok:
        raise _unauthorized(
            "bad_signature",
            f"the signature of access key {parsed.access_key!r} does not match its secret",
        )
    off_s = _skew_s(date_time, now_s)
    if off_s is None or off_s > skew_s:
        shown = "unparseable" if off_s is None else f"{off_s:.0f} s"
        raise _unauthorized(
            "clock_skew",
            f"{DATE_TIME_HEADER} {date_time} is {shown} off the broker clock (UTC and local);"
            f" at most {skew_s:.0f} s",
        )
    request_id = headers.get(REQUEST_ID_HEADER, "")
    if not request_id.strip():
        raise _unauthorized(
            "no_request_id",
            f"a signed request needs an {REQUEST_ID_HEADER} header (a fresh id per call)",
        )
    replay = replays.check(parsed.signature.lower(), request_id, now_s)
    if replay is not None:
        raise _unauthorized("replayed", replay)
    return parsed.access_key


def _unauthorized(reason: str, message: str) -> Denied:
    return Denied(UNAUTHORIZED, reason, message)


def _malformed(detail: str) -> Denied:
    return Denied(UNAUTHORIZED, "malformed_authorization", f"the authorization header {detail}")


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
