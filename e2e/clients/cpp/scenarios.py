"""The official C++ RocketMQ client (rocketmq-client-cpp, through Apache's Python 4.x client
``rocketmq-client-python`` 0.5.0rc2, whose wheel bundles ``librocketmq.so``) against a Gannet
broker: every scenario named on the command line runs in this one process, and each prints one
JSON line ``{"scenario": ..., "ok": ..., "error": ..., ...what it saw}``.

Run with the client's own directory on ``PYTHONPATH`` (``tests/remoting/cpp_clients.py``
installs it): its top-level package is ``rocketmq``, the name of the 5.x gRPC client in Gannet's
virtualenv, so it never runs there. Uses the client unchanged: the wrapper's classes, and
``ctypes`` calls of the same library's C API for what the wrapper does not wrap (pull consumer,
batch send)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from rocketmq.client import (  # type: ignore[import-not-found]
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    RecvMessage,
    TransactionMQProducer,
    TransactionStatus,
)
from rocketmq.exceptions import RocketMQException  # type: ignore[import-not-found]
from rocketmq.ffi import _CMessageQueue, _CSendResult, dll  # type: ignore[import-not-found]

AWAIT_S = float(os.environ.get("CPP_AWAIT_S", "45"))
TEXT = "héllo, wörld {}"


class Inbox:
    """Messages a push consumer's callback saw, awaited by count (never slept for)."""

    def __init__(self, answer: Callable[[dict[str, Any]], int] | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._answer = answer

    def __call__(self, message: RecvMessage) -> int:
        seen = describe(message)
        with self._changed:
            self.messages.append(seen)
            self._changed.notify_all()
        return self._answer(seen) if self._answer else ConsumeStatus.CONSUME_SUCCESS

    def wait_count(self, count: int, timeout_s: float = AWAIT_S) -> list[dict[str, Any]]:
        with self._changed:
            self._changed.wait_for(lambda: len(self.messages) >= count, timeout_s)
            return list(self.messages)


def client_log(marker: str) -> list[str]:
    """The lines of the C++ client's own log (``$HOME/logs/rocketmq-cpp/``) that hold
    ``marker``, from the marker on."""
    found = []
    directory = os.path.join(os.path.expanduser("~"), "logs", "rocketmq-cpp")
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as log:
            found += [line[line.index(marker) :].strip() for line in log if marker in line]
    return found


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8")


def describe(m: RecvMessage) -> dict[str, Any]:
    return {
        "topic": m.topic,
        "tags": text(m.tags),
        "keys": text(m.keys),
        "body": m.body.decode("utf-8", "replace"),
        "body_bytes": len(m.body),
        "msg_id": m.id,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "reconsume_times": m.reconsume_times,
        "properties": {k: text(m.get_property(k)) for k in ("u-index", "u-text")},
        "retry_topic": text(m.get_property("RETRY_TOPIC")),
        "received_ms": int(time.time() * 1000),
    }


CONNECT_RACE = "No route info of this topic"
"""What the C++ client (2.0.0) throws when its first request on a new connection fails at once
under load, before anything reaches the broker (its log: ``send failed of times:1`` a few
hundred microseconds after ``try to connect``, the connect's success logged after it)."""


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.client_retries = 0
        """Sends retried after the client's connect race (:data:`CONNECT_RACE`)."""
        self.args = args
        self.namesrv: str = args.namesrv
        self.prefix: str = args.prefix

    def topic(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def credentials(self, client: Any) -> None:
        if self.args.access_key:
            client.set_session_credentials(self.args.access_key, self.args.secret_key, "")

    def once_more(self, call: Callable[[], Any]) -> Any:
        """``call()``, retried once 1 s after the client's connect race (as an application
        retries a failed send); other failures are raised."""
        for attempt in range(2):
            try:
                return call()
            except (RocketMQException, RuntimeError) as e:
                if attempt or (CONNECT_RACE not in str(e) and "failed (11)" not in str(e)):
                    raise
                self.client_retries += 1
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def producer(self, group: str, **options: Any) -> Producer:
        producer = Producer(self.topic(group), **options)
        producer.set_namesrv_addr(self.namesrv)
        self.credentials(producer)
        producer.start()
        return producer

    def consumer(
        self, group: str, topic: str, inbox: Inbox, expression: str = "*", orderly: bool = False
    ) -> PushConsumer:
        consumer = PushConsumer(self.topic(group), orderly=orderly)
        consumer.set_namesrv_addr(self.namesrv)
        self.credentials(consumer)
        consumer.set_thread_count(2)
        consumer.subscribe(topic, inbox, expression)
        consumer.start()
        return consumer


def message(topic: str, i: int, tag: str) -> Message:
    m = Message(topic)
    m.set_keys(f"key-{i} other-{i}")
    m.set_tags(tag)
    m.set_property("u-index", str(i))
    m.set_property("u-text", TEXT.format(i))
    m.set_body(f"{topic} body {i}")
    return m


def sent(result: Any) -> dict[str, Any]:
    return {"status": int(result.status), "msg_id": result.msg_id, "offset": result.offset}


# --- scenarios -------------------------------------------------------------------------------


def sync_send(run: Run) -> dict[str, Any]:
    """send_sync with keys, tags and properties; a push consumer of ``TagA || TagB`` gets the
    TagA and TagB messages once and no TagC one."""
    topic = run.topic("Sync")
    producer = run.producer("PSync")
    try:
        results = [
            sent(run.once_more(lambda i=i, t=tag: producer.send_sync(message(topic, i, t))))
            for i, tag in enumerate(["TagA"] * 4 + ["TagB"] * 2)
        ]
        for i in range(6, 8):
            run.once_more(lambda i=i: producer.send_sync(message(topic, i, "TagC")))
    finally:
        producer.shutdown()
    inbox = Inbox()
    consumer = run.consumer("GSync", topic, inbox, "TagA || TagB")
    try:
        received = inbox.wait_count(6)
        # a TagC message would have come with them: the queues hold it before or after
        extra = inbox.wait_count(7, timeout_s=1.0)[6:]
    finally:
        consumer.shutdown()
    return {"topic": topic, "sent": results, "received": received, "extra": extra}


def oneway(run: Run) -> dict[str, Any]:
    topic = run.topic("Oneway")
    producer = run.producer("POneway")
    try:
        for i in range(3):
            run.once_more(lambda i=i: producer.send_oneway(message(topic, i, "TagOneway")))
    finally:
        producer.shutdown()
    inbox = Inbox()
    consumer = run.consumer("GOneway", topic, inbox)
    try:
        received = inbox.wait_count(3)
    finally:
        consumer.shutdown()
    return {"topic": topic, "received": received}


def delay(run: Run) -> dict[str, Any]:
    topic = run.topic("Delay")
    level: int = run.args.delay_level
    inbox = Inbox()
    consumer = run.consumer("GDelay", topic, inbox)
    producer = run.producer("PDelay")
    try:
        m = message(topic, 0, "TagDelay")
        m.set_delay_time_level(level)
        sent_ms = int(time.time() * 1000)
        result = sent(run.once_more(lambda: producer.send_sync(m)))
        received = inbox.wait_count(1)
    finally:
        producer.shutdown()
        consumer.shutdown()
    return {
        "topic": topic,
        "level": level,
        "sent_ms": sent_ms,
        "sent": result,
        "received": received,
    }


def orderly(run: Run) -> dict[str, Any]:
    """send_orderly_with_sharding_key: a key's messages go to one queue, in order; an orderly
    push consumer (queue locks) gets them in that order."""
    topic = run.topic("Orderly")
    producer = run.producer("POrderly", orderly=True)
    results = []
    try:
        for i in range(12):
            key = f"order-{i % 3}"
            m = message(topic, i, "TagOrderly")
            m.set_property("u-order-key", key)
            result = sent(
                run.once_more(lambda m=m, key=key: producer.send_orderly_with_sharding_key(m, key))
            )
            results.append({"key": key, "i": i, **result})
    finally:
        producer.shutdown()
    inbox = Inbox()
    consumer = run.consumer("GOrderly", topic, inbox, orderly=True)
    try:
        received = inbox.wait_count(12)
    finally:
        consumer.shutdown()
    return {"topic": topic, "sent": results, "received": received}


def compressed(run: Run) -> dict[str, Any]:
    """A body over the client's compression threshold (4 KiB) is sent compressed (sysFlag bit
    0) and comes back whole."""
    topic = run.topic("Large")
    body = "".join(f"line {i:05d} of a large, compressible body\n" for i in range(2_000))
    producer = run.producer("PLarge")
    try:
        m = Message(topic)
        m.set_keys("large-0")
        m.set_tags("TagLarge")
        m.set_body(body)
        result = sent(run.once_more(lambda: producer.send_sync(m)))
    finally:
        producer.shutdown()
    inbox = Inbox()
    consumer = run.consumer("GLarge", topic, inbox)
    try:
        received = inbox.wait_count(1)
    finally:
        consumer.shutdown()
    for r in received:
        r["body_intact"] = r["body"] == body
        r["body"] = r["body"][:40]
    return {"topic": topic, "body_bytes": len(body), "sent": result, "received": received}


def oversize(run: Run) -> dict[str, Any]:
    """A message over the broker's 4 MiB limit (the client's own limit raised to let it go)."""
    topic = run.topic("Oversize")
    producer = run.producer("POversize", max_message_size=16 * 1024 * 1024)
    try:
        m = Message(topic)
        body = os.urandom(4 * 1024 * 1024 + 1024)  # random: compression does not shrink it
        dll.SetByteMessageBody(m, body, len(body))
        try:
            producer.send_sync(m)
        except RocketMQException as e:
            # the client retries and then reports its last failure ("No route info of this
            # topic"); the broker's answer is in its log
            remarks = client_log("processSendResponse error remark:")
            return {"topic": topic, "refused": True, "error_text": str(e), "remarks": remarks}
        return {"topic": topic, "refused": False, "error_text": "", "remarks": []}
    finally:
        producer.shutdown()


def retry(run: Run) -> dict[str, Any]:
    """RECONSUME_LATER: the message comes back through %RETRY% (CONSUMER_SEND_MSG_BACK);
    a group whose retryMaxTimes (1, set by the test) is used up sends it to %DLQ%."""
    topic = run.topic("Retry")
    producer = run.producer("PRetry")
    try:
        run.once_more(lambda: producer.send_sync(message(topic, 0, "TagRetry")))
    finally:
        producer.shutdown()

    def first_fails(seen: dict[str, Any]) -> int:
        if seen["reconsume_times"] == 0:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    retried = Inbox(first_fails)
    failing = Inbox(lambda seen: ConsumeStatus.RECONSUME_LATER)
    consumers = [
        run.consumer("GRetry", topic, retried),
        run.consumer("GDlq", topic, failing),
    ]
    try:
        # every message of GDlq fails: delivered twice (retryMaxTimes 1), then dead-lettered
        got = retried.wait_count(2, timeout_s=60.0)
        dead = failing.wait_count(2, timeout_s=60.0)
        later = failing.wait_count(3, timeout_s=1.0)[2:]
    finally:
        for c in consumers:
            c.shutdown()
    return {"topic": topic, "retried": got, "dlq_group_deliveries": dead, "after_dlq": later}


def restart(run: Run) -> dict[str, Any]:
    """Offsets committed: a consumer restarted in the same group gets only what came after."""
    topic = run.topic("Restart")
    producer = run.producer("PRestart")
    first = Inbox()
    try:
        for i in range(4):
            run.once_more(lambda i=i: producer.send_sync(message(topic, i, "TagRestart")))
        consumer = run.consumer("GRestart", topic, first)
        try:
            before = first.wait_count(4)
        finally:
            consumer.shutdown()  # persists the offsets to the broker
        # one new message per queue (the producer goes round the queues): a queue that kept an
        # old offset would deliver its old messages before the new one
        queues = run.args.queues
        for i in range(4, 4 + queues):
            run.once_more(lambda i=i: producer.send_sync(message(topic, i, "TagRestart")))
    finally:
        producer.shutdown()
    second = Inbox()
    consumer = run.consumer("GRestart", topic, second)
    try:
        after = second.wait_count(queues)
        extra = second.wait_count(queues + 1, timeout_s=1.0)[queues:]
    finally:
        consumer.shutdown()
    return {"topic": topic, "before": before, "after": after, "extra": extra}


def transaction(run: Run) -> dict[str, Any]:
    """TransactionMQProducer: commit, rollback, and an unknown one the broker checks back."""
    topic = run.topic("Tx")
    checked: list[dict[str, Any]] = []
    checked_event = threading.Event()

    def check(m: RecvMessage) -> int:
        checked.append({"keys": text(m.keys), "topic": m.topic})
        checked_event.set()
        return TransactionStatus.COMMIT

    outcome = {
        "tx-commit": TransactionStatus.COMMIT,
        "tx-rollback": TransactionStatus.ROLLBACK,
        "tx-check": TransactionStatus.UNKNOWN,
    }
    producer = TransactionMQProducer(run.topic("PTx"), check)
    producer.set_namesrv_addr(run.namesrv)
    run.credentials(producer)
    producer.start()
    results = {}
    try:
        for key, status in outcome.items():
            m = Message(topic)
            m.set_keys(key)
            m.set_tags("TagTx")
            m.set_body(f"body {key}")
            result = run.once_more(
                lambda m=m, status=status: producer.send_message_in_transaction(
                    m, lambda _m, _a, s=status: s
                )
            )
            results[key] = sent(result)
        checked_event.wait(AWAIT_S)
        inbox = Inbox()
        consumer = run.consumer("GTx", topic, inbox)
        try:
            received = inbox.wait_count(2)
            extra = inbox.wait_count(3, timeout_s=1.0)[2:]
        finally:
            consumer.shutdown()
    finally:
        producer.shutdown()
    return {
        "topic": topic,
        "sent": results,
        "checked": checked,
        "received": received,
        "extra": extra,
    }


class CPullResult(ctypes.Structure):
    _fields_ = [
        ("pullStatus", ctypes.c_int),
        ("nextBeginOffset", ctypes.c_longlong),
        ("minOffset", ctypes.c_longlong),
        ("maxOffset", ctypes.c_longlong),
        ("msgFoundList", ctypes.POINTER(ctypes.c_void_p)),
        ("size", ctypes.c_int),
        ("pData", ctypes.c_void_p),
    ]


PULL_FOUND = 0
PULL_NO_NEW_MSG = 1
PULL_NO_MATCHED_MSG = 2
PULL_WAIT_S = 30.0
"""How long the pull scenario keeps reading every queue for the messages it sent: on a loaded
machine a pull can time out (``E_BROKER_TIMEOUT``) or come before a sent message is readable;
one pass over the queues read nothing there once (``make test`` beside a fault batch)."""


def declare_pull_api() -> None:
    dll.CreatePullConsumer.argtypes = [ctypes.c_char_p]
    dll.CreatePullConsumer.restype = ctypes.c_void_p
    for name in ("StartPullConsumer", "ShutdownPullConsumer", "DestroyPullConsumer"):
        getattr(dll, name).argtypes = [ctypes.c_void_p]
        getattr(dll, name).restype = ctypes.c_int
    dll.SetPullConsumerNameServerAddress.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    dll.SetPullConsumerNameServerAddress.restype = ctypes.c_int
    dll.SetPullConsumerSessionCredentials.argtypes = [ctypes.c_void_p] + [ctypes.c_char_p] * 3
    dll.SetPullConsumerSessionCredentials.restype = ctypes.c_int
    dll.FetchSubscriptionMessageQueues.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.POINTER(_CMessageQueue)),
        ctypes.POINTER(ctypes.c_int),
    ]
    dll.FetchSubscriptionMessageQueues.restype = ctypes.c_int
    dll.ReleaseSubscriptionMessageQueue.argtypes = [ctypes.POINTER(_CMessageQueue)]
    dll.ReleaseSubscriptionMessageQueue.restype = ctypes.c_int
    dll.Pull.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(_CMessageQueue),
        ctypes.c_char_p,
        ctypes.c_longlong,
        ctypes.c_int,
    ]
    dll.Pull.restype = CPullResult
    dll.ReleasePullResult.argtypes = [CPullResult]
    dll.ReleasePullResult.restype = ctypes.c_int


def checked(status: int, what: str) -> None:
    if status != 0:
        error = dll.GetLatestErrorMessage()
        raise RuntimeError(f"{what} failed ({status}): {text(error)}")


def batch_and_pull(run: Run) -> dict[str, Any]:
    """The C API beyond the wrapper: SendBatchMessage (one queue, in order), then the pull
    consumer reading every queue from offset 0 (FetchSubscriptionMessageQueues, Pull)."""
    declare_pull_api()
    topic = run.topic("Batch")
    producer = run.producer("PBatch")
    try:
        batch = dll.CreateBatchMessage()
        messages = [message(topic, i, "TagBatch") for i in range(5)]
        for m in messages:
            checked(dll.AddMessage(batch, m), "AddMessage")
        result = _CSendResult()
        run.once_more(
            lambda: checked(
                dll.SendBatchMessage(producer._handle, batch, ctypes.byref(result)), "SendBatch"
            )
        )
        dll.DestroyBatchMessage(batch)
        batch_sent = {"status": result.sendStatus, "msg_id": text(result.msgId)}
    finally:
        producer.shutdown()
    consumer = dll.CreatePullConsumer(run.topic("GPull").encode())
    checked(dll.SetPullConsumerNameServerAddress(consumer, run.namesrv.encode()), "namesrv")
    if run.args.access_key:
        checked(
            dll.SetPullConsumerSessionCredentials(
                consumer, run.args.access_key.encode(), run.args.secret_key.encode(), b""
            ),
            "credentials",
        )
    checked(dll.StartPullConsumer(consumer), "StartPullConsumer")
    received: list[dict[str, Any]] = []
    statuses: list[int] = []
    try:
        queues = ctypes.POINTER(_CMessageQueue)()
        size = ctypes.c_int()
        checked(
            dll.FetchSubscriptionMessageQueues(
                consumer, topic.encode(), ctypes.byref(queues), ctypes.byref(size)
            ),
            "FetchSubscriptionMessageQueues",
        )
        queue_ids = sorted(queues[i].queueId for i in range(size.value))
        offsets = [0] * size.value
        deadline = time.monotonic() + PULL_WAIT_S
        while len(received) < len(messages) and time.monotonic() < deadline:
            for i in range(size.value):  # every queue from its offset until nothing is found
                while True:
                    pulled = dll.Pull(
                        consumer, ctypes.byref(queues[i]), b"TagBatch", offsets[i], 32
                    )
                    status = pulled.pullStatus
                    statuses.append(status)
                    if status == PULL_FOUND:
                        received += [
                            describe(RecvMessage(pulled.msgFoundList[j]))
                            for j in range(pulled.size)
                        ]
                    if status in (PULL_FOUND, PULL_NO_NEW_MSG, PULL_NO_MATCHED_MSG):
                        offsets[i] = pulled.nextBeginOffset  # else: the same offset again
                    dll.ReleasePullResult(pulled)
                    if status != PULL_FOUND:
                        break
        dll.ReleaseSubscriptionMessageQueue(queues)
    finally:
        dll.ShutdownPullConsumer(consumer)
        dll.DestroyPullConsumer(consumer)
    return {
        "topic": topic,
        "sent": batch_sent,
        "queue_ids": queue_ids,
        "received": received,
        "statuses": sorted(set(statuses)),
    }


def grpc_interop(run: Run) -> dict[str, Any]:
    """Both protocols on one store: receive what the test sent with the 5.x gRPC client, and
    send what it will receive with it."""
    inbox = Inbox()
    consumer = run.consumer("GFromGrpc", run.topic("FromGrpc"), inbox)
    try:
        received = inbox.wait_count(run.args.grpc_count)
    finally:
        consumer.shutdown()
    topic = run.topic("ToGrpc")
    producer = run.producer("PToGrpc")
    try:
        results = [
            sent(run.once_more(lambda i=i: producer.send_sync(message(topic, i, "TagToGrpc"))))
            for i in range(3)
        ]
    finally:
        producer.shutdown()
    return {"received": received, "sent": results, "topic": topic}


def acl_denied(run: Run) -> dict[str, Any]:
    """With a wrong secret (``--bad-secret-key``) a send is refused, naming why."""
    producer = Producer(run.topic("PAclBad"))
    producer.set_namesrv_addr(run.namesrv)
    producer.set_session_credentials(run.args.access_key, run.args.bad_secret_key, "")
    producer.start()
    try:
        producer.send_sync(message(run.topic("Denied"), 0, "TagAcl"))
    except RocketMQException as e:
        remarks = client_log("processSendResponse error remark:")
        return {"refused": True, "error_text": str(e), "remarks": remarks}
    finally:
        producer.shutdown()
    return {"refused": False, "error_text": "", "remarks": []}


SCENARIOS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "sync_send": sync_send,
    "oneway": oneway,
    "delay": delay,
    "orderly": orderly,
    "compressed": compressed,
    "oversize": oversize,
    "retry": retry,
    "restart": restart,
    "transaction": transaction,
    "batch_and_pull": batch_and_pull,
    "grpc_interop": grpc_interop,
    "acl_denied": acl_denied,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--prefix", default="Cpp")
    parser.add_argument("--delay-level", type=int, default=1)
    parser.add_argument("--queues", type=int, default=8, help="queues of an auto-created topic")
    parser.add_argument("--grpc-count", type=int, default=0)
    parser.add_argument("--access-key", default="")
    parser.add_argument("--secret-key", default="")
    parser.add_argument("--bad-secret-key", default="")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    run = Run(args)
    failed = 0
    for name in args.scenarios:
        started = time.monotonic()
        try:
            report = {"scenario": name, "ok": True, "error": "", **SCENARIOS[name](run)}
        except Exception as e:  # reported, and the next scenario runs
            failed += 1
            report = {"scenario": name, "ok": False, "error": f"{e!r}\n{traceback.format_exc()}"}
        report["seconds"] = round(time.monotonic() - started, 2)
        report["client_retries"] = run.client_retries
        run.client_retries = 0
        print(json.dumps(report), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
