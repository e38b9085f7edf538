"""The group's members as the driver sees them: configuration records, the persisted
configuration, and the live table of addresses.

Used by :mod:`driver` (and by :mod:`gannet.node.api.admin_members` through it). The Raft core
(:mod:`gannet.node.raft.membership`) decides *who* votes and learns; this module gives those ids
their addresses and makes the configuration survive restarts.

**Configuration records.** A membership change is one ordinary RocketMQ message (V1 layout)
of the internal system topic ``rmq_sys_GANNET_RAFT_MEMBERS``, queue 0 — like the leader's
no-op (:mod:`noop`) and the replicated config tables (:mod:`config_log`), so the commit log
stays readable by RocketMQ tools and ``gannet store verify``; clients never see it (system
topics are refused to clients and it has no topic config). Its body is UTF-8 JSON naming the
whole configuration::

    {"v": 1, "members": [{"id": 1, "peer": "10.0.0.1:8091", "client": "10.0.0.1:8081",
                          "voter": true}, ...]}

A follower finds these records in what it appends (:func:`memberships_in`, given to the core
as ``Config.memberships_in``, called before the range is appended; the leader cuts every range
at a record boundary, ``CommitLog.record_end``); the leader appends one through the store and
proposes it with ``RaftCore.propose_membership``.

**Persistence.** ``<store>/raft/membership`` holds the core's configuration entries
(``Ready.memberships``) as JSON, replaced durably (write, fsync, rename) *before* the entries of
the same Ready are written, so the file never misses a configuration record the log holds;
entries the log no longer holds after a crash are dropped by the core on load. A brand-new
node writes its bootstrap configuration (``--peers``, or none with ``--join``) at its first
start; from then on the file — that is, the log — is the truth and ``--peers`` is ignored
(logged when it disagrees).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from gannet.node.invariants import invariant
from gannet.node.raft.config import UnreadablePayload
from gannet.node.raft.membership import Membership, MembershipEntry, MembershipLog
from gannet.node.raft.messages import ByteOffset, NodeId
from gannet.node.replication.config import (
    PeerSpec,
    ReplicationConfig,
    ReplicationConfigError,
    parse_peer,
)
from gannet.node.replication.state_files import StateFileError, write_durably
from gannet.node.store.log import layout, record_checks, records
from gannet.node.store.validation import SYSTEM_TOPIC_PREFIX

log = logging.getLogger(__name__)

MEMBERS_TOPIC = SYSTEM_TOPIC_PREFIX + "GANNET_RAFT_MEMBERS"
_TOPIC_BYTES = MEMBERS_TOPIC.encode()
BODY_VERSION = 1


class MembershipRecordError(UnreadablePayload):
    """A configuration record or membership file that does not parse (a ``ValueError``; the
    Raft core refuses an ``AppendEntries`` whose payload raised it)."""


@dataclass(frozen=True, slots=True)
class Member:
    spec: PeerSpec
    voter: bool


def encode_body(members: list[Member]) -> bytes:
    rows = [
        {
            "id": m.spec.node_id,
            "peer": m.spec.peer_endpoint,
            "client": m.spec.client_endpoint,
            "voter": m.voter,
        }
        for m in sorted(members, key=lambda m: m.spec.node_id)
    ]
    return json.dumps({"v": BODY_VERSION, "members": rows}, separators=(",", ":")).encode()


def decode_body(body: bytes) -> list[Member]:
    try:
        data = json.loads(body)
        members = []
        for row in data["members"]:
            peer_host, _, peer_port = str(row["peer"]).rpartition(":")
            _, _, client_port = str(row["client"]).rpartition(":")
            spec = parse_peer(f"{int(row['id'])}={peer_host}:{peer_port}/{client_port}")
            members.append(Member(spec, bool(row["voter"])))
        return members
    except (ValueError, KeyError, TypeError, ReplicationConfigError) as exc:
        raise MembershipRecordError(f"configuration record body {body[:200]!r}: {exc}") from exc


def membership_of(members: list[Member]) -> Membership:
    return Membership(
        voters=frozenset(NodeId(m.spec.node_id) for m in members if m.voter),
        learners=frozenset(NodeId(m.spec.node_id) for m in members if not m.voter),
        body=encode_body(members),
    )


def members_of(membership: Membership, known: dict[int, PeerSpec]) -> list[Member]:
    """The members of ``membership`` with their addresses (from its body, else ``known``)."""
    if membership.body:
        return decode_body(membership.body)
    return [
        Member(known[n], n in membership.voters) for n in sorted(membership.members()) if n in known
    ]


def memberships_in(start: ByteOffset, payload: bytes) -> tuple[MembershipEntry, ...]:
    """The configuration records among the whole records of ``payload`` written at ``start``
    (``raft.config.MembershipsIn``). Cheap when there is none (one substring search)."""
    if _TOPIC_BYTES not in payload:
        return ()
    found = []
    position = 0
    while position < len(payload):
        checked = record_checks.check_record(payload, position, len(payload), check_crc=False)
        if not checked.ok:
            raise MembershipRecordError(
                f"unreadable record at {start + position} while looking for configuration "
                f"records: {checked.error}"
            )
        if checked.size == 0:  # BLANK: the rest of the file is padding
            total = int.from_bytes(payload[position : position + 4], "big", signed=True)
            position += max(total, layout.END_FILE_MIN_BLANK_LENGTH)
            continue
        info = checked.info
        if info is not None and info.topic == MEMBERS_TOPIC:
            body = records.decode(payload, position).body
            members = decode_body(body)
            begin = ByteOffset(start + position)
            found.append(
                MembershipEntry(begin, ByteOffset(begin + checked.size), membership_of(members))
            )
        position += checked.size
    return tuple(found)


class MembershipFile:
    """``<store>/raft/membership``: the configuration entries, JSON, replaced durably."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[MembershipEntry, ...]:
        if not self.path.exists():
            return ()
        try:
            data = json.loads(self.path.read_text())
            return tuple(
                MembershipEntry(
                    ByteOffset(int(row["start"])),
                    ByteOffset(int(row["end"])),
                    Membership(
                        frozenset(NodeId(int(v)) for v in row["voters"]),
                        frozenset(NodeId(int(v)) for v in row["learners"]),
                        str(row["body"]).encode(),
                    ),
                )
                for row in data["entries"]
            )
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise StateFileError(f"{self.path}: not a membership file ({exc})") from exc

    def save(self, entries: tuple[MembershipEntry, ...]) -> None:
        rows = [
            {
                "start": e.start_offset,
                "end": e.end_offset,
                "voters": sorted(e.membership.voters),
                "learners": sorted(e.membership.learners),
                "body": e.membership.body.decode(),
            }
            for e in entries
        ]
        write_durably(self.path, json.dumps({"v": BODY_VERSION, "entries": rows}, indent=1) + "\n")


class MemberTable:
    """Addresses of every member of the configuration in force, this node included.

    Rebuilt by the driver whenever the core's configuration changes; ``contacts`` are senders
    a joining node heard from before it received any configuration (it answers them).
    """

    def __init__(self, bootstrap: tuple[PeerSpec, ...]) -> None:
        self._known: dict[int, PeerSpec] = {p.node_id: p for p in bootstrap}
        self.members: dict[int, Member] = {}
        self.contacts: dict[int, PeerSpec] = {}

    def update(self, membership: Membership) -> None:
        """Install the configuration in force: its members with their addresses."""
        members = members_of(membership, self._known)
        voters = {m.spec.node_id for m in members if m.voter}
        learners = {m.spec.node_id for m in members if not m.voter}
        invariant(
            voters <= membership.voters
            and learners <= membership.learners
            and (not membership.body or voters | learners == membership.members()),
            f"installing voters {sorted(membership.voters)} and learners "
            f"{sorted(membership.learners)}: the addresses name voters {sorted(voters)} and "
            f"learners {sorted(learners)}",
        )
        for m in members:
            self._known[m.spec.node_id] = m.spec
        self.members = {m.spec.node_id: m for m in members}

    def spec(self, node_id: int) -> PeerSpec | None:
        member = self.members.get(node_id)
        if member is not None:
            return member.spec
        return self.contacts.get(node_id) or self._known.get(node_id)

    def specs(self) -> tuple[PeerSpec, ...]:
        """Members and contacts, by node id."""
        table = dict(self.contacts)
        table.update({n: m.spec for n, m in self.members.items()})
        return tuple(table[n] for n in sorted(table))


def parse_contact(text: str) -> PeerSpec | None:
    """The sender's own ``id=host:peer/client`` from a peer call's metadata (None: absent or
    malformed)."""
    try:
        return parse_peer(text) if text else None
    except ReplicationConfigError:
        return None


def describe(members: list[Member]) -> str:
    return ", ".join(f"{m.spec}{'' if m.voter else ' (learner)'}" for m in members) or "none"


def disagreement(peers: tuple[PeerSpec, ...], members: list[Member]) -> str | None:
    """How ``--peers`` differs from the configuration in force (None: it does not)."""
    given = {str(p) for p in peers}
    actual = {str(m.spec) for m in members}
    if given == actual:
        return None
    return f"--peers names {sorted(given)}; the configuration in force is {describe(members)}"


def load_or_bootstrap(
    membership_file: MembershipFile, config: ReplicationConfig
) -> tuple[MembershipEntry, ...]:
    """The persisted configuration entries; a brand-new node writes its bootstrap (the
    members of ``--peers``, or none with ``--join``) first."""
    entries = membership_file.load()
    if entries:
        return entries
    voters = () if config.join else tuple(NodeId(p.node_id) for p in config.peers)
    bootstrap = MembershipLog.bootstrap(voters).entries()
    if not config.join:
        body = encode_body([Member(p, True) for p in config.peers])
        first = bootstrap[0]
        bootstrap = (
            dataclasses.replace(first, membership=dataclasses.replace(first.membership, body=body)),
        )
    membership_file.save(bootstrap)
    return bootstrap
