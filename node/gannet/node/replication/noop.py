"""The leader's election record: a real commit-log record that lets its term commit.

Called by :mod:`driver` through ``raft.config.Config.noop_payload`` when the core becomes leader.
The record is an ordinary RocketMQ message (V1 layout) of the internal system topic
``rmq_sys_GANNET_RAFT_NOOP``, queue 0, body ``raft-noop term=<t> node=<id>``: RocketMQ tools and
the store's own recovery read it like any message, and clients never see it (system topics
are refused to clients and it has no topic config, so routes never name it). Its physical
offset, queue offset and store time are set for the offset where it will be written; when it
does not fit the current commit-log file, the payload starts with the BLANK record that closes
the file and the zeros after it, exactly the bytes an ordinary append leaves there.
"""

from __future__ import annotations

from gannet.node.store.log import layout, records
from gannet.node.store.log.commitlog import now_ms, queue_key
from gannet.node.store.message_store import MessageStore
from gannet.node.store.validation import SYSTEM_TOPIC_PREFIX

NOOP_TOPIC = SYSTEM_TOPIC_PREFIX + "GANNET_RAFT_NOOP"


def encode_noop(store: MessageStore, offset: int, term: int, node_id: int) -> bytes:
    """The bytes to write at ``offset`` (the commit log's end) for the no-op of ``term``."""
    config = store.config
    commitlog = store.commitlog
    ts = max(now_ms(), commitlog.last_store_timestamp_ms)
    message = records.Message(
        topic=NOOP_TOPIC,
        body=f"raft-noop term={term} node={node_id}".encode(),
        born_timestamp_ms=ts,
        born_host=(config.store_host, config.store_port),
        store_host=(config.store_host, config.store_port),
    )
    parts = records.split_record(
        message,
        body_size_max_bytes=config.message_body_size_max_bytes,
        append_crc=commitlog.append_crc,
    )
    file_size = config.commitlog_file_size_bytes
    room = file_size - offset % file_size
    prefix = b""
    position = offset
    if parts.total + layout.END_FILE_MIN_BLANK_LENGTH > room:
        prefix = records.blank_record(room) + bytes(room - layout.END_FILE_MIN_BLANK_LENGTH)
        position = offset + room
    queue_offset = commitlog.queue_offsets.get(queue_key(NOOP_TOPIC, 0), 0)
    record = bytearray().join(
        (records.pack_head(parts, queue_offset, position, ts), parts.body, parts.tail)
    )
    if commitlog.append_crc:
        records.seal_crc(record)
    return prefix + bytes(record)
