"""The ``disk-full`` and ``disk-full-secure`` e2e scenarios: the Raft leader's store sits on its
own small tmpfs, and that filesystem really fills up.

Called by :func:`e2e.replication.scenario.run_one`. Steps, on a 3-node group of broker processes:

1. node 1's data directory is a fresh tmpfs of ``DISK_SIZE_MB`` (:class:`SmallDisk`; mounting
   needs root — without it the scenario is *skipped* with the reason, never faked); node 1 is
   made leader (admin ``TransferLeadership``) and the official Producer gets ``ACKS_BEFORE``
   acknowledgements;
2. a ballast file (another tenant of the disk) fills that filesystem to ``FILL_RATIO`` — above
   the store's disk warning ratio (90 %) — and the admin ``Cleanup`` RPC triggers the pass that
   measures the real ``statvfs`` (the periodic pass would do the same within 10 s);
3. while full: node 1 reports ``disk_full``; a send through the official Producer to node 1 is
   refused with the store's "disk full: … above the warning ratio" error, and so is a send
   through a Producer pointed at a follower (the route leads it to the leader); node 1
   **stays leader** in the same term for ``HOLD_S`` (a full disk does not move leadership), so
   writes are refused group-wide — the documented behaviour this scenario asserts; reads of
   every acknowledged message (``QueryMessage`` by key, at its queue offset) work on node 1;
   Pop consumption through the official SimpleConsumer is a write too (its checkpoint goes to
   the commit log), so on the full node it is refused with the same disk error (asserted: the
   disk error or every message, never a hang or another failure);
4. the ballast is removed, ``Cleanup`` runs again, ``disk_full`` clears and the Producer gets
   ``ACKS_AFTER`` more acknowledgements (``resume_s``: space freed → first new acknowledgement);
   the SimpleConsumer then receives every acknowledged message from node 1;
5. :meth:`~e2e.replication.harness.ProcessGroup.verify`: nothing acknowledged lost, one leader
   per term, replicas byte-identical.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from e2e.processes import wait_for
from e2e.replication.harness import Load, ProcessGroup, Receipt
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.upkeep import disk_space

DISK_SIZE_MB = 256
"""A broker's fresh store preallocates about 50 MB (4 MB commit-log file, small index file:
:mod:`gannet.node.testing.small_stores`; 37 MB timer wheel, queues); the ballast fills the
rest."""
FILL_RATIO = 0.95
FULL_NODE = 1
MOUNT_TIMEOUT_S = 10.0
CONSUMER_GROUP = "E2eDiskFullReaders"
CONSUME_TIMEOUT_S = 20.0
INVISIBLE_S = 30
HOLD_S = 3.0
"""How long the full leader is watched (election timeout: 10 ticks of 0.1 s)."""


class MountNotPermitted(Exception):
    """This machine does not let us mount a filesystem (not root, or in a locked container)."""


class SmallDisk:
    """A tmpfs of ``size_mb`` mounted at ``path`` (an empty directory), filled and emptied by a
    ballast file. Unmount with :meth:`close` once nothing uses it."""

    def __init__(self, path: Path, size_mb: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise ValueError(f"mount point {path} is not empty")
        argv = ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)]
        if os.geteuid() != 0:
            argv = ["sudo", "-n", *argv]
        try:
            done = subprocess.run(
                argv, check=False, capture_output=True, text=True, timeout=MOUNT_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MountNotPermitted(f"cannot run {' '.join(argv)}: {exc}") from exc
        if done.returncode != 0:
            raise MountNotPermitted(
                f"{' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}"
            )
        self.path = path
        self.ballast = path / "ballast.bin"
        self._sudo = argv[0] == "sudo"

    def used_ratio(self) -> float:
        """The ratio the store measures (used / (used + available), as df)."""
        return disk_space.measure(str(self.path)).used_ratio

    def fill_to(self, ratio: float) -> int:
        """Allocate a ballast file so that the store measures ``ratio``; its size."""
        space = disk_space.measure(str(self.path))
        counted = space.used_bytes + space.available_bytes
        size_bytes = int(counted * ratio) - space.used_bytes
        if size_bytes <= 0:
            raise AssertionError(
                f"{self.path} is already {self.used_ratio():.0%} used, above the {ratio:.0%} fill"
            )
        fd = os.open(self.ballast, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.posix_fallocate(fd, 0, size_bytes)
        finally:
            os.close(fd)
        return size_bytes

    def free_ballast(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def close(self) -> None:
        argv = ["umount", "--lazy", str(self.path)]
        if self._sudo:
            argv = ["sudo", "-n", *argv]
        subprocess.run(argv, capture_output=True, timeout=MOUNT_TIMEOUT_S, check=False)


@dataclass(frozen=True)
class DiskFullReport:
    acknowledged: int
    duplicates: int
    terms: int
    refusal: str
    """What the official Producer raised for the send to the full leader."""
    resume_s: float
    pop_while_full: str
    """What the official SimpleConsumer got from the full node."""


def refused_send(group: ProcessGroup, node_id: int, topic: str) -> str:
    """One send through the official Producer to ``node_id``; the error text it raised
    (AssertionError when the send was acknowledged)."""
    security = group.security
    credentials = security.credentials() if security is not None else Credentials()
    config = ClientConfiguration(group.client_endpoint(node_id), credentials, request_timeout=3)
    producer = Producer(config, (topic,), tls_enable=security is not None)
    producer.startup()
    try:
        message = Message()
        message.topic = topic
        message.body = b"must be refused"
        message.keys = "refused-while-full"
        try:
            receipt = producer.send(message)
        except Exception as exc:  # the client's refusal: the thing under test
            return f"{type(exc).__name__}: {exc}"
        raise AssertionError(f"node {node_id} acknowledged a send with its disk full: {receipt}")
    finally:
        threading.Thread(target=_shutdown_quietly, args=(producer,), daemon=True).start()


def _shutdown_quietly(producer: Producer) -> None:
    with contextlib.suppress(Exception):
        producer.shutdown()


def disk_full(group: ProcessGroup) -> bool:
    reply = group.admin_call(FULL_NODE, "GetStatus", admin_pb2.GetStatusRequest())
    assert isinstance(reply, admin_pb2.GetStatusResponse)
    return bool(reply.store.disk_full)


def run_cleanup(group: ProcessGroup) -> admin_pb2.CleanupResponse:
    reply = group.admin_call(FULL_NODE, "Cleanup", admin_pb2.CleanupRequest(trigger=True))
    assert isinstance(reply, admin_pb2.CleanupResponse)
    return reply


def make_leader(group: ProcessGroup, node_id: int) -> None:
    leader = group.leader()
    if leader != node_id:
        group.admin_call(
            leader,
            "TransferLeadership",
            admin_pb2.TransferLeadershipRequest(target_node_id=str(node_id), timeout_ms=5000),
        )
    wait_for(lambda: group.leader() == node_id, 20, f"node {node_id} to lead")


def check_reads(group: ProcessGroup, node_id: int, topic: str, receipts: list[Receipt]) -> None:
    """Every acknowledged key is readable on ``node_id`` at its queue offset."""
    with group.channel(node_id) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for r in receipts:
            found = ProcessGroup.query_key(stub, topic, r.key)
            positions = {(m.message_id, m.queue_offset) for m in found}
            assert (r.message_id, r.offset) in positions, (
                f"node {node_id} with a full disk cannot read acknowledged {r.key} "
                f"({r.message_id} at {r.offset}; found {sorted(positions)})"
            )


def consume(
    group: ProcessGroup, node_id: int, topic: str, receipts: list[Receipt], timeout_s: float
) -> tuple[set[str], str]:
    """Receive (and ack) through the official SimpleConsumer of ``CONSUMER_GROUP`` from
    ``node_id`` until every receipt's message id arrived or ``timeout_s`` passed; the ids
    received and the first error the client raised ("" when none)."""
    security = group.security
    credentials = security.credentials() if security is not None else Credentials()
    config = ClientConfiguration(group.client_endpoint(node_id), credentials, request_timeout=10)
    consumer = SimpleConsumer(
        config,
        CONSUMER_GROUP,
        {topic: FilterExpression("*")},
        await_duration=0,
        tls_enable=security is not None,
    )
    consumer.startup()
    wanted = {r.message_id for r in receipts}
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while wanted - seen and time.monotonic() < deadline:
            try:
                batch = consumer.receive(32, INVISIBLE_S)
                for m in batch:
                    seen.add(str(m.message_id))
                    consumer.ack(m)
            except Exception as exc:  # the client's answer is the thing under test
                return seen & wanted, f"{type(exc).__name__}: {exc}"
        return seen & wanted, ""
    finally:
        threading.Thread(target=_shutdown_quietly, args=(consumer,), daemon=True).start()


def hold_leadership(group: ProcessGroup, term: int) -> None:
    """For ``HOLD_S`` (several election timeouts) node 1 keeps leading ``term`` and no node
    moves to a newer term: a full disk does not move leadership (polled: other processes)."""
    deadline = time.monotonic() + HOLD_S
    pause = threading.Event()
    while time.monotonic() < deadline:
        for node_id in group.ids:
            s = group.status(node_id)
            assert s is not None, f"node {node_id} stopped answering while node 1's disk is full"
            assert s.term == term, (
                f"node {node_id} is in term {s.term}, not {term}: leadership moved while node 1's "
                "disk is full (the documented behaviour is that node 1 keeps leading)"
            )
            assert int(s.leader_id or 0) == FULL_NODE, (
                f"node {node_id} names leader {s.leader_id!r}, not node 1, while its disk is full"
            )
        pause.wait(0.2)


def run_disk_full(
    group: ProcessGroup, disk: SmallDisk, topic: str, acks_before: int, acks_after: int
) -> DiskFullReport:
    """Steps 1–5 of the module docstring on a group whose node 1 store is on ``disk``."""
    group.start()
    group.create_topic(topic)
    make_leader(group, FULL_NODE)
    group.admin_call(FULL_NODE, "CreateGroup", admin_pb2.CreateGroupRequest(name=CONSUMER_GROUP))
    before = Load(group, topic, key_prefix="b")
    before.start()
    before.wait_acks(acks_before)
    receipts = before.stop()
    assert not disk_full(group), "node 1 reports a full disk before the ballast"

    status = group.status(FULL_NODE)
    assert status is not None
    term = status.term
    disk.fill_to(FILL_RATIO)
    cleanup = run_cleanup(group)
    assert cleanup.last_result.disk_used_ratio > 0.90, (
        f"the cleanup pass measured {cleanup.last_result.disk_used_ratio:.0%}, not above 90 %"
    )
    assert disk_full(group), f"node 1 does not report disk_full at {disk.used_ratio():.0%} used"

    refusal = refused_send(group, FULL_NODE, topic)
    assert "disk full" in refusal, f"the refusal does not name the full disk: {refusal}"
    assert "warning ratio" in refusal, f"the refusal does not name the warning ratio: {refusal}"
    follower = FULL_NODE % group.size + 1
    follower_refusal = refused_send(group, follower, topic)
    assert "disk full" in follower_refusal, (
        f"a Producer pointed at follower {follower} was not refused for the full disk: "
        f"{follower_refusal}"
    )
    check_reads(group, FULL_NODE, topic, receipts)
    popped, pop_error = consume(group, FULL_NODE, topic, receipts, CONSUME_TIMEOUT_S)
    if pop_error:
        # Pop writes its checkpoint to the commit log, so a full store refuses it: the client
        # must get the disk error, not a hang or an unexplained failure.
        assert "disk full" in pop_error, f"Pop receive on the full node failed: {pop_error}"
        pop_while_full = f"refused ({len(popped)} received first): {pop_error}"
    else:
        assert len(popped) == len(receipts), (
            f"Pop receive on the full node returned {len(popped)} of {len(receipts)} messages"
        )
        pop_while_full = f"all {len(popped)} received"
    hold_leadership(group, term)

    freed_at = time.monotonic()
    disk.free_ballast()
    run_cleanup(group)
    assert not disk_full(group), "node 1 still reports disk_full after the ballast was removed"
    after = Load(group, topic, key_prefix="a")
    after.start()
    after.wait_acks(1)
    resume_s = after.receipts[0].acked_at_s - freed_at
    after.wait_acks(acks_after)
    receipts += after.stop()
    popped, pop_error = consume(group, FULL_NODE, topic, receipts, CONSUME_TIMEOUT_S)
    assert not pop_error, f"Pop receive after space returned failed: {pop_error}"
    missing = len(receipts) - len(popped)
    assert not missing, f"{missing} of {len(receipts)} acknowledged messages never received"

    report = group.verify(topic, receipts)
    return DiskFullReport(
        report.acknowledged, report.duplicates, report.terms, refusal, resume_s, pop_while_full
    )


def run_follower_full(
    group: ProcessGroup, disk: SmallDisk, topic: str, acks_before: int, acks_after: int
) -> DiskFullReport:
    """``disk-full-follower``: node 1 on ``disk`` follows node 2. While node 1's disk is full the
    group keeps acknowledging and node 1 keeps taking the leader's bytes (the full flag refuses
    producers, not replication); :meth:`ProcessGroup.verify` requires the replicas to converge
    byte-identical."""
    group.start()
    group.create_topic(topic)
    leader = FULL_NODE % group.size + 1
    make_leader(group, leader)
    load = Load(group, topic)
    load.start()
    load.wait_acks(acks_before)
    disk.fill_to(FILL_RATIO)
    run_cleanup(group)
    assert disk_full(group), f"node 1 does not report disk_full at {disk.used_ratio():.0%} used"
    acked = len(load.receipts)
    load.wait_acks(acked + acks_after)
    assert group.current_leader() == leader, "leadership moved to or from the full follower"
    freed_at = time.monotonic()
    disk.free_ballast()
    run_cleanup(group)
    assert not disk_full(group), "node 1 still reports disk_full after the ballast was removed"
    receipts = load.stop()
    report = group.verify(topic, receipts)
    return DiskFullReport(
        report.acknowledged,
        report.duplicates,
        report.terms,
        "",
        time.monotonic() - freed_at,
        "not tried",
    )
