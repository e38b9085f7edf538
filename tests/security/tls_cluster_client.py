"""Run as a subprocess: the official Producer and SimpleConsumer, with ``tls_enable=True`` and
signed requests, send ``count`` messages to a topic of a TLS ``gannet cluster up`` and receive
and ack them all.

The client trusts only gRPC's default roots, so the cluster CA reaches it through
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (``DATA_ROOT/client.env`` exports it), read once per
process — hence a process of its own. Prints one JSON line: the broker group of each send and
the bodies received; exits 1 on failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

RECEIVE_TIMEOUT_S = 60.0
AWAIT_S = 5  # the broker long-polls at least 5 s
INVISIBLE_S = 20


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--endpoints", "--topic", "--group", "--access-key", "--secret-key"):
        parser.add_argument(name, required=True)
    parser.add_argument("--count", type=int, default=8)
    args = parser.parse_args()
    config = ClientConfiguration(
        args.endpoints, Credentials(args.access_key, args.secret_key), request_timeout=5
    )
    producer = Producer(config, (args.topic,), tls_enable=True)
    consumer = SimpleConsumer(
        config,
        args.group,
        {args.topic: FilterExpression("*")},
        await_duration=AWAIT_S,
        tls_enable=True,
    )
    groups: list[str] = []
    bodies: set[str] = set()
    try:
        producer.startup()
        for i in range(args.count):
            message = Message()
            message.topic = args.topic
            message.body = f"m{i}".encode()
            receipt = producer.send(message)
            groups.append(str(receipt.message_queue).split(".")[0])
        consumer.startup()
        deadline = time.monotonic() + RECEIVE_TIMEOUT_S
        while len(bodies) < args.count and time.monotonic() < deadline:
            for received in consumer.receive(32, INVISIBLE_S):
                bodies.add(bytes(received.body).decode())
                consumer.ack(received)
    except Exception as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.shutdown()
        producer.shutdown()
    print(json.dumps({"send_groups": groups, "received": sorted(bodies)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
