"""Orderly-pop state per queue (RocketMQ ``ConsumerOrderInfoManager``, ``docs/formats/pop.md`` §7)
and its file ``<root>/config/consumerOrderInfo.json`` (``docs/formats/configs.md`` §6).

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

Pure data and codec plus a small manager (thread-safe, file written on :meth:`persist`).
Called by :mod:`ordering`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from gannet.node.store.configs import fastjson
from gannet.node.store.configs.fastjson import DataVersion, JsonObject, JsonValue

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


class OrderInfoManager:
    def __init__(self, config_dir: Path) -> None:
        self._file = fastjson.ConfigFile(config_dir / ORDER_INFO_FILE_NAME)
        self.lock = threading.RLock()
        self._table: dict[str, dict[int, OrderInfo]] = {}
        self._version = DataVersion()
        self._dirty = False

    def load(self) -> None:
        loaded = self._file.read()
        if loaded is None:
            return
        table = loaded.document.get("table")
        with self.lock:
            self._table = {}
            if isinstance(table, dict):
                for key, queues in table.items():
                    if not isinstance(queues, dict):
                        continue
                    infos = {
                        int(q): info
                        for q, raw in queues.items()
                        if q.isdigit() and (info := OrderInfo.from_json(raw)) is not None
                    }
                    if infos:
                        self._table[key] = infos
            self._version = DataVersion.from_json(loaded.document.get("dataVersion"))

    def get(self, key: str, queue_id: int) -> OrderInfo | None:
        with self.lock:
            return self._table.get(key, {}).get(queue_id)

    def put(self, key: str, queue_id: int, info: OrderInfo) -> None:
        with self.lock:
            self._table.setdefault(key, {})[queue_id] = info
            self._dirty = True

    def remove(self, key: str, queue_id: int) -> None:
        with self.lock:
            queues = self._table.get(key)
            if queues is not None and queues.pop(queue_id, None) is not None:
                self._dirty = True
                if not queues:
                    del self._table[key]

    def sweep(self, now_ms: int, idle_ms_max: int) -> int:
        with self.lock:
            doomed = [
                (k, q)
                for k, queues in self._table.items()
                for q, info in queues.items()
                if now_ms - info.last_consume_ms > idle_ms_max
            ]
        for k, q in doomed:
            self.remove(k, q)
        return len(doomed)

    def persist(self, now_ms: int) -> bool:
        with self._file.write_lock:
            with self.lock:
                if not self._dirty:
                    return False
                self._version = self._version.next(now_ms)
                doc: JsonObject = {
                    "dataVersion": self._version.to_json(),
                    "table": {
                        k: {str(q): info.to_json() for q, info in queues.items()}
                        for k, queues in self._table.items()
                    },
                }
                self._dirty = False
            self._file.write(doc)
            return True
