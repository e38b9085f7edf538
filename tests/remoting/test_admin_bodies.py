"""The admin bodies as fastjson writes them (pure): MessageQueue map keys as objects, integer
keys bare, fields in fastjson's order, nulls left out."""

from __future__ import annotations

import pytest

from gannet.node.remoting import admin_bodies
from gannet.node.remoting.admin_bodies import QueueKey


def test_queue_keys_are_objects_in_key_position_sorted_by_topic_then_queue() -> None:
    offsets = {QueueKey("T", "broker-b", 1): 7, QueueKey("T", "broker-a", 0): 5}
    body = admin_bodies.encode(admin_bodies.reset_offset_body(offsets))
    assert body == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:5,'
        b'{"brokerName":"broker-b","queueId":1,"topic":"T"}:7}}'
    )


def test_fields_sorted_nulls_left_out_integer_keys_bare_text_escaped() -> None:
    numbered: dict[int, admin_bodies.Body] = {2: "x", 10: "y"}
    listed: list[admin_bodies.Body] = ['q"\u00e9', 1.5, True]
    value: dict[str, admin_bodies.Body] = {"b": None, "a": numbered, "c": listed}
    assert admin_bodies.encode(value) == '{"a":{2:"x",10:"y"},"c":["q\\"\u00e9",1.5,true]}'.encode()


def test_consume_stats_report_the_committed_offset_as_pull_offset() -> None:
    queue = QueueKey("T", "broker-a", 3)
    body = admin_bodies.encode(
        admin_bodies.consume_stats({queue: admin_bodies.GroupQueue(9, 4, 1_700_000_000_000)})
    )
    assert body == (
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"T"}:'
        b'{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":1700000000000,"pullOffset":4}}}'
    )


def test_a_key_of_another_type_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="neither str, int nor QueueKey"):
        admin_bodies.encode({1.5: "x"})  # type: ignore[arg-type]
