"""The client load of make e2e-kind, run inside the cluster in a pod of the Gannet image.

The pod ``e2e-client`` (:mod:`e2e.kind.cluster`) mounts this file from a ConfigMap and sleeps;
the tests run it with ``kubectl exec -i e2e-client -- python /load/load.py …``, so the official
RocketMQ Python client (rocketmq-python-client, a dependency of the image) talks to the brokers
through the client Service from a pod, as an application would. One JSON object per line on
stdout:

- ``produce``: one Producer sending one message at a time (keys ``<prefix>-<n>``) until its stdin
  closes (or ``--count`` sends); a line per send: ``{"ack": key, "t0": began, "t1": answered}``
  (wall-clock seconds: the pod shares the host's clock) or ``{"fail": key, "error": name}``;
- ``consume``: one SimpleConsumer of a group reading until it has received every key listed on
  stdin (one per line), then ``--drain-s`` more seconds to catch redeliveries (at most
  ``--timeout-s`` in all); a line
  ``{"received": n, "unique": n, "missing": [...], "duplicates": n, "wanted_duplicates": n}``
  (duplicates of the listed keys only: earlier scenarios may leave messages of their own).

Stdlib and the client only: it runs under the image's Python.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (  # type: ignore[import-untyped, unused-ignore]
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

REQUEST_TIMEOUT_S = 3
INVISIBLE_S = 20


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def produce(endpoint: str, topic: str, prefix: str, count: int | None) -> None:
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S)
    producer = Producer(config, (topic,))
    producer.startup()
    emit(started=time.time())
    n = 0
    try:
        while not stop.is_set() and (count is None or n < count):
            key = f"{prefix}-{n}"
            n += 1
            message = Message()
            message.topic = topic
            message.body = key.encode()
            message.keys = key
            message.tag = "e2e"
            began = time.time()
            try:
                producer.send(message)
            except Exception as exc:
                emit(fail=key, error=type(exc).__name__, t0=began, t1=time.time())
                time.sleep(0.05)
                continue
            emit(ack=key, t0=began, t1=time.time())
    finally:
        producer.shutdown()
        emit(done=n)


def consume(endpoint: str, topic: str, group: str, drain_s: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    wanted = {line.strip() for line in sys.stdin if line.strip()}
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S + 7)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    seen: dict[str, int] = {}
    received = 0
    quiet_since: float | None = None
    try:
        while time.monotonic() < deadline:
            try:
                messages = consumer.receive(32, INVISIBLE_S)
            except Exception as exc:
                emit(receive_error=type(exc).__name__)
                time.sleep(0.2)
                continue
            for message in messages or ():
                key = bytes(message.body).decode()
                seen[key] = seen.get(key, 0) + 1
                received += 1
                consumer.ack(message)
            if wanted <= seen.keys():
                if messages:
                    quiet_since = None
                elif quiet_since is None:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= drain_s:
                    break
    finally:
        consumer.shutdown()
    emit(
        received=received,
        unique=len(seen),
        missing=sorted(wanted - seen.keys())[:20],
        missing_count=len(wanted - seen.keys()),
        duplicates=sum(times - 1 for times in seen.values()),
        wanted_duplicates=sum(times - 1 for key, times in seen.items() if key in wanted),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("produce", "consume"))
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--prefix", default="m")
    parser.add_argument("--count", type=int)
    parser.add_argument("--group", default="billing")
    parser.add_argument("--drain-s", type=float, default=3.0)
    parser.add_argument("--timeout-s", type=float, default=180.0)
    args = parser.parse_args()
    if args.mode == "produce":
        produce(args.endpoint, args.topic, args.prefix, args.count)
    else:
        consume(args.endpoint, args.topic, args.group, args.drain_s, args.timeout_s)


if __name__ == "__main__":
    main()
