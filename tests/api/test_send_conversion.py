"""sending.prepare's one-pass conversion equals the per-message one it replaced (issue 19).

The reference below is ``prepare`` as it was before the inline path: every message through
:func:`sending._convert`. Hypothesis draws requests of valid and invalid messages (each field
from values that pass and values that break one rule) and both must give the same records,
ids, group, flags, or the same ApiError code and message.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gannet.node.api import priorities, sending
from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import MessageType, TopicConfig

NOW_MS = 1_700_000_000_000
LIMITS = sending.SendLimits(body_size_max_bytes=64, batch_messages_max=8)
TOPICS = {
    kind.value: TopicConfig(kind.value).with_message_type(kind)
    for kind in (
        MessageType.NORMAL,
        MessageType.FIFO,
        MessageType.DELAY,
        MessageType.TRANSACTION,
        MessageType.MIXED,
        MessageType.LITE,
        MessageType.PRIORITY,
    )
}


def _reference_prepare(
    request: service_pb2.SendMessageRequest, topic_of: sending.TopicLookup
) -> sending.PreparedSend:
    messages: Sequence[definition_pb2.Message] = request.messages
    if not messages:
        raise ApiError(statuses.MESSAGE_CORRUPTED, "SendMessageRequest.messages is empty")
    if len(messages) > LIMITS.batch_messages_max:
        raise ApiError(
            statuses.PAYLOAD_TOO_LARGE,
            f"SendMessageRequest has {len(messages)} messages; at most "
            f"{LIMITS.batch_messages_max} per request",
        )
    topic_name = str(messages[0].topic.name)
    if any(m.topic.name != topic_name for m in messages):
        raise ApiError(statuses.MESSAGE_CORRUPTED, "all messages of a batch must share the topic")
    topic = sending.writable_topic(topic_of, topic_name)
    accepted = tuple(topic.accepted_message_types)
    converted = [sending._convert(m, topic, accepted, "10.0.0.9", NOW_MS, LIMITS) for m in messages]
    group_key = props.LITE_TOPIC if MessageType.LITE in accepted else props.SHARDING_KEY
    groups = {m.properties.get(group_key) for m in converted}
    group = groups.pop() if len(groups) == 1 else None
    ids = tuple([m.properties[props.UNIQ_KEY] for m in converted])
    transactional = any(
        m.system_properties.message_type == definition_pb2.TRANSACTION for m in messages
    )
    if transactional and len(messages) > 1:
        raise ApiError(
            statuses.BAD_REQUEST,
            f"a transactional message is sent alone; this request has {len(messages)} messages",
        )
    priority = None
    if MessageType.PRIORITY in accepted:
        priority = max((priorities.of(m.properties) or 0) for m in converted)
    return sending.PreparedSend(topic, tuple(converted), ids, group, transactional, priority)


def _outcome(prepare: object) -> object:
    try:
        result = prepare()  # type: ignore[operator]
    except ApiError as exc:
        return ("error", exc.code, exc.message)
    assert isinstance(result, sending.PreparedSend)
    # Record properties keep their order in the record: compare them as lists.
    return (result, [list(m.properties.items()) for m in result.messages])


_PLAIN = b"payload"


@st.composite
def _message(draw: st.DrawFn, topic: str, bad: str) -> definition_pb2.Message:
    """A message whose fields come from valid values, but the field ``bad`` ("" for none,
    "all" for every one) also from invalid ones: most requests then fail on one rule only,
    and the others reach the conversion of valid messages."""
    strict = bad == ""
    names = iter(range(100))

    def pick(valid: Sequence[Any], invalid: Sequence[Any]) -> Any:
        mine = str(next(names))
        chosen = bad in {"all", mine}
        return draw(st.sampled_from([*valid, *invalid] if chosen else valid))

    def sometimes(one_in: int) -> bool:
        # Hypothesis favours small integers: a True behind False choices stays rare.
        return draw(st.sampled_from([False] * (one_in - 1) + [True]))

    pb = definition_pb2.Message(
        body=pick(
            [_PLAIN, b"y" * 64],
            [b"", b"z" * 65, gzip.compress(_PLAIN), zlib.compress(_PLAIN), b"\x1f\x8bno"],
        )
    )
    pb.topic.name = pick([topic], ["Other", "bad topic"])
    sp = pb.system_properties
    sp.message_id = pick(
        ["01ABCDEF0123456789", "id-1", "x" * 128], ["", "   ", "a b", "é", "x" * 129, "t\tid"]
    )
    for field in ("body_encoding", "message_type"):
        value = pick([None, 0, 1], [-1, 2, 3, 4, 5, 6, 7])
        if value is not None:
            setattr(sp, field, value)
    text_valid, text_invalid = ["t", "ok tag", "ünï"], ["", " ", "a|b", "ctl\x01", "x" * 257]
    if sometimes(3):
        sp.tag = pick(text_valid, text_invalid)
    if sometimes(3):
        sp.keys.extend(draw(st.lists(st.just(pick(text_valid, text_invalid)), max_size=2)))
    if sometimes(3):
        for _ in range(draw(st.integers(1, 2))):
            key = pick(["k", "v" * 40], ["", "UNIQ_KEY", "TAGS", "__SHARDINGKEY", "a\x02"])
            pb.user_properties[str(key)] = str(pick(text_valid, text_invalid))
    for field, values in (
        ("message_group", ["g1", "g2", "", " ", "x" * 64, "c\x7f"]),
        ("lite_topic", ["lite-a", "", "bad lite"]),
        ("trace_context", ["00-abc-01", ""]),
        ("born_host", ["10.1.2.3", "::1", "host.example", ""]),
    ):
        if sometimes(5 if field in ("trace_context", "born_host") or not strict else 40):
            setattr(sp, field, draw(st.sampled_from(values)))
    if sometimes(8 if not strict else 40):
        sp.priority = draw(st.sampled_from([-1, 0, 3, 9]))
    if sometimes(8 if not strict else 40):
        seconds = draw(st.sampled_from([0, NOW_MS + 1000, NOW_MS // 1000 + 5, -5, NOW_MS * 10]))
        sp.delivery_timestamp.seconds = seconds
    if draw(st.booleans()):
        sp.born_timestamp.seconds = pick([1_700_000_000, 0], [-(10**12), 10**12])
        sp.born_timestamp.nanos = pick([0, 5_000_000], [-1, 10**9])
    if sometimes(8):
        sp.body_digest.type = pick([1, 2, 3], [0, 9])
        right = f"{zlib.crc32(pb.body):08X}"
        sp.body_digest.checksum = pick([right, right.lower()], ["", "0BADF00D"])
    return pb


@st.composite
def _request(draw: st.DrawFn) -> service_pb2.SendMessageRequest:
    topic = draw(st.sampled_from(["NORMAL", "NORMAL", "MIXED", *TOPICS, "Missing"]))
    bad = draw(st.sampled_from(["", "", "all", *(str(n) for n in range(20))]))
    sizes = st.sampled_from([1, 1, 2, 3, 4, 0, 9]) if bad != "all" else st.integers(1, 3)
    request = service_pb2.SendMessageRequest()
    for _ in range(draw(sizes)):
        request.messages.append(draw(_message(topic, bad)))
    return request


@settings(max_examples=200, deadline=None)
@given(_request())
def test_one_pass_conversion_equals_the_per_message_one(
    request: service_pb2.SendMessageRequest,
) -> None:
    new = _outcome(
        lambda: sending.prepare(
            request, TOPICS.get, peer_host="10.0.0.9", now_ms=NOW_MS, limits=LIMITS
        )
    )
    assert new == _outcome(lambda: _reference_prepare(request, TOPICS.get))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["01AB", "01CD", "id-3"]), min_size=1, max_size=8),
    st.sampled_from(["t", "ok tag", "ünï", "a|b", ""]),
)
def test_valid_normal_batches_take_the_inline_path_and_match(ids: list[str], tag: str) -> None:
    """Mostly-valid NORMAL batches (the hot path), so the inline conversion itself is compared
    and not only its fall-backs."""
    request = service_pb2.SendMessageRequest()
    for index, message_id in enumerate(ids):
        pb = request.messages.add(body=_PLAIN)
        pb.topic.name = "NORMAL"
        sp = pb.system_properties
        sp.message_id = message_id
        sp.body_encoding = definition_pb2.IDENTITY
        sp.message_type = definition_pb2.NORMAL
        sp.born_timestamp.seconds = 1_700_000_000 + index
        sp.born_host = ["10.1.2.3", "host.example"][index % 2]
        if index % 3 == 0:
            sp.tag = tag
            sp.trace_context = "00-abc-01"
            sp.keys.append(f"key-{index}")
            pb.user_properties["color"] = "red"
    new = _outcome(
        lambda: sending.prepare(
            request, TOPICS.get, peer_host="10.0.0.9", now_ms=NOW_MS, limits=LIMITS
        )
    )
    assert new == _outcome(lambda: _reference_prepare(request, TOPICS.get))


_ONE_FIELD_OFF: dict[str, Callable[[definition_pb2.SystemProperties], object]] = {
    "priority": lambda sp: setattr(sp, "priority", 3),
    "negative priority": lambda sp: setattr(sp, "priority", -1),
    "lite topic": lambda sp: setattr(sp, "lite_topic", "lite-a"),
    "group": lambda sp: setattr(sp, "message_group", "g1"),
    "delivery": lambda sp: sp.delivery_timestamp.FromMilliseconds(NOW_MS + 1000),
    "non-ASCII id": lambda sp: setattr(sp, "message_id", "é"),
    "blank in id": lambda sp: setattr(sp, "message_id", "a b"),
    "id 129": lambda sp: setattr(sp, "message_id", "x" * 129),
    "TRANSACTION": lambda sp: setattr(sp, "message_type", 4),
    "type -1": lambda sp: setattr(sp, "message_type", -1),
    "type FIFO": lambda sp: setattr(sp, "message_type", 2),
    "GZIP plain body": lambda sp: setattr(sp, "body_encoding", 2),
    "encoding -1": lambda sp: setattr(sp, "body_encoding", -1),
    "encoding 3": lambda sp: setattr(sp, "body_encoding", 3),
    "digest": lambda sp: setattr(sp.body_digest, "type", 1),
    "tag 257": lambda sp: setattr(sp, "tag", "x" * 257),
    "born nanos": lambda sp: setattr(sp.born_timestamp, "nanos", -1),
}


@pytest.mark.parametrize("topic", sorted(TOPICS))
@pytest.mark.parametrize("change", sorted(_ONE_FIELD_OFF))
def test_a_valid_message_with_one_field_off_matches(topic: str, change: str) -> None:
    """Each condition that sends a message past the inline path, alone on a valid message."""
    request = service_pb2.SendMessageRequest()
    pb = request.messages.add(body=_PLAIN)
    pb.topic.name = topic
    pb.system_properties.message_id = "01AB"
    _ONE_FIELD_OFF[change](pb.system_properties)
    new = _outcome(
        lambda: sending.prepare(
            request, TOPICS.get, peer_host="10.0.0.9", now_ms=NOW_MS, limits=LIMITS
        )
    )
    assert new == _outcome(lambda: _reference_prepare(request, TOPICS.get))
