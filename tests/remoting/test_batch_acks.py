"""The BATCH_ACK_MESSAGE body (``remoting/batch_acks.py``) as the 5.x client writes it."""

from __future__ import annotations

import base64
import json
import re

import pytest

from gannet.node.remoting import batch_acks


def _body(**entry: object) -> bytes:
    ack = {"c": "G", "t": "T", "r": "0", "so": 100, "q": 2, "rq": 3, "pt": 1700, "it": 60000}
    ack.update(entry)
    return json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()


def test_bit_sets_name_offsets_past_the_checkpoint_start() -> None:
    # java.util.BitSet {0, 1, 9}.toByteArray() is [0x03, 0x02]: little endian
    bits = base64.b64encode(bytes([0x03, 0x02])).decode()
    [found] = batch_acks.parse(_body(b=bits))
    assert (found.group, found.topic) == ("G", "T")
    assert found.extra_infos == (
        "100 1700 60000 3 0 broker-a 2 100",
        "100 1700 60000 3 0 broker-a 2 101",
        "100 1700 60000 3 0 broker-a 2 109",
    )


def test_long_field_names_are_read_too() -> None:
    body = {
        "brokerName": "broker-a",
        "acks": [{
            "consumerGroup": "G", "topic": "T", "retry": "1", "startOffset": 7, "queueId": 0,
            "reviveQueueId": 1, "popTime": 5, "invisibleTime": 10000,
            "bitSet": base64.b64encode(b"\x01").decode(),
        }],
    }  # fmt: skip
    [found] = batch_acks.parse(json.dumps(body).encode())
    assert found.extra_infos == ("7 5 10000 1 1 broker-a 0 7",)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"not json", "not JSON"),
        (json.dumps({"acks": []}).encode(), "brokerName"),
        (json.dumps({"brokerName": "b"}).encode(), "acks list"),
        (_body(b="!!"), "acks[0].b (bitSet) is not base64"),
        (_body(b="AQ==", so="x"), "acks[0].so (startOffset) is not a number"),
        (_body(b="AQ==", c=""), "acks[0].c (consumerGroup)"),
        (_body(b="AQ==", pt=-1), "acks[0].pt (popTime) = -1 is out of range"),
        (_body(b=base64.b64encode(b"\xff" * 600).decode()), "more than 4096 messages"),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(body: bytes, named: str) -> None:
    with pytest.raises(batch_acks.BadBatchAck, match=re.escape(named)):
        batch_acks.parse(body)
