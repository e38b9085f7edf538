"""A member removed from its Raft group lets its clients go at once (issue 34, seed 906), on an
in-process group of three brokers and the official Python client (``rocketmq``).

The client's send channel is on the member that is then removed (the client sorts the route's
addresses, gRPC's pick_first takes the first), so its sends are forwarded to the leader. Before
the fix the removed member kept the leader it knew until its election timeout: the leader
refused its forwarded calls as from a non-member, the client got ``HA_NOT_AVAILABLE`` and
retried on the same member, and the port closed only an election timeout plus the port gate's
grace after the removal committed (7.7 s in one run here; the client's sends failed meanwhile).
Now the leader's first refusal tells the member it is removed
(:mod:`gannet.node.replication.removal`): its port closes at once, the client moves to another
member, and no further call is forwarded and refused. The election timeout is set to 3–6 s so
that the two behaviours are far apart. The member is then added again (a learner under the
same node id, promoted): it serves again. A leader that removes itself closes its port at
once too, once it stepped down (before the fix: after the leaderless grace). Every wait awaits
a Raft condition or a client answer; nothing sleeps.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer

from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol.gen import admin_pb2

from .conftest import Cluster
from .test_cluster import _message, forward_stats

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
ELECTION_TIMEOUT_TICKS = 60
"""3–6 s at the tests' 50 ms tick: a removed member that waits for it is easy to tell."""
CLOSED_WITHIN_S = 1.0
"""The removed member's client port is closed this soon after its removal committed (before
the fix: at least the election timeout, 3 s, plus the port gate's 0.5 s)."""
SENT_WITHIN_S = 2.5
"""The client's next successful send after the removal committed comes this soon."""
CALL_S = 10.0
GRACE_S = 30.0
"""The leaderless grace of the second test: far above its waits."""
TOPIC = "Removed"


class SlowElections(Cluster):
    def config(self, node_id: int) -> BrokerConfig:
        config = super().config(node_id)
        assert config.replication is not None
        replication = dataclasses.replace(
            config.replication, election_timeout_ticks=ELECTION_TIMEOUT_TICKS
        )
        return dataclasses.replace(config, replication=replication)


@pytest.fixture
def slow(tmp_path: Path) -> Iterator[SlowElections]:
    made = SlowElections(tmp_path, 3)
    yield made
    made.stop_all()


class Sender:
    """Sends one message after another from a thread; remembers when each began and ended."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.results: list[tuple[float, float, bool]] = []
        """(started, ended, acknowledged) of every send, monotonic seconds."""
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="removed-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.producer.send(_message(TOPIC, f"r{sent}".encode()))
                ok = True
            except Exception:  # the client's own failure after its retries
                ok = False
            sent += 1
            with self.changed:
                self.results.append((started, time.monotonic(), ok))
                self.changed.notify_all()

    def first_success_after(self, since: float, timeout_s: float) -> float:
        """When the first send started after ``since`` was acknowledged."""

        def found() -> float | None:
            return next((end for start, end, ok in self.results if ok and start > since), None)

        with self.changed:
            assert self.changed.wait_for(lambda: found() is not None, timeout_s), (
                f"no successful send within {timeout_s} s: {self.results[-10:]}"
            )
            at = found()
        assert at is not None
        return at

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(CALL_S * 2)


def _transfer(cluster: Cluster, via: int, target: int) -> None:
    request = admin_pb2.TransferLeadershipRequest(target_node_id=str(target))
    cluster.admin(via, lambda a: a.TransferLeadership(request, timeout=CALL_S))
    assert cluster.leader() == target


def test_a_removed_member_closes_its_client_port_at_once_and_can_be_added_again(
    slow: SlowElections,
) -> None:
    slow.start_all()
    leader = slow.leader()
    # The official Python client sorts a channel's addresses ("host:port" strings) and gRPC's
    # pick_first connects to the first that answers: its channel is on that member.
    removed = min(slow.nodes, key=slow.endpoint)
    if removed == leader:
        leader = next(i for i in slow.nodes if i != removed)
        _transfer(slow, removed, leader)
    slow.create_topic(TOPIC)
    endpoints = ";".join(slow.endpoint(n) for n in slow.nodes)
    producer = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=5), (TOPIC,))
    producer.startup()
    sender = Sender(producer)
    try:
        producer.send(_message(TOPIC, b"forwarded"))
        assert forward_stats(slow, removed).forwarded_total.get("SendMessage", 0) >= 1
        broker = slow.nodes[removed].broker
        assert broker.server is not None
        sender.start()

        remove = admin_pb2.RemoveMemberRequest(node_id=str(removed))
        reply = slow.admin(leader, lambda a: a.RemoveMember(remove, timeout=CALL_S))
        committed_at = time.monotonic()  # the call returns once the removal committed
        assert str(removed) not in {m.node_id for m in reply.members}

        slow.wait(removed, lambda: broker.server is None, timeout_s=CALL_S)
        closed_after_s = time.monotonic() - committed_at
        sent_after_s = sender.first_success_after(committed_at, CALL_S) - committed_at
        print(f"removal committed -> port closed {closed_after_s:.3f} s, next send acknowledged "
              f"{sent_after_s:.3f} s")  # fmt: skip
        assert closed_after_s < CLOSED_WITHIN_S, closed_after_s
        assert sent_after_s < SENT_WITHIN_S, sent_after_s
        raft = slow.raft(removed)
        assert raft.knows_removed()
        assert raft.leader() is None
        assert (
            broker.not_ready_reason()
            == "removed from the Raft group (no leader counts this member)"
        )
        # The refusal that told it is the only one: later calls were held, never forwarded.
        assert forward_stats(slow, removed).refused_not_member_total <= 1
        assert broker.port_closes_total == 1
        sender.stop()

        # Added again under the same node id (a learner, then promoted): it serves again.
        spec = slow.peers[removed - 1]
        add = admin_pb2.AddMemberRequest(
            node_id=str(removed),
            peer_endpoint=spec.peer_endpoint,
            client_endpoint=spec.client_endpoint,
        )
        added = slow.admin(leader, lambda a: a.AddMember(add, timeout=60))
        assert (str(removed), True) in {(m.node_id, m.voter) for m in added.members}
        slow.wait(removed, lambda: broker.server is not None, timeout_s=CALL_S)
        assert not raft.knows_removed()
        assert broker.not_ready_reason() is None
        leader_spec = raft.leader()
        assert leader_spec is not None
        assert leader_spec.node_id == leader
        end = slow.last_offset(leader)
        slow.wait_replicated(end)
    finally:
        sender.stop()
        producer.shutdown()


def test_a_leader_that_removed_itself_closes_its_client_port_at_once(cluster: Cluster) -> None:
    """Once its removal commits a leader hands over and steps down: it knows no leader and its
    committed configuration no longer names it, so it closes its port without the leaderless
    grace (set to 30 s here, so that only the removal can close it within the wait)."""
    cluster.leaderless_close_after_s = GRACE_S
    cluster.start_all()
    leader = cluster.leader()
    broker = cluster.nodes[leader].broker
    remove = admin_pb2.RemoveMemberRequest(node_id=str(leader))
    cluster.admin(leader, lambda a: a.RemoveMember(remove, timeout=CALL_S))
    others = [i for i in cluster.nodes if i != leader]
    assert cluster.leader(among=others) != leader
    cluster.wait(leader, lambda: broker.server is None, timeout_s=CALL_S)  # not GRACE_S
    raft = cluster.raft(leader)
    assert raft.knows_removed()
    assert raft.leader() is None
    assert broker.port_closes_total == 1
