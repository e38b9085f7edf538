"""A topic's tier retention (``gannet.tier.remote.retention.s``) is enforced where records are
read from the tier, against a real SeaweedFS bucket.

The store of ``stores.written`` (two files offloaded and deleted locally) is reopened with a
tier reader. With the attribute at 0 the topic's offloaded records answer as removed on every
read path (by offset, pull, bulk records) while its local records are served as before; with a
retention longer than their age they are served from the tier again; removing the attribute
restores the tier's own retention. The records stay in the bucket throughout.
"""

from __future__ import annotations

import dataclasses

from e2e.tier import seaweedfs
from e2e.tier.stores import TOPIC, Written, tier_offsets
from gannet.node.store.configs.topics import TIER_REMOTE_RETENTION_ATTRIBUTE
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.reading import GetStatus
from gannet.node.store.tier import buckets, naming, reading


def _set_retention(store: MessageStore, value: str | None) -> None:
    config = store.topic_configs.get(TOPIC)
    assert config is not None
    attributes = {
        k: v for k, v in config.attributes.items() if k != TIER_REMOTE_RETENTION_ATTRIBUTE
    }
    if value is not None:
        attributes[TIER_REMOTE_RETENTION_ATTRIBUTE] = value
    store.topic_configs.put(dataclasses.replace(config, attributes=attributes))


def _served(store: MessageStore, written: Written, offsets: list[int]) -> list[bool]:
    return [store.read_stored(o, len(written.raw[o])) == written.raw[o] for o in offsets]


def test_a_topic_tier_retention_of_zero_serves_nothing_from_the_tier(
    seaweed: seaweedfs.SeaweedS3, bucket: buckets.S3Bucket, written: Written
) -> None:
    config = seaweed.bucket_config(seaweedfs.BUCKET)
    tier = reading.reader_of(config, written.log, block_bytes=4096, cache_bytes_max=1 << 20)
    below = tier_offsets(written)
    local = sorted(o for o in written.raw if o not in set(below))
    first_queue_offset = written.by_queue[0].index(below[0])
    with MessageStore(written.config, tier=tier).open() as store:
        assert all(_served(store, written, below[:20]))

        _set_retention(store, "0")
        assert not any(_served(store, written, below))
        assert all(store.read_message(o) is None for o in below[:20])
        pulled = store.get_messages(TOPIC, 0, first_queue_offset, 8)
        assert pulled.status is GetStatus.MESSAGE_WAS_REMOVING
        assert pulled.messages == []
        bulk = store.get_records(TOPIC, 0, first_queue_offset, 8, 1 << 20)
        assert bulk.status is GetStatus.MESSAGE_WAS_REMOVING
        assert all(_served(store, written, local))  # local files serve the topic as before
        assert store.read_message(local[0]) is not None
        # The bytes stay in the bucket until the tier's own retention expires the object.
        assert bucket.head(naming.commitlog_key(written.log.current().prefix, 0)) is not None

        _set_retention(store, "86400")  # longer than the records' age: served again
        assert all(_served(store, written, below))
        pulled = store.get_messages(TOPIC, 0, first_queue_offset, 8)
        assert pulled.status is GetStatus.FOUND
        assert [m.commit_offset for m in pulled.messages] == written.by_queue[0][
            first_queue_offset : first_queue_offset + 8
        ]

        _set_retention(store, "0")
        _set_retention(store, None)  # removed: the tier's own retention only
        assert all(_served(store, written, below[:20]))
