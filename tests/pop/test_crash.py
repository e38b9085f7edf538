"""SIGKILL of a real Pop consumer process: no message is lost.

Every message the killed process did not report as acked must be delivered again after the
store and the Pop services are reopened (at least once); acked ones may come back only if the
ack's bookkeeping was lost with the process. The kill moment is drawn from a printed seed
(``GANNET_CRASH_SEED=<seed>`` replays it).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gannet.node.pop.config import PopConfig
from gannet.node.store.configs.groups import SubscriptionGroupConfig
from gannet.node.store.configs.topics import TopicConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from tests.pop import pop_crash_consumer as child
from tests.pop.pop_harness import INVISIBLE_MS, Harness

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
MESSAGES = 400


def _prepare(root: Path) -> list[str]:
    with MessageStore(child.config_for(root)).open() as store:
        store.topic_configs.put(TopicConfig(child.TOPIC, read_queue_nums=4, write_queue_nums=4))
        store.group_configs.put(SubscriptionGroupConfig(child.GROUP))
        bodies = [f"c{i}" for i in range(MESSAGES)]
        store.put_messages(
            [
                Message(topic=child.TOPIC, body=b.encode(), queue_id=i % 4)
                for i, b in enumerate(bodies)
            ]
        )
    return bodies


def _run_and_kill(root: Path, acks_before_kill: int, seed: int) -> tuple[list[str], list[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / p) for p in ("node", "operator", "pipeline")] + [str(REPO)]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.pop.pop_crash_consumer", str(root), str(seed)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    popped: list[str] = []
    acked: list[str] = []
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            kind, _, body = line.strip().partition(" ")
            assert kind in ("POP", "ACK"), f"unexpected line from the consumer: {line!r}"
            (acked if kind == "ACK" else popped).append(body)
            if len(acked) >= acks_before_kill:
                break
            assert time.monotonic() < deadline, "consumer too slow"
        proc.send_signal(signal.SIGKILL)
        # Read the rest through the same text stream: communicate() would read the pipe's file
        # descriptor directly and skip what the iteration above had already buffered, starting
        # mid-line. The child writes each line with one flushed write, so none is cut.
        for line in proc.stdout.read().splitlines():
            kind, _, body = line.strip().partition(" ")
            assert kind in ("POP", "ACK"), f"unexpected line from the consumer: {line!r}"
            (acked if kind == "ACK" else popped).append(body)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return popped, acked


def test_no_message_lost_when_the_consumer_process_is_killed(tmp_path: Path) -> None:
    seed = int(os.environ.get("GANNET_CRASH_SEED", random.randrange(2**32)))
    print(f"crash seed {seed} (replay with GANNET_CRASH_SEED={seed})")
    rng = random.Random(seed)
    bodies = _prepare(tmp_path)
    popped, acked = _run_and_kill(tmp_path, rng.randrange(20, 200), seed)
    assert acked, "the consumer acknowledged nothing"
    h = Harness(tmp_path, PopConfig())
    try:
        assert not h.store.last_exit_ok
        h.settle()
        end = h.store.commitlog.max_offset()
        assert h.store.wait_dispatched(end, 0), f"dispatch stopped short of {end}"
        seen: Counter[str] = Counter()
        for _ in range(4):
            while True:
                got = h.pop(32, group=child.GROUP, topic=child.TOPIC)
                if not got.messages:
                    break
                seen.update(m.message.body.decode() for m in got.messages)
                for m in got.messages:
                    h.broker.ack(child.GROUP, child.TOPIC, m.receipt_handle, now_ms=h.now)
            h.advance(max(INVISIBLE_MS, child.INVISIBLE_MS) + 5_000)
        missing = set(bodies) - set(acked) - set(seen)
        assert not missing, f"seed {seed}: lost {sorted(missing)[:10]}"
        assert set(popped) <= set(bodies)
    finally:
        h.close()
