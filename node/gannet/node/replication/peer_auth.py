"""Who may talk on the peer port: a shared cluster secret, or a certificate naming a member.

Used by :mod:`transport` on both ends of every ``gannet.raft.v1.Peer`` call.

**Shared secret** (``--peer-secret-file``; required for a group of several members without peer
TLS). Every call (each ``Deliver`` stream, each ``Forward``) carries a *hello* in its metadata
under ``x-gannet-peer-auth``::

    <sender>.<target>.<unix_ms>.<nonce>.<mac>

``mac`` is hex HMAC-SHA256 under the secret of ``group \\n sender \\n target \\n unix_ms \\n
nonce``; ``nonce`` is 16 random bytes in hex. The receiver accepts a hello whose sender is
another member, whose target is itself, whose time is within :data:`HELLO_WINDOW_S` of its
clock, whose nonce it has not seen in that window (a bounded memory of :data:`NONCES_MAX`
nonces) and whose MAC matches; the call's messages must then all name that sender. The secret
itself never crosses the network. A secret file holds at least :data:`SECRET_MIN_BYTES` bytes
(surrounding whitespace ignored), e.g. ``head -c 32 /dev/urandom | base64``.

**Peer TLS**: the handshake already proves the CA signed the certificate; in addition a
certificate must *name a member*: one of its subject alternative names (or its common name)
is the host of a member in ``--peers`` (or the ``server_name`` the members share), and the
call's messages may only name the members it names.

"Member" means the *live* configuration, the one in force in the log (members added later
included, removed ones excluded): the transport updates both checks on every change
(:meth:`HelloChecker.set_members`). A node started with ``--join`` has no configuration yet and
accepts any sender that proves the secret or presents a CA-signed certificate, until the
leader's log names the group.

Everything refused is counted by reason (:class:`PeerRefusals`), exported as
``gannet_raft_peer_messages_dropped_total{reason}``.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HEADER = "x-gannet-peer-auth"
HELLO_WINDOW_S = 30.0
NONCES_MAX = 100_000
SECRET_MIN_BYTES = 16


class PeerAuthError(Exception):
    """A hello or certificate that does not prove a member; the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def load_secret(path: Path) -> bytes:
    """The secret in ``path``; raises :class:`ValueError` naming the problem."""
    try:
        data = path.read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the peer secret file {path}: {exc.strerror}") from None
    if len(data) < SECRET_MIN_BYTES:
        raise ValueError(
            f"the peer secret in {path} has {len(data)} bytes; use at least {SECRET_MIN_BYTES} "
            "(e.g. head -c 32 /dev/urandom | base64)"
        )
    return data


def _mac(secret: bytes, group: str, sender: int, target: int, unix_ms: int, nonce: str) -> str:
    text = f"{group}\n{sender}\n{target}\n{unix_ms}\n{nonce}".encode()
    return hmac.new(secret, text, hashlib.sha256).hexdigest()


def hello(secret: bytes, group: str, sender: int, target: int, unix_ms: int | None = None) -> str:
    """The metadata value a member sends to ``target`` (module docstring)."""
    at = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    nonce = secrets.token_hex(16)
    return f"{sender}.{target}.{at}.{nonce}.{_mac(secret, group, sender, target, at, nonce)}"


@dataclass
class PeerRefusals:
    """Peer calls and messages refused, by reason (``unauthenticated``, ``not_a_member``,
    ``sender_mismatch``, ``certificate_names_no_member``, ``replayed``, ``term_jump``,
    ``timeout_now_not_from_leader``, ...)."""

    by_reason: dict[str, int] = field(default_factory=dict)

    def count(self, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def total(self) -> int:
        return sum(self.by_reason.values())


class HelloChecker:
    """The receiving side of the shared-secret hello (one per node)."""

    def __init__(
        self,
        secret: bytes,
        group: str,
        node_id: int,
        members: Iterable[int],
        *,
        window_s: float = HELLO_WINDOW_S,
        nonces_max: int = NONCES_MAX,
    ) -> None:
        self._secret = secret
        self._group = group
        self._me = node_id
        self._members: frozenset[int] | None = frozenset(members)
        self._window_ms = int(window_s * 1000)
        self._nonces: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._nonces_max = nonces_max

    def set_members(self, members: frozenset[int] | None) -> None:
        """The live configuration's members (None: any sender, a joining node)."""
        self._members = members

    def nonces_held(self) -> int:
        """How many nonces are remembered (at most ``nonces_max``)."""
        return len(self._nonces)

    def check(self, value: str | None, now_ms: int | None = None) -> int:
        """The authenticated sender of a hello; raises :class:`PeerAuthError`."""
        if not value:
            raise PeerAuthError(
                "unauthenticated", f"no {HEADER} hello: this group requires the peer secret"
            )
        parts = value.split(".")
        if len(parts) != 5 or not all(p.isdigit() for p in parts[:3]):
            raise PeerAuthError("unauthenticated", f"malformed {HEADER} hello")
        sender, target, at = int(parts[0]), int(parts[1]), int(parts[2])
        nonce, mac = parts[3], parts[4]
        expected = _mac(self._secret, self._group, sender, target, at, nonce)
        if not hmac.compare_digest(mac, expected):
            raise PeerAuthError("unauthenticated", "hello MAC does not match the peer secret")
        if sender == self._me or (self._members is not None and sender not in self._members):
            raise PeerAuthError("not_a_member", f"node {sender} is not another member")
        if target != self._me:
            raise PeerAuthError("unauthenticated", f"hello for node {target} reached {self._me}")
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if abs(now - at) > self._window_ms:
            raise PeerAuthError(
                "unauthenticated",
                f"hello from node {sender} is {abs(now - at) / 1000:.0f} s off this node's "
                "clock (are the clocks synchronized?)",
            )
        if nonce in self._nonces:
            raise PeerAuthError("replayed", f"hello from node {sender} was already used")
        self._nonces[nonce] = at
        while self._nonces and (
            len(self._nonces) > self._nonces_max
            or next(iter(self._nonces.values())) < now - self._window_ms
        ):
            self._nonces.popitem(last=False)
        return sender


def members_named(
    names: Iterable[str], member_hosts: dict[int, str], shared_name: str | None
) -> frozenset[int]:
    """The members a certificate with ``names`` (SANs and CN) may speak for: those whose host
    it names, or every member when it names the ``shared_name`` they all use."""
    named = {n.lower() for n in names}
    if shared_name is not None and shared_name.lower() in named:
        return frozenset(member_hosts)
    return frozenset(i for i, host in member_hosts.items() if host.lower() in named)
