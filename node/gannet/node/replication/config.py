"""Replication settings of one node: who it is, who the other members are, and the limits.

Built by ``gannet broker run`` from ``--node-id``, ``--peers`` and ``--peer-listen`` (and by
tests directly); read by :mod:`driver` and :mod:`transport`. A member is written
``id=host:peer_port/client_port`` (``2=10.0.0.2:8091/8081``): the peer port serves
``gannet.raft.v1.Peer``, the client port the RocketMQ v2 and admin APIs, so any node can name the
leader's client endpoint to a client.

With ``peer_secret`` (``--peer-secret-file``) every peer call proves it comes from a member
with an HMAC under the shared secret (:mod:`peer_auth`); ``gannet broker run`` requires it for
a group of several members without peer TLS. With :class:`PeerTls` (``--peer-tls-cert``,
``--peer-tls-key``, ``--peer-tls-ca``) the peer port and every outbound peer stream use mutual
TLS: each member presents its own certificate, and accepts only certificates signed by the
cluster CA that name a member (``docs/security.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PEER_PORT_DEFAULT = 8091
TICK_INTERVAL_S = 0.1
ELECTION_TIMEOUT_TICKS = 10
HEARTBEAT_INTERVAL_TICKS = 1
APPEND_BYTES_MAX = 1 << 20
INFLIGHT_MESSAGES_MAX = 64
INFLIGHT_BYTES_MAX = 8 << 20
UNCOMMITTED_BYTES_MAX = 64 << 20
COMMIT_TIMEOUT_S = 5.0
OUTBOUND_MESSAGES_MAX = 4096
OUTBOUND_BYTES_MAX = 32 << 20


class ReplicationConfigError(ValueError):
    """A peer list or node id that cannot describe a replication group."""


@dataclass(frozen=True, slots=True)
class PeerSpec:
    """One member of the group."""

    node_id: int
    host: str
    peer_port: int
    client_port: int

    @property
    def peer_endpoint(self) -> str:
        return f"{_bracketed(self.host)}:{self.peer_port}"

    @property
    def client_endpoint(self) -> str:
        return f"{_bracketed(self.host)}:{self.client_port}"

    def __str__(self) -> str:
        return f"{self.node_id}={_bracketed(self.host)}:{self.peer_port}/{self.client_port}"


@dataclass(frozen=True, slots=True)
class PeerTls:
    """Mutual TLS between members: this node's PEM certificate and key, and the cluster CA
    that signed every member's certificate (read by :mod:`transport` at construction)."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    server_name: str | None = None
    """Name to expect in the other members' certificates instead of their --peers host
    (gRPC ``ssl_target_name_override``); None: the host as written in --peers."""


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """This node's id, every member (itself included), where to serve peers, and limits."""

    node_id: int
    peers: tuple[PeerSpec, ...]
    peer_listen: str = f"127.0.0.1:{PEER_PORT_DEFAULT}"
    group: str = "gannet"
    tick_interval_s: float = TICK_INTERVAL_S
    election_timeout_ticks: int = ELECTION_TIMEOUT_TICKS
    heartbeat_interval_ticks: int = HEARTBEAT_INTERVAL_TICKS
    append_bytes_max: int = APPEND_BYTES_MAX
    inflight_messages_max: int = INFLIGHT_MESSAGES_MAX
    inflight_bytes_max: int = INFLIGHT_BYTES_MAX
    uncommitted_bytes_max: int = UNCOMMITTED_BYTES_MAX
    commit_timeout_s: float = COMMIT_TIMEOUT_S
    outbound_messages_max: int = OUTBOUND_MESSAGES_MAX
    outbound_bytes_max: int = OUTBOUND_BYTES_MAX
    seed: int | None = None
    """Election-jitter seed; None: drawn from the OS (logged)."""
    peer_tls: PeerTls | None = None
    """Mutual TLS on the peer port and peer streams; None: plaintext (a trusted network)."""
    peer_secret: bytes | None = field(default=None, repr=False)
    """Shared cluster secret: every peer call carries an HMAC hello (:mod:`peer_auth`);
    None: none required (peer TLS, a group of one, or ``--insecure-peers``)."""
    join: bool = False
    """``--join``: a brand-new node starts without configuration (it never campaigns) and
    waits to be added by the leader; ``peers`` then only names this node itself."""

    def __post_init__(self) -> None:
        ids = [p.node_id for p in self.peers]
        if len(set(ids)) != len(ids):
            raise ReplicationConfigError(f"duplicate node id in peers {ids}")
        if self.node_id not in ids:
            raise ReplicationConfigError(
                f"--node-id {self.node_id} is not in --peers ({', '.join(map(str, self.peers))})"
            )
        if self.node_id <= 0:
            raise ReplicationConfigError("node ids are positive integers (0 means nobody)")
        if self.tick_interval_s <= 0:
            raise ReplicationConfigError("tick_interval_s must be positive")

    @property
    def me(self) -> PeerSpec:
        return self.peer(self.node_id)

    def peer(self, node_id: int) -> PeerSpec:
        for p in self.peers:
            if p.node_id == node_id:
                return p
        raise KeyError(node_id)

    def others(self) -> tuple[PeerSpec, ...]:
        return tuple(p for p in self.peers if p.node_id != self.node_id)


def parse_peer(text: str) -> PeerSpec:
    """``2=10.0.0.2:8091/8081`` (IPv6: ``2=[::1]:8091/8081``)."""
    node, sep, rest = text.strip().partition("=")
    address, slash, client = rest.partition("/")
    host, colon, peer_port = address.rpartition(":")
    if not (
        sep and slash and colon and node.isdigit() and peer_port.isdigit() and client.isdigit()
    ):
        raise ReplicationConfigError(
            f"peer {text!r} is not id=host:peer_port/client_port (e.g. 2=10.0.0.2:8091/8081)"
        )
    if not host.strip("[]"):
        raise ReplicationConfigError(f"peer {text!r} has no host")
    return PeerSpec(int(node), host.strip("[]"), int(peer_port), int(client))


def parse_peers(text: str) -> tuple[PeerSpec, ...]:
    """A comma-separated member list (see :func:`parse_peer`)."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise ReplicationConfigError("--peers is empty; name every member, this node included")
    return tuple(parse_peer(item) for item in items)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
