"""Cost of a transactional send against a normal one, with the official Python client.

The broker of :mod:`bench.broker` (a ``gannet broker run`` subprocess, ASYNC_FLUSH, one node,
asyncio loop) and the same client rules: the official ``rocketmq-python-client`` Producer,
1 KiB bodies, ``PROCESSES`` client processes of ``THREADS`` threads each, every thread sending
one message at a time (a transactional send has no async form in the client):

* ``normal`` — ``producer.send(message)`` to a NORMAL topic;
* ``transactional`` — ``begin_transaction()``, ``send(message, transaction)`` (a half
  message), ``transaction.commit()`` (EndTransaction: the commit copy and the op record) to a
  TRANSACTION topic: two RPCs and three records per delivered message.

For each, messages per second and the broker's CPU µs per message (``/proc`` utime + stime over
the window); the ratios transactional / normal are printed and appended to
``bench/results/transactions.jsonl``. Run by ``make bench`` (``--quick``) or
``python -m bench.transactions``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import grpc

from bench import results_log
from bench.broker import BrokerProcess, _machine, _run_workers, broker_process, scratch_dir

NORMAL_TOPIC, TX_TOPIC, QUEUES = "TxBenchNormal", "TxBenchTx", 8
PROCESSES = 2
THREADS = 8
BODY_BYTES = 1024


def _setup(endpoint: str) -> None:
    from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        for name, kind in ((NORMAL_TOPIC, admin_pb2.NORMAL), (TX_TOPIC, admin_pb2.TRANSACTION)):
            request = admin_pb2.CreateTopicRequest(name=name, queue_nums=QUEUES, message_type=kind)
            admin.CreateTopic(request, timeout=10)


def _worker(
    endpoint: str, threads: int, start: Any, stop_at: Any, out: Any, ready: Any, tx: bool
) -> None:
    import threading

    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Message,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    class Commit(TransactionChecker):  # type: ignore[misc]
        def check(self, message: Any) -> Any:
            return TransactionResolution.COMMIT

    topic = TX_TOPIC if tx else NORMAL_TOPIC
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (topic,), Commit() if tx else None)
    producer.startup()
    body = b"t" * BODY_BYTES
    counts = [0, 0]  # sent, errors
    lock = threading.Lock()

    def one() -> None:
        msg = Message()
        msg.topic, msg.body = topic, body
        if tx:
            transaction = producer.begin_transaction()
            producer.send(msg, transaction)
            transaction.commit()
        else:
            producer.send(msg)

    def loop() -> None:
        start.wait()
        deadline = stop_at.value
        sent = errors = 0
        while time.time() < deadline:
            try:
                one()
                sent += 1
            except Exception:
                errors += 1
        with lock:
            counts[0] += sent
            counts[1] += errors

    one()  # warm the route and channel
    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    ready.put(1)
    for w in workers:
        w.join()
    out.put({"sent": counts[0], "errors": counts[1], "ended": time.time()})
    producer.shutdown()


def normal_worker(endpoint: str, threads: int, start: Any, stop: Any, out: Any, ready: Any) -> None:
    _worker(endpoint, threads, start, stop, out, ready, tx=False)


def tx_worker(endpoint: str, threads: int, start: Any, stop: Any, out: Any, ready: Any) -> None:
    _worker(endpoint, threads, start, stop, out, ready, tx=True)


def run(seconds: float) -> dict[str, Any]:
    with scratch_dir("gannet-bench-tx-") as root:
        broker: BrokerProcess
        with broker_process(root / "store", "asyncio") as broker:
            _setup(broker.endpoint)
            result: dict[str, Any] = {"machine_before": _machine()}
            result["normal"] = _run_workers(broker, normal_worker, PROCESSES, THREADS, seconds)
            print("normal", result["normal"], flush=True)
            result["transactional"] = _run_workers(broker, tx_worker, PROCESSES, THREADS, seconds)
            print("transactional", result["transactional"], flush=True)
        normal, tx = result["normal"], result["transactional"]
        result["ratio_rate"] = round(tx["msgs_per_s"] / max(normal["msgs_per_s"], 1e-9), 3)
        result["ratio_cpu_per_msg"] = round(
            tx["broker_cpu_us_per_msg"] / max(normal["broker_cpu_us_per_msg"], 1e-9), 3
        )
        result["machine_after"] = _machine()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 s windows")
    parser.add_argument("--seconds", type=float, help="window per scenario (default 4 / 15)")
    args = parser.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 15.0)
    result = run(seconds)
    result.update({"scenario": "transactional_send", "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    results_log.append("transactions", result)
    print(
        f"transactional / normal: rate x{result['ratio_rate']}, "
        f"broker CPU per message x{result['ratio_cpu_per_msg']}"
    )


if __name__ == "__main__":
    main()
