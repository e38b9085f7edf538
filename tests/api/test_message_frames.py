"""``receiving.message_pb`` (a popped message as a v2 ``Message``) takes a shortcut for messages
without the properties that set system properties of their own; the frame must be the one the
field-by-field rules give for any property map. :func:`_reference` states those rules, one
field at a time, as ``docs/protocol.md`` §7 lists them."""

from __future__ import annotations

import hashlib

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import Encoding, definition_pb2

from gannet.node.api import receiving, sending
from gannet.node.pop.popping import PoppedMessage
from gannet.node.pop.receipts import ReceiptHandle, TopicFlag
from gannet.node.store import msgids
from gannet.node.store import properties as props
from gannet.node.store.log import records

NOW_MS = 1_700_000_000_000
SPECIAL = [
    props.KEYS, props.TAGS, props.SHARDING_KEY, props.TIMER_DELIVER_MS, props.TIMER_DELAY_SEC,
    props.DELAY_TIME_LEVEL, props.TRANSACTION_PREPARED, sending.TRACE_CONTEXT, props.LITE_TOPIC,
    props.PRIORITY, props.DLQ_ORIGIN_TOPIC, props.DLQ_ORIGIN_MESSAGE_ID, props.BORN_HOST,
    props.UNIQ_KEY, props.POP_CK, props.TRANSIENT_PREFIX + "x", "user-a", "user-b",
]  # fmt: skip
VALUES = st.sampled_from(["", "true", "false", "5", "1700000001234", "a b", "x", "k1 k2"])


def _ms(stamp: Timestamp, ms: int) -> None:
    stamp.seconds, stamp.nanos = ms // 1000, ms % 1000 * 1_000_000


def _reference(popped: PoppedMessage, namespace: str, now_ms: int) -> definition_pb2.Message:
    msg = popped.message
    p = msg.properties
    host, port = msg.store_host
    out = definition_pb2.Message(body=msg.body)
    out.topic.name = msg.topic
    if namespace:
        out.topic.resource_namespace = namespace
    sp = out.system_properties
    sp.message_id = p.get(props.UNIQ_KEY) or msgids.create_offset_msg_id(
        host, port, msg.physical_offset
    )
    sp.keys.extend(props.split_keys(p.get(props.KEYS)))
    sp.body_digest.type = definition_pb2.MD5
    sp.body_digest.checksum = hashlib.md5(msg.body).hexdigest().upper()
    compressed = msg.sys_flag & records.SYSFLAG_COMPRESSED
    sp.body_encoding = Encoding.GZIP if compressed else Encoding.IDENTITY
    if p.get(props.TRANSACTION_PREPARED) == "true":
        sp.message_type = definition_pb2.TRANSACTION
    elif any(
        k in p for k in (props.DELAY_TIME_LEVEL, props.TIMER_DELIVER_MS, props.TIMER_DELAY_SEC)
    ):
        sp.message_type = definition_pb2.DELAY
    elif props.SHARDING_KEY in p:
        sp.message_type = definition_pb2.FIFO
    elif props.LITE_TOPIC in p:
        sp.message_type = definition_pb2.LITE
    elif props.PRIORITY in p:
        sp.message_type = definition_pb2.PRIORITY
    else:
        sp.message_type = definition_pb2.NORMAL
    _ms(sp.born_timestamp, msg.born_timestamp_ms)
    sp.born_host = p.get(props.BORN_HOST) or msg.born_host[0]
    _ms(sp.store_timestamp, msg.store_timestamp_ms)
    sp.store_host = f"{host}:{port}"
    sp.receipt_handle = popped.receipt_handle
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    sp.delivery_attempt = msg.reconsume_times + 1
    if props.TAGS in p:
        sp.tag = p[props.TAGS]
    if props.SHARDING_KEY in p:
        sp.message_group = p[props.SHARDING_KEY]
    if p.get(props.TIMER_DELIVER_MS, "").isdigit():
        _ms(sp.delivery_timestamp, int(p[props.TIMER_DELIVER_MS]))
    elif p.get(props.TIMER_DELAY_SEC, "").isdigit():
        _ms(sp.delivery_timestamp, now_ms + int(p[props.TIMER_DELAY_SEC]) * 1000)
    if sending.TRACE_CONTEXT in p:
        sp.trace_context = p[sending.TRACE_CONTEXT]
    if props.LITE_TOPIC in p:
        sp.lite_topic = p[props.LITE_TOPIC]
    if p.get(props.PRIORITY, "").isdigit():
        sp.priority = int(p[props.PRIORITY])
    if props.DLQ_ORIGIN_TOPIC in p or props.DLQ_ORIGIN_MESSAGE_ID in p:
        sp.dead_letter_queue.topic = p.get(props.DLQ_ORIGIN_TOPIC, "")
        sp.dead_letter_queue.message_id = p.get(props.DLQ_ORIGIN_MESSAGE_ID, "")
        sp.dead_letter_queue.SetInParent()
    for k, v in p.items():
        if k not in receiving._HIDDEN_PROPERTIES and not k.startswith(props.TRANSIENT_PREFIX):
            out.user_properties[k] = v
    return out


@settings(max_examples=120, deadline=None)
@given(
    properties=st.dictionaries(st.sampled_from(SPECIAL), VALUES, max_size=8),
    compressed=st.booleans(),
    namespace=st.sampled_from(["", "ns"]),
    reconsume=st.integers(0, 3),
)
def test_frames_match_the_field_by_field_rules(
    properties: dict[str, str], compressed: bool, namespace: str, reconsume: int
) -> None:
    msg = records.Message(
        topic="Orders",
        body=b"payload",
        queue_id=2,
        properties=properties,
        sys_flag=records.SYSFLAG_COMPRESSED if compressed else 0,
        born_timestamp_ms=NOW_MS - 1_234,
        born_host=("10.0.0.1", 5000),
        store_timestamp_ms=NOW_MS - 1_001,
        store_host=("10.0.0.2", 10911),
        reconsume_times=reconsume,
        queue_offset=102,
        physical_offset=8812,
    )
    handle = ReceiptHandle(100, NOW_MS, 60_000, 3, TopicFlag.NORMAL, "broker-a", 2, 102, 8812)
    popped = PoppedMessage(msg, handle, handle.encode())
    try:
        want = _reference(popped, namespace, NOW_MS)
    except ValueError as exc:  # e.g. a priority beyond int32: refused alike
        with pytest.raises(ValueError, match=str(exc)):
            receiving.message_pb(popped, namespace, NOW_MS)
        return
    got = receiving.message_pb(popped, namespace, NOW_MS)
    assert got == want
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
