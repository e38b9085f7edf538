"""A Pop consumer process for the SIGKILL test: pops and acks until killed.

Run as ``python -m tests.pop.pop_crash_consumer DIR``. With the store's and the Pop broker's
threads running on the wall clock, it pops batches of up to 8 messages and acks about two
thirds of them, printing ``POP <body>`` for every delivered message and ``ACK <body>`` only
after the ack returned. The test kills it at a moment of its choosing and checks that every
message not reported as acked is delivered again.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from gannet.node.domain.committing import pop_flush_wait
from gannet.node.pop.service import PopBroker
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.message_store import MessageStore

TOPIC = "Orders"
GROUP = "GID_crash"
INVISIBLE_MS = 60_000


def config_for(root: Path) -> StoreConfig:
    return StoreConfig.for_tests(root, flush_mode=FlushMode.SYNC_FLUSH)


def _say(kind: str, body: str) -> None:
    """One whole line in one write: print() writes its parts one by one when stdout is
    unbuffered (PYTHONUNBUFFERED), and a SIGKILL between them left the parent a bare "POP"."""
    sys.stdout.write(f"{kind} {body}\n")
    sys.stdout.flush()


def main() -> None:
    root = Path(sys.argv[1])
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    store = MessageStore(config_for(root)).open()
    broker = PopBroker(store, wait_durable=pop_flush_wait(store), rng=rng)
    broker.start()
    while True:
        now = time.time_ns() // 1_000_000
        got = broker.pop(GROUP, TOPIC, max_msgs=8, invisible_time_ms=INVISIBLE_MS, now_ms=now)
        for m in got.messages:
            _say("POP", m.message.body.decode())
        for m in got.messages:
            if rng.random() < 0.66:
                broker.ack(GROUP, TOPIC, m.receipt_handle, now_ms=time.time_ns() // 1_000_000)
                _say("ACK", m.message.body.decode())
        if not got.messages:
            time.sleep(0.01)


if __name__ == "__main__":
    main()
