"""The workload: official Python clients (rocketmq-python-client) against every member.

* :class:`Sender`: a ``Producer`` given every member's endpoint, sending one message at a time
  at a paced rate; each message has its key as key and body. A send that raised is ``info``
  (it may have been stored) and is retried with the same key up to ``RETRIES`` times, each
  retry a new operation. FIFO senders give each message a message group and go on to the next
  message of a group only once the previous one was answered or given up.
* :class:`Popper`: a ``SimpleConsumer`` receiving up to 16 messages; it changes the invisible
  duration of some (drawn from the seed) before acking each.
* :class:`TxSender`: transactions through a ``Producer`` with a ``TransactionChecker``: per key a
  half message (``half``), then ``commit`` or ``rollback`` as drawn from the seed
  (``COMMIT_SHARE``). The outcome is decided before the half message is sent and the checker
  answers the broker's checks with it, so a transaction whose end was lost (``info``) still ends
  as decided. Nothing is retried: a new transaction is a new key.

Every operation goes into the :class:`~e2e.faults.history.History`.
"""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

from e2e.faults.history import History

RETRIES = 2
REQUEST_TIMEOUT_S = 3
INVISIBLE_S = 10
CHANGED_INVISIBLE_S = 12
CHANGE_SHARE = 0.2
AWAIT_S = 5  # the broker long-polls at least 5 s
COMMIT_SHARE = 0.7
DECISIONS_MAX = 100_000


class Sender(threading.Thread):
    def __init__(
        self, endpoints: str, topic: str, name: str, history: History, rate_per_s: float,
        groups: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(name=f"sender-{name}", daemon=True)
        self.endpoints = endpoints
        self.topic = topic
        self.process = name
        self.history = history
        self.interval_s = 1.0 / rate_per_s
        self.groups = groups
        """0: normal messages; n: FIFO messages in message groups g0..g(n-1)."""
        self.done = threading.Event()
        self.producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=REQUEST_TIMEOUT_S),
            (topic,),
        )

    def startup(self) -> None:
        self.producer.startup()
        self.start()

    def run(self) -> None:
        number = 0
        next_at = self.history.now()
        while not self.done.is_set():
            number += 1
            key = f"{self.process}-{number}"
            group = f"g{number % self.groups}" if self.groups else ""
            for _ in range(1 + RETRIES):
                if self._send(key, group) or self.done.is_set():
                    break
            next_at += self.interval_s
            self.done.wait(max(0.0, next_at - self.history.now()))
            next_at = max(next_at, self.history.now() - self.interval_s)

    def _send(self, key: str, group: str) -> bool:
        message = Message()
        message.topic = self.topic
        message.body = key.encode()
        message.keys = key
        if group:
            message.message_group = group
        self.history.add(self.process, "invoke", "send", key=key, group=group)
        try:
            receipt = self.producer.send(message)
        except Exception as exc:  # unknown outcome: it may have been stored
            self.history.add(self.process, "info", "send", key=key, error=_name(exc))
            return False
        # the broker picks the queue (the receipt's is the client's choice): the checker finds
        # it in the store by message id
        self.history.add(self.process, "ok", "send", key=key, group=group,
                         id=str(receipt.message_id), offset=int(receipt.offset))  # fmt: skip
        return True

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        threading.Thread(target=_quietly, args=(self.producer.shutdown,), daemon=True).start()


class Popper(threading.Thread):
    def __init__(
        self, endpoints: str, topic: str, group: str, name: str, history: History, seed: int
    ) -> None:
        super().__init__(name=f"popper-{name}", daemon=True)
        self.process = name
        self.history = history
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.consumer = SimpleConsumer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=REQUEST_TIMEOUT_S),
            group,
            {topic: FilterExpression("*")},
            await_duration=AWAIT_S,
        )

    def startup(self) -> None:
        self.consumer.startup()
        self.start()

    def run(self) -> None:
        while not self.done.is_set():
            self.history.add(self.process, "invoke", "receive")
            try:
                messages = self.consumer.receive(16, INVISIBLE_S)
            except Exception as exc:
                self.history.add(self.process, "fail", "receive", error=_name(exc))
                self.done.wait(0.2)
                continue
            got = [(bytes(m.body).decode(errors="replace"), str(m.message_id),
                    stored_copy(str(m.receipt_handle))) for m in messages]  # fmt: skip
            delivered = [{"key": k, "id": i, "copy": c, "attempt": int(m.delivery_attempt or 0)}
                         for (k, i, c), m in zip(got, messages, strict=True)]  # fmt: skip
            self.history.add(self.process, "ok", "receive", messages=delivered)
            for message, (key, message_id, copy) in zip(messages, got, strict=True):
                if self.rng.random() < CHANGE_SHARE:
                    self._op("change", key, message_id, copy,
                             self.consumer.change_invisible_duration, message,
                             CHANGED_INVISIBLE_S)  # fmt: skip
                self._op("ack", key, message_id, copy, self.consumer.ack, message)

    def _op(self, f: str, key: str, message_id: str, copy: str, call: object,
            *args: object) -> None:  # fmt: skip
        assert callable(call)
        self.history.add(self.process, "invoke", f, key=key, id=message_id, copy=copy)
        try:
            call(*args)
        except Exception as exc:  # an ack whose answer was lost may have taken effect
            self.history.add(self.process, "info", f, key=key, id=message_id, copy=copy,
                             error=_name(exc))  # fmt: skip
            return
        self.history.add(self.process, "ok", f, key=key, id=message_id, copy=copy)

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        threading.Thread(target=_quietly, args=(self.consumer.shutdown,), daemon=True).start()


def stored_copy(receipt_handle: str) -> str:
    """Which stored copy of a message a delivery is: the topic flag (normal or retry), queue and
    queue offset of its receipt handle (docs/formats/pop.md). A revive writes a new copy of the
    message (same id) to the retry topic; acks act on one copy."""
    fields = receipt_handle.split(" ")
    if len(fields) < 8:
        return receipt_handle
    return f"{fields[4]}/{fields[6]}/{fields[7]}"


class _Decisions(TransactionChecker):  # type: ignore[misc]
    """Answers the broker's check of an open transaction with the outcome decided for its key
    (unknown keys: left open, as a producer that does not know would)."""

    def __init__(self, process: str, history: History) -> None:
        self.process = process
        self.history = history
        self.commit: dict[str, bool] = {}

    def check(self, message: Any) -> Any:
        key = bytes(message.body).decode(errors="replace")
        decided = self.commit.get(key)
        self.history.add(self.process, "info", "check", key=key, commit=decided)
        if decided is None:
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        return TransactionResolution.COMMIT if decided else TransactionResolution.ROLLBACK


class TxSender(threading.Thread):
    def __init__(
        self, endpoints: str, topic: str, name: str, history: History, rate_per_s: float,
        seed: int,
    ) -> None:  # fmt: skip
        super().__init__(name=f"tx-{name}", daemon=True)
        self.topic = topic
        self.process = name
        self.history = history
        self.interval_s = 1.0 / rate_per_s
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.decisions = _Decisions(name, history)
        self.producer = Producer(
            ClientConfiguration(endpoints, Credentials(), request_timeout=REQUEST_TIMEOUT_S),
            (topic,),
            self.decisions,
        )

    def startup(self) -> None:
        self.producer.startup()
        self.start()

    def run(self) -> None:
        number = 0
        next_at = self.history.now()
        while not self.done.is_set() and number < DECISIONS_MAX:
            number += 1
            key = f"{self.process}-{number}"
            commit = self.rng.random() < COMMIT_SHARE
            self.decisions.commit[key] = commit
            self._transaction(key, commit)
            next_at += self.interval_s
            self.done.wait(max(0.0, next_at - self.history.now()))
            next_at = max(next_at, self.history.now() - self.interval_s)

    def _transaction(self, key: str, commit: bool) -> None:
        message = Message()
        message.topic = self.topic
        message.body = key.encode()
        message.keys = key
        self.history.add(self.process, "invoke", "half", key=key, commit=commit)
        try:
            transaction = self.producer.begin_transaction()
            receipt = self.producer.send(message, transaction)
        except Exception as exc:  # unknown: a half message may be stored; checks resolve it
            self.history.add(self.process, "info", "half", key=key, error=_name(exc))
            return
        self.history.add(self.process, "ok", "half", key=key, id=str(receipt.message_id))
        f = "commit" if commit else "rollback"
        self.history.add(self.process, "invoke", f, key=key)
        try:
            transaction.commit() if commit else transaction.rollback()
        except Exception as exc:  # unknown: the broker's check asks the checker above
            self.history.add(self.process, "info", f, key=key, error=_name(exc))
            return
        self.history.add(self.process, "ok", f, key=key)

    def stop(self) -> None:
        self.done.set()
        self.join(30)

    def shutdown(self) -> None:
        """After the drain: the checker must answer checks until then."""
        threading.Thread(target=_quietly, args=(self.producer.shutdown,), daemon=True).start()


def _name(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:160]


def _quietly(call: object) -> None:
    assert callable(call)
    with contextlib.suppress(Exception):
        call()
