"""Membership changes of a group of ``gannet broker run`` processes under official-client load,
driven through the CLI (``gannet cluster member add|remove``).

``make e2e-membership`` runs the full scenario; ``tests/replication/test_membership_e2e.py`` a
short one. Full: founders 1, 2, 3 (``--peers``) → nodes 4 and 5 start with ``--join`` and are
added (3 → 5) → 5 and 4 are removed and stopped (5 → 3) → node 3 is killed and its data
directory deleted, removed, and replaced by node 6 (``--join``, a new id) → the leader is
removed (it hands over once its removal committed) and stopped → node 7 joins (3 members).
Short: node 4 is added, then the leader is removed.

Checks at the end (the producer wrote throughout): at most one leader per term (the status
monitor of :class:`~e2e.replication.harness.ProcessGroup`), every acknowledged message on every
remaining member, the remaining members' commit logs byte-identical up to the commit offset,
and ``gannet store verify`` clean on each of them once stopped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.replication.harness import (
    Load,
    ProcessGroup,
    Receipt,
    VerifyReport,
    free_ports,
)
from gannet.node.cli.cluster.commands import ensure_secret
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import PeerSpec
from gannet.node.testing import small_stores

CAPACITY = 7
CLI_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0
"""Three Python processes start in seconds; far longer on a machine shared with builds."""


@dataclass
class Result:
    steps: list[str]
    report: VerifyReport | None
    members: list[int]
    seconds: float

    def summary(self) -> str:
        lines = [f"{len(self.steps)} steps in {self.seconds:.0f} s; members {self.members}"]
        lines += [f"  {s}" for s in self.steps]
        if self.report is not None:
            r = self.report
            lines.append(
                f"  verified: {r.acknowledged} acknowledged messages on every member, commit "
                f"offset {r.commit_offset}, {r.terms} terms, {r.duplicates} duplicates"
            )
        return "\n".join(lines)


class MembershipGroup(ProcessGroup):
    """Founders 1..3 plus nodes that start with ``--join``; ``members`` is the configuration
    the scenario expects (the ids ``converged`` and ``verify`` look at)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, 3, proxied=False)
        ports = free_ports(2 * CAPACITY)
        self.client_ports = ports[:CAPACITY]
        self.peer_ports = ports[CAPACITY:]
        self.members = [1, 2, 3]

    @property
    def ids(self) -> list[int]:
        return list(getattr(self, "members", [1, 2, 3]))

    def spec(self, node_id: int) -> PeerSpec:
        return PeerSpec(
            node_id, "127.0.0.1", self.peer_ports[node_id - 1], self.client_ports[node_id - 1]
        )

    def start_joining(self, node_id: int) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = [
            sys.executable, "-m", "gannet.node.cli", "broker", "run",
            "--data-dir", str(self.root / f"node{node_id}"),
            "--flush", self.flush,
            "--file-size-mb", "4",
            *small_stores.INDEX_ARGS,
            "--listen", self.client_endpoint(node_id),
            "--metrics-listen", "",
            "--node-id", str(node_id),
            "--join",
            "--peer-listen", self.spec(node_id).peer_endpoint,
            "--peer-secret-file", str(ensure_secret(self.root)),
        ]  # fmt: skip
        with (self.root / f"node{node_id}.log").open("ab") as log:
            self.processes[node_id] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def stop(self, node_id: int) -> None:
        process = self.processes[node_id]
        process.terminate()
        process.wait(30)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``gannet cluster member ...`` against a remaining member (the CLI finds the
        leader); raises with the output when it does not exit 0."""
        endpoint = self.client_endpoint(self.members[0])
        argv = [sys.executable, "-m", "gannet.node.cli", "cluster", "member", *args]
        argv += ["--endpoint", endpoint]
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
        )
        if done.returncode != 0:
            raise AssertionError(
                f"`gannet cluster member {' '.join(args)}` exited {done.returncode}: "
                f"{done.stdout}{done.stderr}"
            )
        return done

    def add(self, node_id: int) -> None:
        self.start_joining(node_id)
        self.cli("add", str(self.spec(node_id)), "--timeout-s", "90")
        self.members.append(node_id)

    def remove(self, node_id: int) -> None:
        self.cli("remove", str(node_id))
        self.members.remove(node_id)

    def listed(self) -> list[int]:
        leader = self.leader(among=self.members)
        reply = self.admin_call(leader, "ListMembers", admin_pb2.ListMembersRequest())
        assert isinstance(reply, admin_pb2.ListMembersResponse)
        return sorted(int(m.node_id) for m in reply.members if m.voter)

    def verify(self, topic: str, receipts: list[Receipt]) -> VerifyReport:
        """``ProcessGroup.verify`` over the remaining members (node 1 may be gone)."""
        split = {t: ids for t, ids in self.leaders_by_term.items() if len(ids) > 1}
        assert not split, f"more than one leader in a term: {split}"
        commit = self.converged()
        first, *others = self.members
        reference = self.commitlog_bytes(first, commit)
        for node_id in others:
            assert self.commitlog_bytes(node_id, commit) == reference, (
                f"node {node_id}'s commit log differs from node {first}'s below {commit}"
            )
        for node_id in self.members:
            with self.channel(node_id) as channel:
                stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
                for r in receipts:
                    found = self.query_key(stub, topic, r.key)
                    positions = {(m.message_id, m.queue_offset) for m in found}
                    assert (r.message_id, r.offset) in positions, (
                        f"node {node_id}: acknowledged {r.key} ({r.message_id}) lost"
                    )
        return VerifyReport(commit, len(receipts), 0, len(self.leaders_by_term))


def run(root: Path, *, full: bool) -> Result:
    started = time.monotonic()
    group = MembershipGroup(root)
    steps: list[str] = []
    report = None
    load = None
    try:
        group.start()
        group.leader(among=group.members, timeout_s=START_TIMEOUT_S)
        topic = "Membership"
        group.create_topic(topic)
        load = Load(group, topic)
        load.start()
        load.wait_acks(20)
        producing = load

        def step(text: str) -> None:
            assert group.listed() == sorted(group.members), (group.listed(), group.members)
            producing.wait_acks(len(producing.receipts) + 10)  # the producer still gets answers
            steps.append(f"{text}: members {sorted(group.members)}")

        group.add(4)
        step("added 4")
        if full:
            group.add(5)
            step("added 5")
            for node_id in (5, 4):
                group.remove(node_id)
                group.stop(node_id)
            step("removed 5 and 4")
            group.kill(3)
            shutil.rmtree(root / "node3")
            group.remove(3)
            group.add(6)
            step("node 3 lost its disk: removed, replaced by 6")
        leader = group.leader(among=group.members)
        group.remove(leader)
        group.leader(among=group.members)  # the others agree on a new one
        group.stop(leader)
        step(f"removed the leader {leader}")
        if full:
            group.add(7)
            step("added 7")
        receipts = load.stop()
        load = None
        report = group.verify(topic, receipts)
        members = sorted(group.members)
    finally:
        if load is not None:
            load.stop()
        group.close()
    for node_id in members:
        verified = subprocess.run(
            [sys.executable, "-m", "gannet.node.cli", "store", "verify",
             str(root / f"node{node_id}")],
            check=False, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert verified.returncode == 0, f"store verify node {node_id}: {verified.stdout}"
        steps.append(f"store verify node {node_id}: clean")
    return Result(steps, report, members, time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="data directory (default: temp)")
    parser.add_argument("--short", action="store_true", help="the short scenario of make test")
    args = parser.parse_args()
    root = args.root or Path(f"/tmp/gannet-e2e-membership-{os.getpid()}")
    if root.exists():
        shutil.rmtree(root)
    try:
        result = run(root, full=not args.short)
        print(result.summary())
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
