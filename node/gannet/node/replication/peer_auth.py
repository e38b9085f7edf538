"""Who may talk on the peer port: a shared cluster secret, or a certificate naming the sender.

Used by :mod:`transport` on both ends of every ``gannet.raft.v1.Peer`` call.

**Shared secret** (``--peer-secret-file``; required for a group of several members without peer
TLS). Every call (each ``Deliver`` stream, each ``Forward``) carries a *hello* in its metadata
under ``x-gannet-peer-auth``::

    <sender>.<target>.<unix_ms>.<nonce>.<mac>

``mac`` is hex HMAC-SHA256 under the secret of ``group \\n sender \\n target \\n unix_ms \\n
nonce``; ``nonce`` is 16 random bytes in hex. The receiver accepts a hello whose MAC matches,
whose sender is another node (not its own id), whose target is itself, whose time is within
:data:`HELLO_WINDOW_S` of its clock and whose nonce it has not seen in that window (a bounded
memory of :data:`NONCES_MAX` nonces); the call's messages must then all name that sender. The
sender need not be in the receiver's configuration (below). The secret
itself never crosses the network. A secret file holds at least :data:`SECRET_MIN_BYTES` bytes
(surrounding whitespace ignored), e.g. ``head -c 32 /dev/urandom | base64``.

**Peer TLS**: the handshake already proves the CA signed the certificate; in addition a
certificate must *name its sender*: one of its subject alternative names (or its common name)
is the host of a member of the live configuration, or the host of the contact the call names
(``x-gannet-peer: id=host:peer/client``, for a sender outside the configuration), or the
``server_name`` the members share; the call's messages may only name the nodes it names.

A proven sender outside the receiver's configuration — a *stranger* — is admitted and answered
at its contact (:meth:`transport.PeerTransport.admits_sender`): the receiver's configuration
may be behind (a member cut off while the leader added node 5 must still answer node 5's votes
and take its appends, and learns the new configuration from its log: issue 34, seed 912), and a
node started with ``--join`` has none yet. Whether a stranger's vote request or append is
granted is the Raft core's decision, by logs and terms; pre-vote and leader leases keep a
removed member that keeps running from disrupting a healthy leader. Strangers are never members:
not replicated to, not in ``gannet_raft_peer_reachable`` or the status rows.

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
        *,
        window_s: float = HELLO_WINDOW_S,
        nonces_max: int = NONCES_MAX,
    ) -> None:
        self._secret = secret
        self._group = group
        self._me = node_id
        self._window_ms = int(window_s * 1000)
        self._nonces: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._nonces_max = nonces_max

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
        if sender == self._me:
            raise PeerAuthError("not_a_member", f"hello claims this node's own id {sender}")
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
