"""Run as a subprocess: the official Producer with ``tls_enable=True`` sends one message.

The client trusts only the system roots (``grpc.ssl_channel_credentials()``), so the test CA
reaches it through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, read once per process — hence a
process of its own. Prints the message id; exits 1 on failure.
"""

from __future__ import annotations

import sys

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main(endpoint: str, topic: str) -> int:
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,), tls_enable=True)
    try:
        producer.startup()
        message = Message()
        message.topic = topic
        message.body = b"over tls"
        print(producer.send(message).message_id)
        return 0
    except Exception as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        producer.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
