"""Commit-log records packed for the append path, in one pass per message.

:func:`record_fields` computes what :func:`records.split_record` does (the same values, the same
errors) without intermediate objects, and :func:`pack_record_into` writes a whole record into a
buffer the caller sized for the batch — the bytes of :func:`records.pack_head` + body + tail
(+ :func:`records.seal_crc`). :mod:`records` keeps the reference encoder (tools, tests, the Raft
no-op); ``tests/store/test_records.py`` checks this one against it field by field and byte
by byte. Pure: no IO. Called by :mod:`commitlog`.
"""

from __future__ import annotations

import zlib

from gannet.node.store import properties as props
from gannet.node.store.log.layout import (
    CRC32_RESERVED_LENGTH,
    FIXED_FIELDS_LENGTH,
    FIXED_V4,
    HEAD,
    MAGIC_V1,
    MAGIC_V2,
    SHORT,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    middle_struct,
)
from gannet.node.store.log.records import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    Message,
    check_ranges,
    checked_body,
    crc_property_tail,
    encode_host,
    properties_field,
    topic_field_of,
)

RecordFields = tuple[int, int, int, int, int, int, int, bytes, bytes, int, int, bytes, bytes]
"""The fields of :class:`records.RecordParts` in the same order, as a plain tuple: what the
append path builds for each message (a named tuple costs a Python-level call to construct)."""


def record_fields(
    msg: Message, *, body_size_max_bytes: int, append_crc: bool = False
) -> RecordFields:
    """:func:`records.split_record` in one pass for the append path: the same values and errors, no
    intermediate objects (range checks inlined, properties joined in C, one CRC of the body).

    ``tests/store/test_records.py`` checks it against :func:`records.split_record` field by field,
    and ``tests/store/test_commitlog.py`` the appended bytes against :func:`records.encode`.
    """
    queue_id, flag, sys_flag = msg.queue_id, msg.flag, msg.sys_flag
    reconsume, born_ms, prepared = (
        msg.reconsume_times,
        msg.born_timestamp_ms,
        msg.prepared_transaction_offset,
    )
    if not (
        INT32_MIN <= queue_id <= INT32_MAX
        and INT32_MIN <= flag <= INT32_MAX
        and INT32_MIN <= sys_flag <= INT32_MAX
        and INT32_MIN <= reconsume <= INT32_MAX
        and INT64_MIN <= born_ms <= INT64_MAX
        and INT64_MIN <= prepared <= INT64_MAX
    ):
        check_ranges(msg)
    body = checked_body(msg, body_size_max_bytes)
    born = encode_host(*msg.born_host)
    store = encode_host(*msg.store_host)
    sys_flag &= ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if len(born) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    v2, topic_field = topic_field_of(msg.topic, False)
    properties = msg.properties
    prop_text = ""
    if properties:
        prop_text = "".join([f"{k}\x01{v}\x02" for k, v in properties.items()])
        if props.TRANSIENT_PREFIX in prop_text:
            prop_text = props.encode(properties)  # drops the transient keys
    prop_bytes = properties_field(prop_text, append_crc=append_crc)
    tail = topic_field + SHORT.pack(len(prop_bytes)) + prop_bytes
    return (
        FIXED_FIELDS_LENGTH + len(born) + len(store) + len(body) + len(tail),  # encoded_length
        MAGIC_V2 if v2 else MAGIC_V1,
        zlib.crc32(body) & 0x7FFFFFFF,
        queue_id,
        flag,
        sys_flag,
        born_ms,
        born,
        store,
        reconsume,
        prepared,
        body,
        tail,
    )


def pack_record_into(
    buf: bytearray,
    pos: int,
    fields: RecordFields,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    *,
    append_crc: bool = False,
) -> None:
    """Write the whole record of ``fields`` at ``buf[pos:]`` with its position-dependent
    fields (``buf`` pre-sized by the caller); with ``append_crc`` the reserved tail is sealed.
    The bytes are those of :func:`records.pack_head` + body + tail (+ :func:`records.seal_crc`)."""
    (total, magic, crc, queue_id, flag, sys_flag, born_ms, born, store, reconsume, prepared,
     body, tail) = fields  # fmt: skip
    if len(born) == 8 and len(store) == 8:
        FIXED_V4.pack_into(
            buf, pos, total, magic, crc, queue_id, flag, queue_offset, physical_offset,
            sys_flag, born_ms, born, store_timestamp_ms, store, reconsume, prepared, len(body),
        )  # fmt: skip
        at = pos + FIXED_V4.size
    else:
        HEAD.pack_into(
            buf, pos, total, magic, crc, queue_id, flag, queue_offset, physical_offset,
            sys_flag, born_ms,
        )  # fmt: skip
        middle = middle_struct(len(born), len(store))
        middle.pack_into(
            buf, pos + HEAD.size, born, store_timestamp_ms, store, reconsume, prepared,
            len(body),
        )  # fmt: skip
        at = pos + HEAD.size + middle.size
    end = at + len(body)
    buf[at:end] = body
    buf[end : end + len(tail)] = tail
    if append_crc:
        covered = total - CRC32_RESERVED_LENGTH
        sealed = zlib.crc32(buf[pos : pos + covered]) & 0x7FFFFFFF
        buf[pos + covered : pos + total] = crc_property_tail(sealed)
