"""The order in which the operator reads a draining broker group's figures
(:meth:`gannet.operator.brokers.Brokers.group_offsets`): a message that moves on while they
are read must still be seen in one of them, or the group is deleted with it.

A scripted ``Admin`` server plays the worst case: one message that moves one stage further
right after every answer (delayed in the wheel -> in its queue -> popped, checkpoint parked in
the wheel -> checkpoint in a revive queue -> redelivered to the retry topic, where it stays).
Whatever stage it starts in, the figures read must hold the drain.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
import pytest

from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.operator import broker_group_planning as bgp
from gannet.operator.brokers import Brokers
from gannet.operator.specs import Permission
from tests.operator import fake_admin

TOPIC, RETRY, CONSUMERS = "Orders", "%RETRY%billing_Orders", "billing"
DELAYED, QUEUED, PARKED, REVIVING, RETRIED = range(5)


class MovingMessage(admin_pb2_grpc.AdminServicer):
    """Answers from where the message is, then moves it one stage on (up to RETRIED)."""

    def __init__(self, stage: int) -> None:
        self.stage = stage
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def _answered(self, name: str) -> None:
        self.calls.append(name)
        self.stage = min(self.stage + 1, RETRIED)

    def ListTopics(self, request: Any, context: Any) -> Any:
        with self.lock:
            names = [TOPIC] + ([RETRY] if self.stage == RETRIED else [])
            self._answered("ListTopics")
            return admin_pb2.ListTopicsResponse(
                topics=[admin_pb2.Topic(name=n, read_queue_nums=1, perm=4) for n in names]
            )

    def DescribeTopic(self, request: Any, context: Any) -> Any:
        with self.lock:
            name = request.name
            if name == RETRY and self.stage != RETRIED:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no topic {name}")
            # Orders holds it from QUEUED on (consumed or not), the retry topic once RETRIED.
            stored = int(self.stage != DELAYED if name == TOPIC else self.stage == RETRIED)
            reply = admin_pb2.DescribeTopicResponse(
                topic=admin_pb2.Topic(name=name, read_queue_nums=1, perm=4),
                queues=[admin_pb2.QueueOffsets(queue_id=0, min_offset=0, max_offset=stored)],
                delayed_messages=int(name == TOPIC and self.stage == DELAYED),
                delayed_counted=True,
            )
            self._answered("DescribeTopic")
            return reply

    def DescribeGroup(self, request: Any, context: Any) -> Any:
        with self.lock:
            committed = 0 if self.stage <= QUEUED else 1
            queues = [
                admin_pb2.GroupQueueOffset(
                    topic=TOPIC,
                    queue_id=0,
                    committed_offset=committed,
                    max_offset=int(self.stage != DELAYED),
                    lag=int(self.stage == QUEUED),
                )
            ]
            if self.stage == RETRIED:
                queues.append(
                    admin_pb2.GroupQueueOffset(
                        topic=RETRY, queue_id=0, committed_offset=0, max_offset=1, lag=1
                    )
                )
            self._answered("DescribeGroup")
            return admin_pb2.DescribeGroupResponse(
                group=admin_pb2.Group(name=CONSUMERS), queues=queues
            )

    def GetReviveQueues(self, request: Any, context: Any) -> Any:
        with self.lock:
            backlog = int(self.stage == REVIVING)
            reply = admin_pb2.ReviveQueuesResponse(
                active_count=1,
                queues=[admin_pb2.ReviveQueue(queue_id=0, revive_offset=0, max_offset=backlog)],
                parked_messages=int(self.stage == PARKED),
                parked_counted=True,
            )
            self._answered("GetReviveQueues")
            return reply


async def _read(endpoint: str) -> bgp.GroupState:
    brokers = Brokers(timeout_s=5)
    try:
        found = await brokers.group_offsets(endpoint, [CONSUMERS], [TOPIC])
    finally:
        await brokers.close()
    return bgp.GroupState(
        1,
        endpoint,
        (bgp.TopicDef(TOPIC, 1, Permission.ReadOnly, "NORMAL"),),
        (bgp.GroupDef(CONSUMERS, False, 16),),
        found.subscriptions,
        found.lag,
        found.messages,
        found.undelivered,
        found.pops,
    )


@pytest.mark.parametrize("start", [DELAYED, QUEUED, PARKED, REVIVING, RETRIED])
def test_a_message_moving_on_during_the_read_still_holds_the_drain(start: int) -> None:
    servicer = MovingMessage(start)
    with fake_admin.serving(servicer) as endpoint:
        state = asyncio.run(_read(endpoint))
    step = bgp.drain_step(state, [state])
    assert isinstance(step, bgp.WaitForLag), (start, servicer.calls, state)
    assert servicer.stage == RETRIED or servicer.calls.count("DescribeGroup") == 2


def test_figures_are_read_in_the_direction_messages_move() -> None:
    """Topics (outside the queues, stored) first, then lag, then unsettled pops, then lag and
    the retry and dead-letter topics again."""
    servicer = MovingMessage(RETRIED)
    with fake_admin.serving(servicer) as endpoint:
        asyncio.run(_read(endpoint))
    assert servicer.calls == [
        "ListTopics",
        "DescribeTopic",
        "DescribeTopic",
        "DescribeGroup",
        "GetReviveQueues",
        "DescribeGroup",
        "ListTopics",
        "DescribeTopic",
    ]
