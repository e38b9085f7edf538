"""End-to-end replication faults: a 3-node group of broker processes under official-client load.

Scenarios (each on a fresh group in its own directory, each bounded by ``SCENARIO_LIMIT_S``):

* ``kill`` — SIGKILL of the leader; a new leader takes the load; the killed node restarts and
  catches up;
* ``pause`` — SIGSTOP of the leader (a frozen process: no errors, just silence); a new leader
  takes over; SIGCONT: the old leader learns the new term and steps down;
* ``pause-follower`` — SIGSTOP of a follower: the leader keeps leading and commits with the
  other follower; SIGCONT: the paused follower catches up;
* ``partition`` — every peer link of the leader cut by the fault proxies (clients still reach
  it); the majority elects a new leader; heal: the old leader's uncommitted suffix is cut;
* ``kill-secure``, ``pause-secure``, ``partition-secure`` — the same with authentication and
  TLS on (:mod:`e2e.replication.secure`): brokers with ``--auth-file``, a TLS-only client port
  and mutual TLS between peers; the Producer signs and uses TLS, the harness's admin calls too;
* ``disk-full``, ``disk-full-secure`` — the leader's store on its own small tmpfs really fills
  up (:mod:`e2e.replication.disk_full`): sends are refused with the disk error, the leader keeps
  leading (writes refused group-wide), acknowledged messages stay readable, writes resume once
  space returns. Needs root to mount; otherwise reported *skipped* with the reason;
* ``disk-full-follower`` — a follower's disk fills up; the group keeps serving and the follower
  keeps taking the leader's bytes (disk-full refuses producers, not replication), so the
  replicas converge.

After each: no acknowledged message lost (at its queue and offset on every node), at most one
leader per term (sampled every 100 ms throughout), replicas converge byte-identical up to the
commit offset (:meth:`harness.ProcessGroup.verify`). Run ``make e2e`` or
``python -m e2e.replication.scenario [--only kill,pause,partition] [--keep DIR]``; exit code 0
when every scenario passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from e2e.replication import disk_full
from e2e.replication.harness import Load, ProcessGroup
from e2e.replication.secure import Security

SCENARIO_LIMIT_S = 60.0
ACKS_BEFORE = 40
ACKS_AFTER = 40
TOPIC = "E2eReplication"
console = Console()


@dataclass(frozen=True)
class Outcome:
    name: str
    passed: bool
    seconds: float
    acknowledged: int = 0
    duplicates: int = 0
    terms: int = 0
    failover_s: float = 0.0
    error: str = ""
    skipped: bool = False


def _kill(group: ProcessGroup, leader: int) -> Callable[[], None]:
    group.kill(leader)
    return lambda: group.start(leader)


def _pause(group: ProcessGroup, leader: int) -> Callable[[], None]:
    group.pause(leader)
    return lambda: group.resume(leader)


def _pause_follower(group: ProcessGroup, leader: int) -> Callable[[], None]:
    follower = _a_follower(group, leader)
    group.pause(follower)
    return lambda: group.resume(follower)


def _a_follower(group: ProcessGroup, leader: int) -> int:
    return next(i for i in group.ids if i != leader)


def _partition(group: ProcessGroup, leader: int) -> Callable[[], None]:
    group.isolate(leader)
    return group.heal


FAULTS: dict[str, Callable[[ProcessGroup, int], Callable[[], None]]] = {
    "kill": _kill,
    "pause": _pause,
    "pause-follower": _pause_follower,
    "partition": _partition,
    "kill-secure": _kill,
    "pause-secure": _pause,
    "partition-secure": _partition,
}
DISK_FULL = {"disk-full", "disk-full-secure", "disk-full-follower"}
DEFAULT = [*FAULTS, "disk-full", "disk-full-secure", "disk-full-follower"]
SCENARIOS = DEFAULT
LEADER_STAYS = {"pause-follower"}
"""Faults of a follower: the leader keeps leading and the remaining majority keeps committing."""
SECURE = {"kill-secure", "pause-secure", "partition-secure", "disk-full-secure"}


_SECURITY: list[Security] = []


def _security(base: Path) -> Security:
    """One cluster CA and key for every secure scenario of this process: the official client
    reads its trusted roots once per process."""
    if not _SECURITY:
        _SECURITY.append(Security.make(base / "security", [1, 2, 3]))
        _SECURITY[0].trust_in_this_process()
    return _SECURITY[0]


def run_disk_full(name: str, root: Path, security: Security | None) -> Outcome:
    started = time.monotonic()
    try:
        disk = disk_full.SmallDisk(root / f"node{disk_full.FULL_NODE}", disk_full.DISK_SIZE_MB)
    except disk_full.MountNotPermitted as exc:
        return Outcome(name, False, 0.0, error=f"skipped: {exc}", skipped=True)
    group = ProcessGroup(root, security=security)
    try:
        run = (
            disk_full.run_follower_full if name == "disk-full-follower" else disk_full.run_disk_full
        )
        report = run(group, disk, TOPIC, ACKS_BEFORE, ACKS_AFTER)
        seconds = time.monotonic() - started
        assert seconds < SCENARIO_LIMIT_S, f"took {seconds:.0f} s (limit {SCENARIO_LIMIT_S:.0f})"
        if report.refusal:
            console.print(f"  refusal seen by the Producer: {report.refusal[:300]}")
            console.print(f"  SimpleConsumer on the full node: {report.pop_while_full[:300]}")
        return Outcome(
            name,
            True,
            seconds,
            report.acknowledged,
            report.duplicates,
            report.terms,
            report.resume_s,
        )
    except AssertionError as exc:
        return Outcome(name, False, time.monotonic() - started, error=str(exc))
    finally:
        group.close()
        disk.close()


def run_one(name: str, root: Path) -> Outcome:
    security = _security(root.parent) if name in SECURE else None
    if name in DISK_FULL:
        return run_disk_full(name, root, security)
    started = time.monotonic()
    group = ProcessGroup(root, security=security)
    load: Load | None = None
    try:
        group.start()
        group.create_topic(TOPIC)
        load = Load(group, TOPIC)
        load.start()
        load.wait_acks(ACKS_BEFORE)
        leader = group.leader()
        faulted_at = time.monotonic()
        undo = FAULTS[name](group, leader)
        if name in LEADER_STAYS:
            follower = _a_follower(group, leader)
            others = [i for i in group.ids if i != follower]
            assert group.leader(others) == leader, "leadership moved although a follower paused"
        else:
            others = [i for i in group.ids if i != leader]
            new_leader = group.leader(others)
            assert new_leader != leader
        acked = len(load.receipts)
        load.wait_acks(acked + 1)
        failover_s = load.receipts[acked].acked_at_s - faulted_at
        load.wait_acks(acked + ACKS_AFTER)
        undo()
        receipts = load.stop()
        report = group.verify(TOPIC, receipts)
        seconds = time.monotonic() - started
        assert seconds < SCENARIO_LIMIT_S, f"took {seconds:.0f} s (limit {SCENARIO_LIMIT_S:.0f})"
        return Outcome(
            name, True, seconds, report.acknowledged, report.duplicates, report.terms, failover_s
        )
    except AssertionError as exc:
        return Outcome(name, False, time.monotonic() - started, error=str(exc))
    finally:
        if load is not None:
            load.done.set()
        group.close()
        if load is not None:
            load.join(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT),
        help=f"comma-separated scenarios out of {','.join(SCENARIOS)} (default: all but the last)",
    )
    parser.add_argument("--keep", type=Path, help="keep the stores and logs under this directory")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {SCENARIOS}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="gannet-e2e-repl-"))
    outcomes = []
    for name in names:
        directory = base / name
        directory.mkdir(parents=True, exist_ok=True)
        console.print(f"scenario [bold]{name}[/] in {directory}")
        outcomes.append(run_one(name, directory))
    table = Table(title="replication e2e (3 broker processes, official Producer)")
    columns = ("scenario", "result", "s", "acked", "dups", "terms", "failover/resume s", "error")
    for column in columns:
        table.add_column(column)
    for o in outcomes:
        table.add_row(
            o.name,
            "[yellow]skipped[/]" if o.skipped else "[green]pass[/]" if o.passed else "[red]FAIL[/]",
            f"{o.seconds:.1f}",
            str(o.acknowledged),
            str(o.duplicates),
            str(o.terms),
            f"{o.failover_s:.2f}" if o.passed else "-",
            o.error[:200],
        )
    console.print(table)
    ok = all(o.passed or o.skipped for o in outcomes)
    if args.keep is None and ok:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
