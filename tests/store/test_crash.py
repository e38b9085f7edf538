"""Crash tests: a real writer process killed with SIGKILL during sustained appends.

Every append the writer reported as acknowledged (durable in SYNC_FLUSH) must be present and
intact after recovery; the store must verify clean; consume queues and index must agree with
the commit log. The kill moment is drawn from a seed that is printed;
``GANNET_CRASH_SEED=<seed>`` replays its ack counts (the kill still lands wherever the writer's
threads are at that moment).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gannet.node.store import querying
from gannet.node.store.message_store import MessageStore
from gannet.node.store.upkeep import verifying
from gannet.node.testing import crash_writer

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def run_and_kill(root: Path, flush: str, acks_before_kill: int, run: int) -> list[list[int]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(REPO / p) for p in ("node", "operator", "pipeline"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gannet.node.testing.crash_writer", str(root), "--flush", flush,
         "--producers", "8", "--file-size", str(128 * 1024), "--run", str(run)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    acks: list[list[int]] = []
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            if line.startswith("ACK"):
                acks.append([int(x) for x in line.split()[1:]])
                if len(acks) >= acks_before_kill:
                    break
            assert time.monotonic() < deadline, "writer too slow"
        proc.send_signal(signal.SIGKILL)
        # acks printed before the kill landed are still in the pipe: they count too. Read them
        # through the same text stream (communicate() would skip what the loop above buffered).
        rest = proc.stdout.read()
        proc.wait(timeout=30)
        acks += [
            [int(x) for x in ln.split()[1:]] for ln in rest.splitlines() if ln.startswith("ACK")
        ]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return acks


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_every_acknowledged_append_survives_sigkill(tmp_path: Path, flush: str) -> None:
    seed = int(os.environ.get("GANNET_CRASH_SEED", random.randrange(2**32)))
    print(f"crash seed {seed} (replay with GANNET_CRASH_SEED={seed})")
    rng = random.Random(seed)
    for round_no in range(3):
        acks = run_and_kill(tmp_path, flush, rng.randrange(300, 1500), round_no)
        assert acks, "the writer acknowledged nothing"
        config = crash_writer.config_for(tmp_path, flush, 128 * 1024)
        with MessageStore(config).open() as store:
            assert not store.last_exit_ok
            end = store.commitlog.max_offset()
            assert store.wait_dispatched(end, 30), (
                f"seed {seed} round {round_no}: dispatch stuck at {store.dispatch.reput_from} "
                f"of {end} ({store.dispatch.error})"
            )
            for producer, seq, offset, size, qid, qoff in acks:
                m = store.read_message(offset)
                where = f"seed {seed} round {round_no}: ack {producer}/{seq} at {offset}"
                assert m is not None, where
                assert m.store_size == size, where
                assert m.body == crash_writer.expected_body(round_no, producer, seq, 300), where
                assert (m.queue_id, m.queue_offset) == (qid, qoff), where
                cq = store.queues.get(crash_writer.TOPIC, qid)
                assert cq is not None, where
                unit = cq.get_unit(qoff)
                assert unit is not None, where
                assert unit.commit_offset == offset, where
            for producer, seq, offset, *_ in acks:  # the index agrees with the commit log
                key = crash_writer.key_of(round_no, producer, seq)
                hits = querying.by_key(store, crash_writer.TOPIC, key)
                assert [m.physical_offset for m in hits.messages] == [offset], key
        report = verifying.verify(tmp_path)
        assert report.clean, report.damage
