"""A Spring Boot application with rocketmq-spring-boot-starter 2.3.3, unchanged
(``e2e/clients/spring``: ``RocketMQTemplate.syncSend`` and a ``@RocketMQMessageListener``), against
a broker's name-server port: every message sent is acknowledged and comes back to the listener,
none twice.

``python -m e2e.remoting_admin.spring_scenario [--count 20]`` (``make e2e-remoting-admin``; about
a minute: Spring Boot's start dominates). The broker runs in this process (the in-process broker
of the tests); the application is one JVM.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.store.config import FlushMode, StoreConfig
from tests.remoting import java_programs

TOPIC = "SpringE2E"
GROUP = "SpringE2EListener"


def check(lines: list[str], count: int) -> list[str]:
    """What went wrong, judged from the application's output (empty: nothing)."""
    problems = []
    sent = [line.split(" ")[1] for line in lines if line.startswith("sent ")]
    got = Counter(line.split(" ")[1] for line in lines if line.startswith("got "))
    wanted = {f"spring-{i}" for i in range(count)}
    if sorted(sent) != sorted(wanted):
        problems.append(f"acknowledged sends: {len(sent)} of {count}")
    missing = wanted - set(got)
    if missing:
        problems.append(f"never consumed: {sorted(missing)}")
    twice = sorted(key for key, n in got.items() if n > 1)
    if twice:
        problems.append(f"consumed more than once: {twice}")
    if not any(line == f"consumed {count}" for line in lines):
        problems.append("the application did not report every message back")
    return problems


def run(count: int) -> int:
    root = Path(tempfile.mkdtemp(prefix="gannet-spring-"))
    try:
        store = StoreConfig.for_tests(root / "store", flush_mode=FlushMode.SYNC_FLUSH)
        config = BrokerConfig(
            store=store, listen_port=0, remoting_port=0, nameserver_port=0,
            auto_create_topics=True, auto_create_groups=True,
        )  # fmt: skip
        broker = threads.start(config)
        try:
            java_programs.lib(java_programs.SPRING)
            started = time.monotonic()
            code, lines = java_programs.run(
                java_programs.SPRING, root,
                f"--rocketmq.name-server={broker.broker.nameserver_endpoint}",
                "--rocketmq.producer.group=SpringE2EProducer",
                f"--gannet.topic={TOPIC}", f"--gannet.group={GROUP}", f"--gannet.count={count}",
                "--spring.main.banner-mode=off",
            )  # fmt: skip
            elapsed_s = time.monotonic() - started
        finally:
            broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    problems = check(lines, count)
    if code != 0:
        problems.append(f"the application exited {code}")
    if problems:
        print("\n".join(lines[-80:]))
        print("FAILED: " + "; ".join(problems))
        return 1
    print(f"rocketmq-spring: {count} sent with syncSend, each consumed once by the listener "
          f"({elapsed_s:.1f} s with the JVM's start)")  # fmt: skip
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=20)
    sys.exit(run(parser.parse_args().count))


if __name__ == "__main__":
    main()
