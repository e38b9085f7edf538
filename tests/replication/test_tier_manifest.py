"""The tier manifest through the Raft log, in a 3-broker in-process group (64 KiB commit-log
files, real sockets on 127.0.0.1).

A change recorded on the leader (:class:`RaftManifestLog`) returns once committed and is applied
by every member — a recorded gap (files deleted before offload) as well as objects; a member
restarted keeps it (its applied manifest file), and a member wiped and reset below the leader's
retention gets it, gap included, from the config snapshot the leader appends for it. A
follower cannot propose; a conflicting change is refused before anything is appended.
"""

from __future__ import annotations

import functools
import shutil
import time

import pytest

from gannet.node.replication.errors import NotLeaderError
from gannet.node.replication.tier_log import RaftManifestLog
from gannet.node.store.log import records
from gannet.node.store.tier import errors, manifests

from .conftest import Cluster

pytestmark = pytest.mark.timeout(120)

PREFIX = "gannet/test/g0"
YEAR_MS = 365 * 24 * 3_600_000


def _object(base: int, size: int, fill: str) -> manifests.TierObject:
    return manifests.TierObject(base, size, fill * 32, 1_764_900_000_000 + base)


def _manifest_of(cluster: Cluster, node_id: int) -> manifests.Manifest | None:
    return cluster.raft(node_id).config_log.tier.current()


def _has(cluster: Cluster, node_id: int, expected: manifests.Manifest) -> bool:
    return _manifest_of(cluster, node_id) == expected


def test_a_change_on_the_leader_is_applied_on_every_member_and_survives_reset(
    cluster: Cluster,
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    log = RaftManifestLog(cluster.raft(leader), PREFIX, commit_timeout_s=10)
    first = log.propose(manifests.RecordObject(_object(0, 1000, "a")))
    assert first == manifests.Manifest(PREFIX, (_object(0, 1000, "a"),))
    again = log.propose(manifests.RecordObject(_object(0, 1000, "a")))  # a retried proposal
    assert again == first
    with pytest.raises(errors.ManifestConflict, match="does not continue the tier"):
        log.propose(manifests.RecordObject(_object(5000, 10, "b")))
    log.propose(manifests.RecordObject(_object(1000, 500, "c")))
    log.propose(manifests.RecordGap(1500, 3000))
    assert log.propose(manifests.RecordGap(1500, 3000)).gaps == (manifests.Gap(1500, 3000),)
    second = log.propose(manifests.RecordObject(_object(3000, 500, "e")))
    assert second.end_offset == 3500
    assert second.gap_bytes() == 1500
    for node_id in cluster.nodes:
        cluster.wait(node_id, functools.partial(_has, cluster, node_id, second))

    follower, wiped = (i for i in cluster.nodes if i != leader)
    with pytest.raises(NotLeaderError):
        RaftManifestLog(cluster.raft(follower), PREFIX, commit_timeout_s=1).propose(
            manifests.RecordObject(_object(3500, 1, "d"))
        )

    # A restarted member starts from its applied manifest file.
    cluster.crash(follower)
    cluster.start(follower)
    assert _manifest_of(cluster, follower) == second

    # A wiped member behind the leader's retention gets the manifest from a config snapshot.
    cluster.crash(wiped)
    shutil.rmtree(cluster.root / f"node{wiped}")
    store = cluster.nodes[leader].broker.store
    body = bytes(4000)
    for _ in range(80):  # about five 64 KiB files, proposed by the leader's tick
        store.put_messages_nowait([records.Message(topic="TierFill", body=body)])
    cluster.raft(leader).loop.call_soon_threadsafe(cluster.raft(leader).propose_local)
    end = store.commitlog.max_offset()
    cluster.wait(leader, lambda: cluster.commit_offset(leader) >= end)
    later_ms = time.time_ns() // 1_000_000 + YEAR_MS
    while len(store.commitlog.files.files) > 1:
        store.cleaner.run(manual=True, now_ms=later_ms)
    start = store.commitlog.min_offset()
    assert start > 0
    node = cluster.raft(leader)
    cluster.wait(leader, lambda: node.core is not None and node.core.log.start_offset == start)
    cluster.start(wiped)
    cluster.wait(wiped, lambda: cluster.raft(wiped).state.log_resets_total == 1)
    cluster.wait(wiped, functools.partial(_has, cluster, wiped, second))
    assert cluster.nodes[wiped].broker.store.commitlog.min_offset() == start
