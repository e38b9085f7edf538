"""A writer process for crash tests: appends messages until killed, reporting each ack.

Run as ``python -m gannet.node.testing.crash_writer DIR --flush sync --producers 8``. Every
producer thread appends messages whose body is derived from (producer, sequence) and, only after
``put_messages`` returned (durable in SYNC_FLUSH), prints one line::

    ACK <producer> <seq> <commit offset> <size> <queue id> <queue offset>

The test kills the process with SIGKILL at a moment of its choosing, reopens the store and
checks that every acknowledged message is present and intact (:func:`expected_body`).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import threading
from pathlib import Path

from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

TOPIC = "CrashTopic"
QUEUES = 4


def key_of(run: int, producer: int, seq: int) -> str:
    return f"r{run}-k{producer}-{seq}"


def expected_body(run: int, producer: int, seq: int, size_bytes: int) -> bytes:
    """The body a producer writes for ``seq``: a prefix and a hash-derived filler."""
    head = f"{run}:{producer}:{seq}:".encode()
    filler = hashlib.sha256(head).digest() * (size_bytes // 32 + 1)
    return (head + filler)[:size_bytes]


def message_for(run: int, producer: int, seq: int, size_bytes: int) -> Message:
    return Message(
        topic=TOPIC,
        body=expected_body(run, producer, seq, size_bytes),
        queue_id=seq % QUEUES,
        properties={"KEYS": key_of(run, producer, seq), "TAGS": f"t{seq % 3}"},
    )


def config_for(root: Path, flush: str, file_size_bytes: int) -> StoreConfig:
    return StoreConfig.for_tests(
        root,
        flush_mode=FlushMode.SYNC_FLUSH if flush == "sync" else FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=file_size_bytes,
        consume_queue_units_per_file=1000,
        index_hash_slots=1024,
        index_items_max=4096,
        flush_interval_ms=50,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path)
    parser.add_argument("--flush", choices=["sync", "async"], default="sync")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--body-size", type=int, default=300)
    parser.add_argument("--file-size", type=int, default=256 * 1024)
    parser.add_argument("--messages-max", type=int, default=1_000_000)
    parser.add_argument("--run", type=int, default=0, help="distinguishes keys of restarts")
    args = parser.parse_args()
    store = MessageStore(config_for(args.root, args.flush, args.file_size)).open()
    lock = threading.Lock()
    print("READY", flush=True)

    def produce(producer: int) -> None:
        for seq in range(args.messages_max):
            res = store.put_messages([message_for(args.run, producer, seq, args.body_size)])[0]
            line = (
                f"ACK {producer} {seq} {res.wrote_offset} {res.wrote_bytes} {seq % QUEUES} "
                f"{res.queue_offset}\n"
            )
            with lock:
                sys.stdout.write(line)
                sys.stdout.flush()

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(args.producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()


if __name__ == "__main__":
    main()
