"""Rows of the ``gannet`` data source: the read schema, pulled v2 messages turned into Arrow
record batches, and written rows turned into v2 messages.

Read schema (:data:`READ_SCHEMA`)::

    topic string, queue_id int, queue_offset bigint, message_id string,
    keys array<string>, tag string, properties map<string,string>, body binary,
    born_timestamp timestamp, store_timestamp timestamp, broker string

``broker`` is the broker group the message is stored in (RocketMQ's ``brokerName``, e.g.
``broker-0``): queue ids and offsets are per group, so ``(broker, queue_id, queue_offset)``
names a message. ``properties`` are the user properties (system properties such as
``KEYS``/``TAGS`` are in their own columns). Timestamps have millisecond precision (the
store's).

Readers hand Spark ``pyarrow.RecordBatch`` es (:func:`records_batch` from the stored records
of an Admin PullRecords reply, :func:`messages_batch` from v2 messages; schema
:data:`READ_ARROW_SCHEMA`, which is what Spark's ``to_arrow_schema`` makes of
:data:`READ_SCHEMA` with time zone UTC: Spark 4 refuses a batch whose schema differs), so the
rows cross into the JVM column by column instead of as one Python tuple each.

Written columns (:data:`WRITE_COLUMNS`, handed over by Spark as Arrow record batches):
``body`` (binary or string, required, non-empty); optional ``keys`` (array<string> or one
string), ``tag`` (string), ``properties`` (map<string,string>), ``message_group`` (string: a
FIFO message), ``delivery_time`` (timestamp, or bigint epoch ms: a delayed message). The
read-only columns of the read schema may be present (so a read DataFrame can be written to
another topic) and are ignored; any
other column is refused. Nulls mean "not set".

Pure; used by :mod:`reading` and :mod:`writing`.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2

from gannet.node.store import properties as props
from gannet.node.store import validation
from gannet.pipeline import propcolumns
from gannet.pipeline.columns import Chunk

READ_SCHEMA = (
    "topic string, queue_id int, queue_offset bigint, message_id string, "
    "keys array<string>, tag string, properties map<string,string>, body binary, "
    "born_timestamp timestamp, store_timestamp timestamp, broker string"
)
READ_ONLY_COLUMNS = frozenset(
    {
        "topic",
        "queue_id",
        "queue_offset",
        "message_id",
        "born_timestamp",
        "store_timestamp",
        "broker",
    }
)
WRITE_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "body": ("binary", "string"),
    "keys": ("array<string>", "string"),
    "tag": ("string",),
    "properties": ("map<string,string>",),
    "message_group": ("string",),
    "delivery_time": ("timestamp", "timestamp_ntz", "bigint"),
}

READ_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("message_id", pa.string()),
        pa.field("keys", pa.list_(pa.string())),
        pa.field("tag", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("body", pa.binary()),
        pa.field("born_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("store_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("broker", pa.string()),
    ]
)
"""The Arrow form of :data:`READ_SCHEMA` (all fields nullable, as Spark makes them)."""

_NANOS_PER_MICRO = 1_000
_MICROS_PER_MILLI = 1_000


def _micros(ts: Timestamp) -> int:
    return int(ts.seconds) * 1_000_000 + int(ts.nanos) // _NANOS_PER_MICRO


def messages_batch(messages: Sequence[definition_pb2.Message], broker: str = "") -> pa.RecordBatch:
    """The read rows of ``messages`` (read from broker group ``broker``) as one record batch of
    :data:`READ_ARROW_SCHEMA`."""
    sps = [m.system_properties for m in messages]
    columns = [
        pa.array([m.topic.name for m in messages], pa.string()),
        pa.array([sp.queue_id for sp in sps], pa.int32()),
        pa.array([sp.queue_offset for sp in sps], pa.int64()),
        pa.array([sp.message_id for sp in sps], pa.string()),
        pa.array([list(sp.keys) for sp in sps], pa.list_(pa.string())),
        pa.array([sp.tag if sp.HasField("tag") else None for sp in sps], pa.string()),
        pa.array(
            [list(m.user_properties.items()) for m in messages], pa.map_(pa.string(), pa.string())
        ),
        pa.array([m.body for m in messages], pa.binary()),
        pa.array([_micros(sp.born_timestamp) for sp in sps], pa.timestamp("us", tz="UTC")),
        pa.array([_micros(sp.store_timestamp) for sp in sps], pa.timestamp("us", tz="UTC")),
        pa.array([broker] * len(messages), pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=READ_ARROW_SCHEMA)


_HIDDEN_PROPERTIES = validation.RESERVED_PROPERTY_KEYS | {
    "TRACE_CONTEXT",  # gannet.node.api.sending.TRACE_CONTEXT (not imported: the broker's API)
    props.LITE_TOPIC,
    props.PRIORITY,
}
"""System properties, not user ones: what ReceiveMessage leaves out of ``user_properties``."""


def records_batch(buf: bytes, chunk: Chunk, broker: str = "") -> pa.RecordBatch:
    """The read rows of the records of ``chunk`` (parsed from ``buf``, an Admin PullRecords
    reply of broker group ``broker``) as one record batch of :data:`READ_ARROW_SCHEMA`, built
    column-wise (properties with Arrow compute, :mod:`gannet.pipeline.propcolumns`); only a
    record without ``UNIQ_KEY`` gets its id made on its own. Rows mean what
    :func:`messages_batch` makes of the same messages read with v2 PullMessage."""
    found = chunk.property_columns
    ids = chunk.message_ids(buf)
    micros = _MICROS_PER_MILLI
    columns = [
        chunk.topic_column,
        pa.array(chunk.queue_ids, pa.int32()),
        pa.array(chunk.queue_offsets, pa.int64()),
        ids,
        propcolumns.keys_lists(found.value(props.KEYS)),
        found.value(props.TAGS),
        found.maps(_HIDDEN_PROPERTIES, props.TRANSIENT_PREFIX),
        chunk.bodies,
        pa.array(chunk.born_timestamps_ms * micros, pa.timestamp("us", tz="UTC")),
        pa.array(chunk.store_timestamps_ms * micros, pa.timestamp("us", tz="UTC")),
        pa.array([broker] * len(chunk), pa.string()) if broker else _empty_strings(len(chunk)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=READ_ARROW_SCHEMA)


def _empty_strings(rows: int) -> pa.StringArray:
    offsets = pa.py_buffer(bytes(4 * (rows + 1)))
    return pa.StringArray.from_buffers(rows, offsets, pa.py_buffer(b""))


def check_write_schema(fields: Sequence[tuple[str, str]]) -> None:
    """``fields`` are (name, simpleString type); ValueError naming what is wrong."""
    names = [name for name, _ in fields]
    if "body" not in names:
        raise ValueError(
            f"df.write.format('gannet') needs a 'body' column (binary or string); columns: "
            f"{', '.join(names)}"
        )
    for name, kind in fields:
        if name in READ_ONLY_COLUMNS:
            continue
        allowed = WRITE_COLUMNS.get(name)
        if allowed is None:
            raise ValueError(
                f"column {name!r} cannot be written; allowed: {', '.join(WRITE_COLUMNS)} "
                f"(and the read-only {', '.join(sorted(READ_ONLY_COLUMNS))}, which are ignored)"
            )
        if kind not in allowed:
            raise ValueError(f"column {name!r} is {kind}; it must be {' or '.join(allowed)}")


class MessageIds:
    """RocketMQ 5 message ids (v1: ``01`` + MAC(6 B) + pid(2 B) + seconds since 2021-01-01
    UTC (4 B) + a counter (4 B), upper-case hex), as the official clients make them."""

    EPOCH_S = 1_609_459_200  # 2021-01-01T00:00:00Z

    def __init__(self) -> None:
        fixed = uuid.getnode().to_bytes(6, "big") + (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._prefix = "01" + fixed.hex().upper()
        self._counter = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            self._counter = (self._counter + 1) & 0xFFFFFFFF
            counter = self._counter
        seconds = (int(time.time()) - self.EPOCH_S) & 0xFFFFFFFF
        return self._prefix + f"{seconds:08X}{counter:08X}"


def _epoch_ms(value: object, what: str) -> int:
    if isinstance(value, dt.datetime):  # naive ones are local times, as Spark hands them
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{what} must be a timestamp or epoch milliseconds, not {value!r}")


def row_message(
    row: Mapping[str, Any], topic: str, message_id: str, now_ms: int
) -> definition_pb2.Message:
    """A v2 message of one written row; ValueError naming the bad field."""
    body = row.get("body")
    if isinstance(body, str):
        body = body.encode()
    if not isinstance(body, bytes | bytearray) or not body:
        raise ValueError(f"body must be non-empty bytes or string, not {body!r:.60}")
    sp = definition_pb2.SystemProperties(
        message_id=message_id,
        body_encoding=definition_pb2.IDENTITY,
        message_type=definition_pb2.NORMAL,
        born_timestamp=Timestamp(seconds=now_ms // 1000, nanos=(now_ms % 1000) * 1_000_000),
    )
    keys = row.get("keys")
    if isinstance(keys, str):
        keys = [keys]
    if keys:
        sp.keys.extend(str(k) for k in keys if k is not None)
    tag = row.get("tag")
    if tag is not None:
        sp.tag = str(tag)
    group = row.get("message_group")
    if group is not None:
        sp.message_group = str(group)
        sp.message_type = definition_pb2.FIFO
    delivery = row.get("delivery_time")
    if delivery is not None:
        ms = _epoch_ms(delivery, "delivery_time")
        sp.delivery_timestamp.CopyFrom(Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000))
        sp.message_type = definition_pb2.DELAY
    properties = row.get("properties") or {}
    pairs = properties.items() if isinstance(properties, Mapping) else properties  # Arrow: pairs
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic),
        user_properties={str(k): str(v) for k, v in pairs if v is not None},
        system_properties=sp,
        body=bytes(body),
    )
