"""The operator's broker client knows every topic type the admin API has."""

from __future__ import annotations

from gannet.node.protocol.gen import admin_pb2
from gannet.operator import brokers, specs


def test_every_admin_topic_type_has_a_name_the_topic_spec_accepts() -> None:
    names = {v.name for v in admin_pb2.DESCRIPTOR.enum_types_by_name["MessageType"].values}
    names.discard("MESSAGE_TYPE_UNSPECIFIED")
    assert names <= set(brokers._TYPE_VALUES)
    assert set(brokers._TYPE_VALUES) == set(specs.MESSAGE_TYPES)
