"""A leader that steps down with records not committed yet and is elected again (fault seeds
104, 107, 108): its new term numbers queues after the records it kept.

In-process group of three (``conftest``), every member partitioned from the others
(``transport.partitioned``): the leader's next send is appended and proposed but never
committed, and the leader steps down (no quorum heard); while it follows, a record is appended
to its commit log outside Raft (as a timer or a Pop checkpoint written on a member that does
not lead), which its election record later cuts. The old leader and one follower heal: the
follower's log is shorter, so the old leader is elected again, and its new term commits the
kept record. A new send must take the next queue offset (seed 104 gave the kept record's
offset again), and a retry of the kept record's id must get that record's receipt.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from gannet.node.api.dedup import Key
from gannet.node.protocol.statuses import ApiError
from gannet.node.raft.ready import Role
from gannet.node.store import properties as props
from gannet.node.store.log.records import Message

from .conftest import Cluster
from .test_dedup import TOPIC, _request, _send, _stored

pytestmark = pytest.mark.timeout(120)


def _append_uncommitted(cluster: Cluster, leader: int, message_id: str, body: bytes) -> int:
    """Append and propose one send on ``leader`` as the send path does (nobody hears it: it is
    not committed in this term); returns where the leader's log ends."""
    raft = cluster.raft(leader)
    store = cluster.nodes[leader].broker.store

    async def append() -> int:
        assert raft.is_leader(), "the leader stepped down before the append"
        message = Message(topic=TOPIC, body=body, queue_id=0)
        message.properties[props.UNIQ_KEY] = message_id
        results, _ = store.put_messages_nowait([message])
        assert results[0].queue_offset == 1
        return raft.propose_local()

    end: int = cluster.run(leader, append, 5.0)
    return end


def test_a_leader_elected_again_numbers_after_its_kept_tail(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3)
    try:
        cluster.start_all()
        old = cluster.leader()
        cluster.create_topic(TOPIC, queues=1)
        assert _send(cluster, old, "ID-1", b"committed") == [("ID-1", 0)]
        back, away = (i for i in sorted(cluster.nodes) if i != old)
        for node_id in cluster.nodes:
            cluster.raft(node_id).transport.partitioned = True  # nobody hears anybody
        end = _append_uncommitted(cluster, old, "ID-2", b"kept")
        raft = cluster.raft(old)
        cluster.wait(old, lambda: raft.core is not None and raft.core.role is not Role.LEADER)
        core = raft.core
        assert core is not None
        assert core.log.last_offset == end > core.committed_offset
        store = cluster.nodes[old].broker.store
        # Bytes that land after the step-down, cut when the member is elected again: a write
        # that passed its write permit just before the step-down (the permit refuses later ones).
        permit, store.write_permit = store.write_permit, None
        try:
            store.put_message(Message(topic=TOPIC, body=b"stray", queue_id=0))
        finally:
            store.write_permit = permit
        cluster.raft(old).transport.partitioned = False
        cluster.raft(back).transport.partitioned = False
        assert cluster.leader([old, back]) == old  # the follower's log is shorter
        assert _send(cluster, old, "ID-3", b"next term") == [("ID-3", 2)]
        assert _send(cluster, old, "ID-2", b"kept") == [("ID-2", 1)]  # the kept record's receipt
        assert _stored(cluster, old) == [b"committed", b"kept", b"next term"]
        assert _stored(cluster, back) == [b"committed", b"kept", b"next term"]
        cluster.raft(away).transport.partitioned = False
    finally:
        cluster.stop_all()


def test_a_send_whose_leadership_check_went_stale_appends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send checks leadership, then may wait (for its original's outcome, or an index
    lookup); a node that lost leadership meanwhile, or leads a new term before applying the
    earlier ones, must not append it: the bytes would be proposed later, past the dedup
    check (fault seeds 107, 108: an id stored twice)."""
    cluster = Cluster(tmp_path, 3)
    try:
        cluster.start_all()
        old = cluster.leader()
        cluster.create_topic(TOPIC, queues=1)
        assert _send(cluster, old, "ID-1", b"committed") == [("ID-1", 0)]
        messaging = cluster.nodes[old].broker.messaging
        assert messaging is not None
        looking, release = threading.Event(), threading.Event()

        def slow_lookup(key: Key) -> None:
            looking.set()
            release.wait(30)

        monkeypatch.setattr(messaging.dedup, "_needs_lookup", lambda born_ms: True)
        monkeypatch.setattr(messaging.dedup, "_in_log", slow_lookup)
        raft = cluster.raft(old)
        sending = asyncio.run_coroutine_threadsafe(
            messaging._send(_request("ID-2", b"late"), "127.0.0.1"), raft.loop
        )
        assert looking.wait(10)  # checked leadership, now waits for the lookup
        for node_id in cluster.nodes:
            cluster.raft(node_id).transport.partitioned = True
        cluster.wait(old, lambda: raft.core is not None and raft.core.role is not Role.LEADER)
        store = cluster.nodes[old].broker.store
        end = store.commitlog.max_offset()
        release.set()
        with pytest.raises(ApiError):
            sending.result(10)
        assert store.commitlog.max_offset() == end
        for node_id in cluster.nodes:
            cluster.raft(node_id).transport.partitioned = False
    finally:
        cluster.stop_all()
