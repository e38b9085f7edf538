"""Orderly-pop state per queue (RocketMQ ``ConsumerOrderInfoManager``, ``docs/formats/pop.md`` §7)
and its file ``<root>/config/consumerOrderInfo.json`` (``docs/formats/configs.md`` §6).

A config table of the store (:class:`~gannet.node.store.configs.tables.ConfigTable`), so in a
Raft group every change goes through the log as the consumer offsets do
(:mod:`gannet.node.replication.config_log`: ops ``order.put`` and ``order.remove``, and the
``orders`` of a new leader's snapshot): a FIFO batch's lease and its acks are known to every
member, and a new leader neither hands out a message of a queue whose lease is live nor an
acked one again.

Table ``"topic@group"`` → queue id → :class:`OrderInfo` of the last pop of that queue. JSON
(strict, keys sorted; RocketMQ's names)::

    {"dataVersion":{...},
     "table":{"Orders@GID":{"0":{"a":"attempt-1","cm":1,"i":30000,"l":1700000000000,
                                  "o":[100,1,2],"oc":{"101":1},"ot":{"102":1700000040000},
                                  "popTime":1700000000000}}}}

``popTime`` and ``i`` (invisible time) of the pop; ``o`` its offsets (first absolute, the rest
deltas from the first); ``ot`` offset → next visible time when changed from the default
``popTime + i``; ``oc`` offset → times consumed before this pop (absent = 0); ``l`` last
consume time; ``cm`` commit bitset (bit i = offset i acked); ``a`` attempt id.

Pure data and codec plus the table (thread-safe; the store writes the file with the consumer
offsets, every second when changed and at close). Called by :mod:`gannet.node.pop.ordering` and
the replication apply path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gannet.node.store.configs.fastjson import JsonObject, JsonValue
from gannet.node.store.configs.tables import ConfigTable, now_ms

ORDER_INFO_FILE_NAME = "consumerOrderInfo.json"


@dataclass(frozen=True, slots=True)
class OrderInfo:
    pop_time_ms: int
    invisible_time_ms: int
    offsets: tuple[int, ...]
    next_visible_ms: dict[int, int] = field(default_factory=dict, hash=False)
    consumed_counts: dict[int, int] = field(default_factory=dict, hash=False)
    last_consume_ms: int = 0
    commit_bits: int = 0
    attempt_id: str | None = None

    def visible_at(self, offset: int) -> int:
        return self.next_visible_ms.get(offset, self.pop_time_ms + self.invisible_time_ms)

    def is_blocked(self, now_ms: int, attempt_id: str | None) -> bool:
        """True while an un-acked offset of this pop is still invisible."""
        if attempt_id is not None and attempt_id == self.attempt_id:
            return False
        return any(
            not self.commit_bits >> i & 1 and self.visible_at(o) > now_ms
            for i, o in enumerate(self.offsets)
        )

    def count_of(self, offset: int) -> int:
        return self.consumed_counts.get(offset, 0)

    def acked(self, index: int) -> OrderInfo:
        assert 0 <= index < len(self.offsets), (
            f"ack of message {index} of an orderly pop of {len(self.offsets)}"
        )
        return replace(self, commit_bits=self.commit_bits | 1 << index)

    def next_offset(self) -> int:
        """First un-acked offset, or the last + 1 when all are acked."""
        for i, o in enumerate(self.offsets):
            if not self.commit_bits >> i & 1:
                return o
        return self.offsets[-1] + 1

    def to_json(self) -> JsonObject:
        first = self.offsets[0]
        doc: JsonObject = {
            "popTime": self.pop_time_ms,
            "i": self.invisible_time_ms,
            "o": [first, *(o - first for o in self.offsets[1:])],
            "ot": {str(k): v for k, v in self.next_visible_ms.items()},
            "oc": {str(k): v for k, v in self.consumed_counts.items()},
            "l": self.last_consume_ms,
            "cm": self.commit_bits,
        }
        if self.attempt_id is not None:
            doc["a"] = self.attempt_id
        return doc

    @classmethod
    def from_json(cls, value: JsonValue) -> OrderInfo | None:
        if not isinstance(value, dict):
            return None
        raw = value.get("o")
        if not isinstance(raw, list) or not raw or not all(isinstance(x, int) for x in raw):
            return None
        ints = [x for x in raw if isinstance(x, int)]
        first = ints[0]
        attempt = value.get("a")
        return cls(
            pop_time_ms=_int(value.get("popTime")),
            invisible_time_ms=_int(value.get("i")),
            offsets=(first, *(first + d for d in ints[1:])),
            next_visible_ms=_int_map(value.get("ot")),
            consumed_counts=_int_map(value.get("oc")),
            last_consume_ms=_int(value.get("l")),
            commit_bits=_int(value.get("cm")),
            attempt_id=attempt if isinstance(attempt, str) else None,
        )


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _int_map(value: JsonValue) -> dict[int, int]:
    if not isinstance(value, dict):
        return {}
    return {int(k): _int(v) for k, v in value.items() if k.lstrip("-").isdigit()}


class OrderInfoManager(ConfigTable):
    """Table ``"topic@group"`` → queue id → :class:`OrderInfo`.

    :attr:`lock` (re-entrant) is the orderly service's lock over a read-decide-write of one
    queue; the table's own lock guards each get / put / remove and orders their journal records.
    """

    def __init__(self, config_dir: Path, clock_ms: Callable[[], int] = now_ms) -> None:
        super().__init__(config_dir / ORDER_INFO_FILE_NAME, clock_ms)
        self.lock = threading.RLock()
        self._table: dict[str, dict[int, OrderInfo]] = {}

    def _parse(self, document: JsonObject, source: Path) -> Callable[[], None]:
        table = parse_table(document.get("table"))

        def install() -> None:
            self._table = table

        return install

    def _document(self) -> JsonObject:
        return {"dataVersion": self._data_version.to_json(), "table": self._table_json()}

    def _table_json(self) -> JsonObject:
        return {
            k: {str(q): info.to_json() for q, info in queues.items()}
            for k, queues in self._table.items()
        }

    def get(self, key: str, queue_id: int) -> OrderInfo | None:
        with self._lock:
            return self._table.get(key, {}).get(queue_id)

    def put(self, key: str, queue_id: int, info: OrderInfo) -> None:
        with self._lock:
            self._table.setdefault(key, {})[queue_id] = info
            self._changed()
            self._journal(
                {"op": "order.put", "key": key, "queue": queue_id, "info": info.to_json()}
            )

    def remove(self, key: str, queue_id: int) -> None:
        with self._lock:
            queues = self._table.get(key)
            if queues is None or queues.pop(queue_id, None) is None:
                return
            if not queues:
                del self._table[key]
            self._changed()
            self._journal({"op": "order.remove", "key": key, "queue": queue_id})

    def table_json(self) -> JsonObject:
        """The whole table as the file's ``table`` (a replication snapshot's ``orders``)."""
        with self._lock:
            return self._table_json()

    def replace_table(self, value: JsonValue) -> None:
        """Install a replication snapshot's ``orders`` (the file's ``table`` form)."""
        table = parse_table(value)
        with self._lock:
            self._table = table
            self._changed()

    def sweep(self, now_ms: int, idle_ms_max: int) -> int:
        with self._lock:
            doomed = [
                (k, q)
                for k, queues in self._table.items()
                for q, info in queues.items()
                if now_ms - info.last_consume_ms > idle_ms_max
            ]
        for k, q in doomed:
            self.remove(k, q)
        return len(doomed)


def parse_table(value: JsonValue) -> dict[str, dict[int, OrderInfo]]:
    """The ``table`` of the file (entries that do not read are dropped, as RocketMQ does)."""
    table: dict[str, dict[int, OrderInfo]] = {}
    if not isinstance(value, dict):
        return table
    for key, queues in value.items():
        if not isinstance(queues, dict):
            continue
        infos = {
            int(q): info
            for q, raw in queues.items()
            if q.isdigit() and (info := OrderInfo.from_json(raw)) is not None
        }
        if infos:
            table[key] = infos
    return table
