"""Message properties: the key names RocketMQ uses and the string encoding of the map.

Encoding (``MessageDecoder.messageProperties2String``): for every entry ``name \\x01 value
\\x02`` — every pair, the last included, ends with ``\\x02``; an empty map is the empty string.
Decoding (``string2messageProperties``): split on ``\\x02``; a segment is kept only when it is at
least 3 characters long and its first ``\\x01`` lies after position 0 and before the last
character, so empty keys and empty values are dropped silently. The encoded length must fit a
positive Java short (≤ 32,767 bytes), checked by the record encoder.

Pure functions; called by :mod:`records` and by the broker when it builds messages.
"""

from __future__ import annotations

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

KEYS = "KEYS"
TAGS = "TAGS"
WAIT_STORE_MSG_OK = "WAIT"
DELAY_TIME_LEVEL = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
UNIQ_KEY = "UNIQ_KEY"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
INNER_NUM = "INNER_NUM"
INNER_BASE = "INNER_BASE"
CLUSTER = "CLUSTER"
MESSAGE_TYPE = "MSG_TYPE"
POP_CK = "POP_CK"
POP_CK_OFFSET = "POP_CK_OFFSET"
FIRST_POP_TIME = "1ST_POP_TIME"
SHARDING_KEY = "__SHARDINGKEY"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
BORN_HOST = "__BORNHOST"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
CRC32 = "__CRC32#"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
TRANSIENT_PREFIX = "__RMQ.TRANSIENT."
LITE_TOPIC = "__LITE_TOPIC"
"""Gannet: the lite topic of a message of a LITE topic (v2 ``system_properties.lite_topic``)."""
PRIORITY = "__PRIORITY"
"""Gannet: the priority of a message of a PRIORITY topic (v2 ``system_properties.priority``)."""

KEY_SEPARATOR = " "
PROPERTIES_LENGTH_MAX_BYTES = 32_767


def encode(properties: dict[str, str]) -> str:
    """Serialize a property map; entries whose key is transient are not persisted."""
    if not properties:
        return ""
    return "".join(
        f"{name}\x01{value}\x02"
        for name, value in properties.items()
        if not name.startswith(TRANSIENT_PREFIX)
    )


def decode(text: str) -> dict[str, str]:
    """Parse a property string with RocketMQ's rules (empty keys/values are dropped)."""
    result: dict[str, str] = {}
    if not text:
        return result
    for segment in text.split(PROPERTY_SEPARATOR):
        if len(segment) < 3:
            continue
        sep = segment.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(segment) - 1:
            result[segment[:sep]] = segment[sep + 1 :]
    return result


def split_keys(keys: str | None) -> list[str]:
    """The tokens of a ``KEYS`` value (single-space separated), empty tokens dropped."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]
