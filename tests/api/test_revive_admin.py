"""Admin ``GetReviveQueues`` / ``SetReviveQueueCount`` and ``gannet pop revive-queues`` on a live
broker: the count moves new checkpoints, retired queues drain (their checkpoints still revive
messages) and then disappear."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from click.testing import CliRunner
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.api import receiving
from gannet.node.broker import threads
from gannet.node.cli import calls
from gannet.node.cli.root import main
from gannet.node.pop.config import PopConfig
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

from .conftest import CLIENT_ID, pop_broker, settle

pytestmark = pytest.mark.timeout(60)

LIMITS = receiving.ReceiveLimits(
    polling_ms_min=0, polling_ms_max=200, receive_invisible_ms_min=1_000
)
# Without in-memory matching every pop writes its checkpoint to a revive queue at once.
POP = PopConfig(buffer_merge_enabled=False, revive_interval_ms=100)


@pytest.fixture
def broker(tmp_path) -> Iterator[threads.BrokerThread]:
    with pop_broker(tmp_path, LIMITS, POP) as running:
        yield running


@pytest.fixture
def stubs(
    broker,
) -> Iterator[tuple[admin_pb2_grpc.AdminStub, service_pb2_grpc.MessagingServiceStub]]:
    with calls.channel(broker.endpoint) as opened:
        admin = admin_pb2_grpc.AdminStub(opened)  # type: ignore[no-untyped-call]
        yield admin, service_pb2_grpc.MessagingServiceStub(opened)


def _queues(reply: admin_pb2.ReviveQueuesResponse) -> list[tuple[int, bool]]:
    return [(q.queue_id, q.draining) for q in reply.queues]


def test_default_count_and_bounds(stubs) -> None:
    admin, _ = stubs
    reply = admin.GetReviveQueues(admin_pb2.GetReviveQueuesRequest(), timeout=5)
    assert reply.active_count == 8
    assert _queues(reply) == [(q, False) for q in range(8)]
    assert all(q.revive_offset == 0 and q.max_offset == 0 for q in reply.queues)
    for bad in (0, 65, -1):
        with pytest.raises(grpc.RpcError) as caught:
            admin.SetReviveQueueCount(admin_pb2.SetReviveQueueCountRequest(count=bad), timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "1..64" in caught.value.details()
    grown = admin.SetReviveQueueCount(admin_pb2.SetReviveQueueCountRequest(count=12), timeout=5)
    assert grown.active_count == 12
    assert _queues(grown) == [(q, False) for q in range(12)]
    # Nothing is parked in queues 3..11: they retire at once.
    shrunk = admin.SetReviveQueueCount(admin_pb2.SetReviveQueueCountRequest(count=3), timeout=5)
    assert (shrunk.active_count, _queues(shrunk)) == (3, [(0, False), (1, False), (2, False)])


def _receive_one(
    messaging, topic: str, group: str, invisible_s: int
) -> list[definition_pb2.Message]:
    request = service_pb2.ReceiveMessageRequest(batch_size=1)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.invisible_duration.FromSeconds(invisible_s)
    frames = list(messaging.ReceiveMessage(request, timeout=5, metadata=CLIENT_ID))
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


def test_retired_queues_drain_then_disappear(broker, stubs) -> None:
    admin, messaging = stubs
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name="R", queue_nums=1), timeout=5)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name="RG"), timeout=5)
    send = service_pb2.SendMessageRequest()
    for i in range(4):
        msg = send.messages.add(body=f"r{i}".encode())
        msg.topic.name = "R"
        msg.system_properties.message_id = f"0102FC000000013E000B13F97D000000{i:02d}"
    assert messaging.SendMessage(send, timeout=5, metadata=CLIENT_ID).status.code == Code.OK
    settle(broker)
    popped = [m for _ in range(4) for m in _receive_one(messaging, "R", "RG", 1)]
    assert len(popped) == 4  # four pops: checkpoints in revive queues 0, 1, 2, 3
    reply = admin.SetReviveQueueCount(admin_pb2.SetReviveQueueCountRequest(count=2), timeout=5)
    assert reply.active_count == 2
    assert (2, True) in _queues(reply)
    assert (3, True) in _queues(reply)
    # The retired queues still revive: all four come back (attempt 2) and are acked.
    back: list[definition_pb2.Message] = []
    deadline = time.monotonic() + 20
    while len(back) < 4:
        assert time.monotonic() < deadline, f"only {len(back)} of 4 came back"
        back.extend(_receive_one(messaging, "R", "RG", 30))
    assert sorted(m.body for m in back) == [b"r0", b"r1", b"r2", b"r3"]
    assert {m.system_properties.delivery_attempt for m in back} == {2}
    ack = service_pb2.AckMessageRequest(
        entries=[
            service_pb2.AckMessageEntry(receipt_handle=m.system_properties.receipt_handle)
            for m in back
        ]
    )
    ack.group.name, ack.topic.name = "RG", "R"
    assert messaging.AckMessage(ack, timeout=5, metadata=CLIENT_ID).status.code == Code.OK
    while True:  # drained queues are retired by the broker's housekeeping
        reply = admin.GetReviveQueues(admin_pb2.GetReviveQueuesRequest(), timeout=5)
        if _queues(reply) == [(0, False), (1, False)]:
            break
        assert time.monotonic() < deadline, f"still draining: {_queues(reply)}"
        time.sleep(0.1)
    assert all(q.revive_offset == q.max_offset for q in reply.queues)


def test_cli_pop_revive_queues(broker) -> None:
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(
            main, ["pop", "revive-queues", *args, "--endpoint", broker.endpoint], terminal_width=200
        )
        assert result.exit_code == code, result.output
        return result.output

    out = run()
    assert "8 active" in out
    assert "8 active, 0 parked" in out
    assert out.count("active") == 9  # title + 8 rows
    out = run("--set", "4")
    assert "4 active" in out
    assert "draining" not in out  # nothing parked: retired at once
    assert "--set" in run("--set", "0", code=2)
    assert "Usage" in run("--help")


def _pops(admin) -> tuple[int, int, bool]:
    """(parked, revive backlog, counted) of ``GetReviveQueues``."""
    reply = admin.GetReviveQueues(admin_pb2.GetReviveQueuesRequest(), timeout=5)
    backlog = sum(q.max_offset - q.revive_offset for q in reply.queues)
    return reply.parked_messages, backlog, reply.parked_counted


def _lag(admin, group: str) -> dict[str, int]:
    described = admin.DescribeGroup(admin_pb2.DescribeGroupRequest(name=group), timeout=5)
    found: dict[str, int] = {}
    for q in described.queues:
        found[q.topic] = found.get(q.topic, 0) + q.lag
    return found


def test_a_pop_not_acked_is_counted_until_revive_brings_it_back_as_retry_lag(broker, stubs) -> None:
    """What a drain reads of a popped message nobody acked, stage by stage: lag 0 once its
    checkpoint is written, then parked in the timer wheel, then in a revive queue, then lag on
    the retry topic; never in none of them (virtual time for the timer and revive)."""
    admin, messaging = stubs
    admin.CreateTopic(admin_pb2.CreateTopicRequest(name="U", queue_nums=1), timeout=5)
    admin.CreateGroup(admin_pb2.CreateGroupRequest(name="UG"), timeout=5)
    send = service_pb2.SendMessageRequest()
    msg = send.messages.add(body=b"u")
    msg.topic.name = "U"
    msg.system_properties.message_id = "0102FC000000013E000B13F97D0000E001"
    assert messaging.SendMessage(send, timeout=5, metadata=CLIENT_ID).status.code == Code.OK
    settle(broker)
    assert _pops(admin) == (0, 0, True)
    popped_ms = int(time.time() * 1000)
    assert [m.body for m in _receive_one(messaging, "U", "UG", 60)] == [b"u"]
    assert _lag(admin, "UG") == {"U": 0}  # consumed as far as its offset says
    assert _pops(admin) == (1, 0, True)  # its checkpoint waits in the wheel
    store = broker.broker.store
    store.timers.tick(popped_ms + 62_000)  # the checkpoint comes due into a revive queue
    assert _pops(admin) == (0, 1, True)
    pop = receiving.pop_broker_of(store)
    assert pop is not None
    store.timers.tick(popped_ms + 70_000)  # the wheel has nothing else due by then
    pop.revive(popped_ms + 70_000)  # not acked: redelivered to the retry topic
    assert _pops(admin) == (0, 0, True)
    assert _lag(admin, "UG") == {"U": 0, "%RETRY%UG_U": 1}
    listed = admin.ListTopics(admin_pb2.ListTopicsRequest(include_system=True), timeout=5)
    retry = [t.name for t in listed.topics if t.name.startswith("%RETRY%UG")]
    assert len(retry) == 1, retry
    described = admin.DescribeTopic(admin_pb2.DescribeTopicRequest(name=retry[0]), timeout=5)
    assert sum(q.max_offset - q.min_offset for q in described.queues) == 1
