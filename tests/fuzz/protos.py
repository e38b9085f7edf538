"""Hypothesis strategies for protobuf requests: random bytes, and well-formed messages with
hostile field values built from any message descriptor (bounded depth and sizes)."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, message_factory
from hypothesis import strategies as st

NAMES = ["FuzzT", "FuzzG", "%RETRY%FuzzG", "%DLQ%FuzzG", "TBW102", "SCHEDULE_TOPIC_XXXX"]
REAL_NAMES = st.sampled_from(["FuzzT", "FuzzG"])
HOSTILE_TEXT = st.one_of(
    REAL_NAMES,  # weighted: names that pass validation reach the deeper code
    REAL_NAMES,
    REAL_NAMES,
    st.sampled_from(NAMES),
    st.sampled_from(["", " ", "*", "..", "a" * 300, "x" * 5000, "\x00", "é" * 70, "-1", "%"]),
    st.text(max_size=40),
)
HOSTILE_INT = st.one_of(
    st.sampled_from([0, -1, 1, 2, 7, 31, 32, 33, 1024, 2**31 - 1, -(2**31)]),
    st.integers(-(2**31), 2**31 - 1),
)
HOSTILE_LONG = st.one_of(
    st.sampled_from([0, -1, 1, 2**63 - 1, -(2**63), 2**62, 86_400_000]),
    st.integers(-(2**63), 2**63 - 1),
)
UNSIGNED_INT = st.one_of(st.sampled_from([0, 1, 2**32 - 1]), st.integers(0, 2**32 - 1))
UNSIGNED_LONG = st.one_of(st.sampled_from([0, 1, 2**64 - 1]), st.integers(0, 2**64 - 1))
FD = descriptor.FieldDescriptor


def _scalar(field: descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return HOSTILE_INT
    if kind in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
        return HOSTILE_LONG
    if kind in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return UNSIGNED_INT
    if kind in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return UNSIGNED_LONG
    if kind == FD.TYPE_BOOL:
        return st.booleans()
    if kind in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return st.floats(width=32 if kind == FD.TYPE_FLOAT else 64)
    if kind == FD.TYPE_STRING:
        return HOSTILE_TEXT
    if kind == FD.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"x" * 70_000))
    if kind == FD.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-5, 100))
    raise TypeError(f"no strategy for field {field.full_name} of type {kind}")


def _fill(draw: st.DrawFn, msg: Any, depth: int) -> None:
    fields = list(msg.DESCRIPTOR.fields)
    chosen = (
        draw(st.lists(st.sampled_from(fields), max_size=len(fields), unique=True)) if fields else []
    )
    for field in chosen:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target = getattr(msg, field.name)
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            for _ in range(draw(st.integers(0, 3))):
                key = draw(_scalar(key_field))
                if value_field.message_type is not None:
                    if depth > 0:
                        _fill(draw, target[key], depth - 1)
                else:
                    target[key] = draw(_scalar(value_field))
            continue
        repeated = field.is_repeated
        count = draw(st.integers(0, 3)) if repeated else 1
        for _ in range(count):
            if field.message_type is not None:
                if depth <= 0:
                    break
                child = getattr(msg, field.name).add() if repeated else getattr(msg, field.name)
                if not repeated:
                    child.SetInParent()
                _fill(draw, child, depth - 1)
            elif repeated:
                getattr(msg, field.name).append(draw(_scalar(field)))
            else:
                setattr(msg, field.name, draw(_scalar(field)))


def hostile(message_descriptor: descriptor.Descriptor, depth: int = 4) -> st.SearchStrategy[bytes]:
    """Serialized well-formed messages of ``message_descriptor`` with hostile values."""
    cls = message_factory.GetMessageClass(message_descriptor)

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        msg = cls()
        _fill(draw, msg, depth)
        return bytes(msg.SerializeToString())

    return build()


def _tagged(tag: int, rest: bytes) -> bytes:
    return bytes([tag]) + rest


def garbage() -> st.SearchStrategy[bytes]:
    """Random bytes, and random bytes after a valid-looking field tag."""
    return st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda tag, rest: bytes([tag]) + rest, st.integers(0, 255), st.binary(max_size=64)
        ),
    )


_ADDRESSING = {"Resource", "MessageQueue"}


def _anchor(msg: Any, field_name: str = "") -> None:
    """Point every ``Resource`` at the fixtures' topic or group, so that validation of names
    passes and the hostile values reach the code behind it."""
    if msg.DESCRIPTOR.full_name == "apache.rocketmq.v2.Resource":
        msg.name = "FuzzG" if "group" in field_name else "FuzzT"
        msg.resource_namespace = ""
        return
    for field in msg.DESCRIPTOR.fields:
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.is_repeated:
            for child in getattr(msg, field.name):
                _anchor(child, field.name)
        elif field.message_type.name in _ADDRESSING or msg.HasField(field.name):
            _anchor(getattr(msg, field.name), field.name)  # creates the addressing fields


def anchored(message_descriptor: descriptor.Descriptor, depth: int = 4) -> st.SearchStrategy[bytes]:
    """Like :func:`hostile`, with every topic and group name an existing one."""
    cls = message_factory.GetMessageClass(message_descriptor)

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        msg = cls()
        _fill(draw, msg, depth)
        _anchor(msg)
        return bytes(msg.SerializeToString())

    return build()
