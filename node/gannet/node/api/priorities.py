"""Priority messages (v2 ``MessageType.PRIORITY``, ``system_properties.priority``).

What Gannet does (RocketMQ 5 leaves the broker side open in the protocol; ADR 0004):

* A topic of type PRIORITY accepts messages with a ``priority`` ≥ 0 (higher is more urgent);
  the priority is kept as the ``__PRIORITY`` property and picks the queue:
  ``min(priority, write queues − 1)``. A topic of 4 queues thus has 4 levels, 0 to 3, and
  every priority above 3 counts as 3.
* Pop consumption of a PRIORITY topic reads its queues from the highest to the lowest
  (:class:`~gannet.node.pop.popping.PopRequest` ``priority_first``), so a receive returns the
  most urgent messages waiting; within one priority, messages come in store order.
* Receivers see the priority again in ``system_properties.priority``.

Called by :mod:`sending` (send side), :mod:`messaging` (queue choice) and :mod:`receiving`.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2

from gannet.node.protocol import statuses
from gannet.node.protocol.statuses import ApiError
from gannet.node.store import properties as props
from gannet.node.store.configs.topics import MessageType


def mark(sp: definition_pb2.SystemProperties, properties: dict[str, str]) -> MessageType:
    """Keep a PRIORITY message's priority in ``properties``; its type."""
    if sp.HasField("message_group") or sp.HasField("delivery_timestamp"):
        raise ApiError(
            statuses.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a priority message cannot have message_group or delivery_timestamp",
        )
    if sp.priority < 0:
        raise ApiError(statuses.BAD_REQUEST, f"priority {sp.priority} is negative; use 0 or more")
    properties[props.PRIORITY] = str(int(sp.priority))
    return MessageType.PRIORITY


def of(properties: dict[str, str]) -> int | None:
    text = properties.get(props.PRIORITY)
    return int(text) if text is not None and text.isdigit() else None


def queue_of(priority: int, write_queue_nums: int) -> int:
    """The queue of a priority: one queue per level, the top one for anything above."""
    return max(0, min(priority, write_queue_nums - 1))
