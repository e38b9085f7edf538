"""Pure pieces of the v2 front door: conversion, queue choice, routes, settings."""

from __future__ import annotations

import dataclasses

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.api import client_settings, routes, sending
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import PERM_READ, MessageType, TopicConfig

NOW_MS = 1_800_000_000_000
IDENTITY = routes.BrokerIdentity("broker-a", "127.0.0.1", 8081)


def _request(topic: TopicConfig, **system) -> service_pb2.SendMessageRequest:
    msg = definition_pb2.Message(body=b"x")
    msg.topic.name = topic.topic_name
    msg.system_properties.message_id = "0102FC000000013E000B13F97D00000001"
    for name, value in system.items():
        setattr(msg.system_properties, name, value)
    return service_pb2.SendMessageRequest(messages=[msg])


def _prepare(topic: TopicConfig, request, peer: str = "10.1.2.3") -> sending.PreparedSend:
    return sending.prepare(request, {topic.topic_name: topic}.get, peer_host=peer, now_ms=NOW_MS)


def test_delivery_timestamp_in_seconds_or_milliseconds() -> None:
    topic = TopicConfig("T").with_message_type(MessageType.DELAY)
    in_ms = _request(topic)
    in_ms.messages[0].system_properties.delivery_timestamp.seconds = NOW_MS + 5_000  # quirk
    in_s = _request(topic)
    in_s.messages[0].system_properties.delivery_timestamp.seconds = NOW_MS // 1000 + 5
    for request in (in_ms, in_s):
        stored = _prepare(topic, request).messages[0]
        assert stored.properties[props.TIMER_DELIVER_MS] == str(NOW_MS + 5_000)


def test_client_id_tags_keys_and_group_become_properties() -> None:
    topic = TopicConfig("T").with_message_type(MessageType.FIFO)
    request = _request(topic, tag="TagA", message_group="g1", born_host="not-an-ip")
    request.messages[0].system_properties.keys.extend(["a", "b"])
    request.messages[0].user_properties["color"] = "blue"
    prepared = _prepare(topic, request, peer="::1")
    stored = prepared.messages[0]
    assert stored.properties == {
        "color": "blue",
        props.UNIQ_KEY: "0102FC000000013E000B13F97D00000001",
        props.TAGS: "TagA",
        props.KEYS: "a b",
        props.SHARDING_KEY: "g1",
    }
    assert stored.born_host == ("::1", 0)
    assert prepared.message_group == "g1"
    assert prepared.message_ids == ("0102FC000000013E000B13F97D00000001",)


def test_transactions_are_flagged_and_priority_needs_a_priority_topic() -> None:
    topic = TopicConfig("T").with_message_type(MessageType.MIXED)
    prepared = _prepare(topic, _request(topic, message_type=definition_pb2.TRANSACTION))
    assert prepared.transactional
    assert not _prepare(topic, _request(topic)).transactional
    with pytest.raises(ApiError) as caught:
        _prepare(topic, _request(topic, priority=1))
    assert caught.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    priority = TopicConfig("P", write_queue_nums=4).with_message_type(MessageType.PRIORITY)
    assert _prepare(priority, _request(priority, priority=7)).priority == 7


def test_queue_selector_hashes_groups_and_rotates_otherwise() -> None:
    selector = sending.QueueSelector()
    assert len({selector.select(8, "order-1") for _ in range(10)}) == 1
    assert [selector.select(3, None) for _ in range(4)] == [0, 1, 2, 0]


def test_route_permissions_follow_read_and_write_counts() -> None:
    topic = TopicConfig("T", read_queue_nums=4, write_queue_nums=2)
    queues = routes.message_queues(topic, IDENTITY, IDENTITY.endpoints(), "")
    assert [q.permission for q in queues] == [
        definition_pb2.READ_WRITE,
        definition_pb2.READ_WRITE,
        definition_pb2.READ,
        definition_pb2.READ,
    ]
    assert all(q.broker.id == 0 for q in queues)
    assert list(queues[0].accept_message_types) == [definition_pb2.NORMAL]
    read_only = dataclasses.replace(topic, perm=PERM_READ)
    assert {
        q.permission for q in routes.message_queues(read_only, IDENTITY, IDENTITY.endpoints(), "")
    } == {definition_pb2.READ}
    mixed = TopicConfig("M").with_message_type(MessageType.MIXED)
    assert len(routes.accept_message_types(mixed)) == 4


def test_unusable_request_endpoints_fall_back_to_ours() -> None:
    empty = definition_pb2.Endpoints()
    assert routes.usable_endpoints(empty, IDENTITY) == IDENTITY.endpoints()
    assert IDENTITY.endpoints().scheme == definition_pb2.IPv4
    assert routes.address_scheme("::1") == definition_pb2.IPv6
    assert routes.address_scheme("broker.local") == definition_pb2.DOMAIN_NAME


def test_client_registry_is_bounded() -> None:
    registry = client_settings.ClientRegistry(clients_max=2)
    for name in ("a", "b", "c"):
        registry.touch(name, definition_pb2.PRODUCER, "")
    assert registry.count() == 2
    assert registry.get("a") is None
    assert registry.forget("c") is not None
