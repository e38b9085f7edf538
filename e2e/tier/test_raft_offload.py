"""Offload in a 3-member Raft group (in-process brokers, 64 KiB files) against SeaweedFS.

The leader offloads (one file per 0.1 s pass); it is crashed as a killed process would be once
the manifest holds two files; the new leader resumes; the old leader restarts as a follower.
Then every member holds the same manifest, contiguous from 0, every member has deleted what
it records (followers free their disks without the bucket), the bucket holds exactly the
manifest's objects with their MD5, the manifest's copy in the bucket (written by the leader
after each committed change) equals the members' manifest, and tier + local files hold every
written body once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.tier import seaweedfs
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.log import layout, records
from gannet.node.store.tier import buckets, manifest_copy, manifests, naming, planning
from gannet.node.store.tier.offloading import TierConfig
from tests.replication.conftest import Cluster

pytestmark = pytest.mark.timeout(180)

TOPIC = "TierRaft"
BODIES = [f"r{n:05d}:".encode() + bytes([n % 251]) * 3000 for n in range(160)]  # ~8 files


class TierCluster(Cluster):
    def __init__(self, root: Path, tier: TierConfig) -> None:
        super().__init__(root, 3)
        self.tier = tier

    def config(self, node_id: int) -> BrokerConfig:
        return dataclasses.replace(super().config(node_id), tier=self.tier)

    def kill(self, node_id: int) -> None:
        offloader = self.nodes[node_id].broker.offloader
        assert offloader is not None
        offloader._stop.set()  # the process dies: its loop does no further step
        self.crash(node_id)


@pytest.fixture
def cluster(tmp_path: Path, seaweed: seaweedfs.SeaweedS3, prefix: str) -> Iterator[TierCluster]:
    policy = planning.TierPolicy(offload_age_s_min=0, uploads_max=1)
    tier = TierConfig(seaweed.bucket_config(seaweedfs.BUCKET), prefix, policy, 0.1, 1.0)
    made = TierCluster(tmp_path, tier)
    yield made
    made.stop_all()


def _manifest(cluster: Cluster, node_id: int) -> manifests.Manifest | None:
    return cluster.raft(node_id).config_log.tier.current()


def _objects(cluster: Cluster, node_id: int) -> int:
    manifest = _manifest(cluster, node_id)
    return len(manifest.objects) if manifest is not None else 0


def _settled(cluster: Cluster, node_id: int, end: int) -> bool:
    """The member's manifest reaches ``end`` and its local log starts where the tier ends."""
    manifest = _manifest(cluster, node_id)
    if manifest is None or manifest.end_offset is None or manifest.end_offset < end:
        return False
    store = cluster.nodes[node_id].broker.store
    return store.commitlog.min_offset() == manifest.end_offset


def _bodies(data: bytes) -> Iterator[bytes]:
    position = 0
    while position + layout.BLANK.size <= len(data):
        total, magic = layout.BLANK.unpack_from(data, position)
        if total <= 0 or magic == layout.MAGIC_BLANK:
            return
        message = records.decode(data, position)
        if message.topic == TOPIC:
            yield message.body
        position += total


def test_leader_crash_mid_offload_new_leader_resumes_followers_free_their_disks(
    cluster: TierCluster, bucket: buckets.S3Bucket, prefix: str
) -> None:
    cluster.start_all()
    leader = cluster.leader()
    store = cluster.nodes[leader].broker.store
    node = cluster.raft(leader)
    for body in BODIES:
        store.put_messages_nowait([records.Message(topic=TOPIC, body=body)])
    node.loop.call_soon_threadsafe(node.propose_local)
    written_end = store.commitlog.max_offset()
    cluster.wait_replicated(written_end)
    file_size = store.config.commitlog_file_size_bytes
    sealed_end = written_end // file_size * file_size
    assert sealed_end >= 6 * file_size

    cluster.wait(leader, lambda: _objects(cluster, leader) >= 2)
    cluster.kill(leader)
    new_leader = cluster.leader()
    assert new_leader != leader
    cluster.start(leader)  # back as a follower
    for node_id in cluster.nodes:
        cluster.wait(node_id, functools.partial(_settled, cluster, node_id, sealed_end), 90)

    for node_id in cluster.nodes:  # files sealed since go on being offloaded: stop there
        offloader = cluster.nodes[node_id].broker.offloader
        assert offloader is not None
        offloader.stop()  # after the offload in progress, if any, is recorded
    cluster.wait_replicated(cluster.last_offset(cluster.leader()))
    manifest = _manifest(cluster, new_leader)
    assert manifest is not None
    assert manifest.start_offset == 0
    for node_id in cluster.nodes:
        assert _manifest(cluster, node_id) == manifest, f"member {node_id} disagrees"
    keys = sorted(bucket.list_keys(prefix + "/commitlog/"))
    assert keys == [naming.commitlog_key(prefix, obj.base_offset) for obj in manifest.objects]
    assert manifest_copy.read_copy(bucket, prefix) == manifest, (
        "the new leader wrote the committed manifest to the bucket"
    )
    found: list[bytes] = []
    for obj in manifest.objects:
        data = bucket.get_range(naming.commitlog_key(prefix, obj.base_offset), 0, obj.size_bytes)
        assert hashlib.md5(data, usedforsecurity=False).hexdigest() == obj.md5_hex
        found.extend(_bodies(data))
    local = cluster.root / f"node{new_leader}" / "commitlog"
    for path in sorted(local.iterdir()):  # the local log past the tier's end
        if int(path.name) >= (manifest.end_offset or 0):
            found.extend(_bodies(path.read_bytes()))
    assert sorted(found) == sorted(BODIES), "every body exactly once in tier + local"
