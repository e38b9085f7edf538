"""Fuzz the Raft peer messages: ``gannet.raft.v1.RaftMessage`` bytes through the codec
(:mod:`gannet.node.replication.peer_wire`) into a follower's pure core.

Contract: bytes either fail to parse (``DecodeError``), or :func:`peer_wire.from_proto` returns
a message or raises :class:`~gannet.node.replication.peer_wire.PeerWireError`; a message it
returns, stepped into a :class:`~gannet.node.raft.core.RaftCore`, never breaks the core.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.protocol.gen import peer_pb2
from gannet.node.raft.config import Config
from gannet.node.raft.core import RaftCore
from gannet.node.raft.messages import NodeId
from gannet.node.replication import peer_wire

from . import protos
from .conftest import SEEDED, fuzz_settings

ME = NodeId(1)
VOTERS = (NodeId(1), NodeId(2), NodeId(3))
BODIES = [f.name for f in peer_pb2.RaftMessage.DESCRIPTOR.oneofs_by_name["body"].fields]
SMALL = st.sampled_from([0, 1, 7, 8, 16, 100, 2**31 - 1])
LARGE = st.sampled_from([0, 1, 7, 8, 16, 100, 2**40, 2**63 - 1])


def _core() -> RaftCore:
    config = Config(
        node_id=ME, voters=VOTERS, random_ticks=lambda n: 0, noop_payload=lambda o, t: b"n" * 8
    )
    return RaftCore(config)


def _step(raw: bytes) -> str:
    message_proto = peer_pb2.RaftMessage.FromString(raw)
    message_proto.target = ME  # the transport refuses other targets before decoding
    try:
        message = peer_wire.from_proto(message_proto)
    except peer_wire.PeerWireError:
        return "refused"
    core = _core()
    core.step(message)
    while core.has_ready():
        core.advance(core.ready())
    return type(message).__name__


def _number(field: object) -> st.SearchStrategy[int]:
    cpp_type = getattr(field, "cpp_type", 0)
    if cpp_type == 4:  # CPPTYPE_UINT64
        return LARGE
    if cpp_type == 3:  # CPPTYPE_UINT32
        return SMALL
    return st.sampled_from([-1, 0, 1, 8])


@st.composite
def peer_messages(draw: st.DrawFn) -> bytes:
    """One body kind, its numbers from a small pool (so that ranges and terms line up with a
    fresh follower's log often), a payload sometimes of the range's length."""
    message = peer_pb2.RaftMessage(
        group="g", sender=draw(st.sampled_from([0, 2, 3, 9])), target=ME, term=draw(SMALL)
    )
    body = getattr(message, draw(st.sampled_from(BODIES)))
    _fill(draw, body)
    return bytes(message.SerializeToString())


def _fill(draw: st.DrawFn, body: Any) -> None:
    """Every field of ``body`` from the pools; nested messages (a reset's membership) too."""
    body.SetInParent()
    for field in body.DESCRIPTOR.fields:
        if field.type == field.TYPE_MESSAGE:
            if draw(st.booleans()):
                _fill(draw, getattr(body, field.name))
        elif field.is_repeated:
            getattr(body, field.name).extend(draw(st.lists(_number(field), max_size=4)))
        elif field.type == field.TYPE_BOOL:
            setattr(body, field.name, draw(st.booleans()))
        elif field.type == field.TYPE_BYTES:
            setattr(body, field.name, draw(st.sampled_from([b"", b"x" * 8, b"y" * 3])))
        else:
            setattr(body, field.name, draw(_number(field)))


@SEEDED
@fuzz_settings(250)
@given(st.one_of(peer_messages(), protos.hostile(peer_pb2.RaftMessage.DESCRIPTOR)))
def test_hostile_peer_messages(raw: bytes) -> None:
    _step(raw)


@SEEDED
@fuzz_settings(200)
@given(protos.garbage())
def test_random_peer_bytes(raw: bytes) -> None:
    try:
        peer_pb2.RaftMessage.FromString(raw)
    except DecodeError:
        return
    _step(raw)


def test_regression_payload_not_filling_the_range_is_refused() -> None:
    """Found by this fuzz: the core raised InvariantViolation ("payload length differs from
    the range") for an AppendEntries with 3 payload bytes for a 10-byte range."""
    message = peer_pb2.RaftMessage(group="g", sender=2, target=ME, term=1)
    message.append_entries.end_offset = 10
    message.append_entries.entries_term = 1
    message.append_entries.payload = b"abc"
    assert _step(message.SerializeToString()) == "refused"
