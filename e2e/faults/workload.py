"""The workload: official Python clients (rocketmq-python-client) against every member.

* :class:`Sender`: a ``Producer`` given every member's endpoint, sending one message at a time
  at a paced rate; each message has its key as key and body. A send that raised is ``info``
  (it may have been stored) and is retried with the same key up to ``RETRIES`` times, each
  retry a new operation. FIFO senders give each message a message group and go on to the next
  message of a group only once the previous one was answered or given up.
* :class:`Popper`: a ``SimpleConsumer`` receiving up to 16 messages; it changes the invisible
  duration of some (drawn from the seed) before acking each.

Every operation goes into the :class:`~e2e.faults.history.History`.
"""

from __future__ import annotations

import contextlib
import random
import threading

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from e2e.faults.history import History

RETRIES = 2
REQUEST_TIMEOUT_S = 3
INVISIBLE_S = 10
CHANGED_INVISIBLE_S = 12
CHANGE_SHARE = 0.2
AWAIT_S = 5  # the broker long-polls at least 5 s


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
            got = [(bytes(m.body).decode(errors="replace"), str(m.message_id)) for m in messages]
            self.history.add(self.process, "ok", "receive",
                             messages=[{"key": k, "id": i} for k, i in got])  # fmt: skip
            for message, (key, message_id) in zip(messages, got, strict=True):
                if self.rng.random() < CHANGE_SHARE:
                    self._op("change", key, message_id, self.consumer.change_invisible_duration,
                             message, CHANGED_INVISIBLE_S)  # fmt: skip
                self._op("ack", key, message_id, self.consumer.ack, message)

    def _op(self, f: str, key: str, message_id: str, call: object, *args: object) -> None:
        assert callable(call)
        self.history.add(self.process, "invoke", f, key=key, id=message_id)
        try:
            call(*args)
        except Exception as exc:  # an ack whose answer was lost may have taken effect
            self.history.add(self.process, "info", f, key=key, id=message_id, error=_name(exc))
            return
        self.history.add(self.process, "ok", f, key=key, id=message_id)

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        threading.Thread(target=_quietly, args=(self.consumer.shutdown,), daemon=True).start()


def _name(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:160]


def _quietly(call: object) -> None:
    assert callable(call)
    with contextlib.suppress(Exception):
        call()
