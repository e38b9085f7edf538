"""One run of the fault harness, and many: ``python -m e2e.faults.runner`` (``make e2e-faults``).

Root only (network namespaces, iptables). Per run, the outer process (root namespace) makes the
namespaces (:class:`~e2e.faults.netns.Namespaces`), runs the inner one inside ``ctl`` in a
session of its own and, in ``finally``, kills that session (the brokers are in it) and deletes
the namespaces. The inner run:

1. starts three ``gannet broker run --flush sync`` members with small store files, waits for a
   leader, creates the topics (``jq`` normal, 4 queues; ``jf`` FIFO, 2 queues) and the groups;
2. starts the workload (:mod:`e2e.faults.workload`: two senders on ``jq``, one FIFO sender on
   ``jf`` in three message groups, transactions on ``jt`` (TRANSACTION, 2 queues), a Pop
   consumer on each topic; with ``--clients python,java,node`` also the official Java and
   Node.js clients' senders and consumers, a process each, :mod:`e2e.faults.client_workload`)
   and the nemesis
   (:mod:`e2e.faults.nemesis`) on the seed's schedule, for ``duration_s``;
3. stops the senders, heals every fault (and finishes a replacement under way), lets the
   consumers drain (as long as they progress: :mod:`e2e.faults.drain`), waits until the
   replicas converge, compares their commit logs byte for byte up to the commit offset, reads
   every queue on every member, stops the members and runs ``gannet store verify`` on each
   store — "every member" being the group at the end: a member
   replaced under a new id (nemesis ``replace``) is gone with its store, its successor checked
   like the others, and the group the leader lists must be exactly those;
4. checks the history (:mod:`e2e.faults.checker`) and writes ``result.json``, ``history.jsonl``
   and ``samples.jsonl`` into ``<out>/<seed>/``.

Seeds are printed; ``--seed S`` alone replays run S (the same schedule of faults, the same
workload choices). ``--runs N`` runs seeds ``S``, ``S+1``, ... ``S+N-1`` (``S`` random unless
given). The Markdown report and a timeline picture per failed run go to ``<out>``
(:mod:`e2e.faults.report`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from e2e.faults import checker, client_workload, drain, nemesis, netns, report
from e2e.faults.cluster import FOUNDERS, NetCluster
from e2e.faults.history import Event, History
from e2e.faults.workload import Popper, Sender, TxSender

SEND_RATE_PER_S = 15.0
TX_RATE_PER_S = 8.0
FIFO_GROUPS = 3
START_TIMEOUT_S = 90.0
RECOVER_TIMEOUT_S = 90.0
CONVERGE_TIMEOUT_S = 60.0
RUN_MARGIN_S = 620.0
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
CLIENTS = ("python", "java", "node")
"""The workloads a run can start (python always runs)."""


# ---------------------------------------------------------------------------- inner: one run
def inner(spec: dict[str, Any]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks below
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    seed, duration_s = int(spec["seed"]), float(spec["duration_s"])
    size = min(len(spec["nodes"]), FOUNDERS)
    faults = nemesis.schedule(seed, duration_s, size, tuple(spec["nemeses"]))
    result: dict[str, Any] = {
        "seed": seed,
        "duration_s": duration_s,
        "nemeses": spec["nemeses"],
        "faults": [
            {"start": f.start, "stop": f.stop, "kind": f.kind, "what": f.describe()} for f in faults
        ],
    }
    with tempfile.TemporaryDirectory(prefix="gannet-faults-") as root_name:
        root = Path(root_name)
        kinds = set(spec["nemeses"])
        history = History()
        cluster: NetCluster | None = None
        try:
            cluster = NetCluster(spec["nodes"], spec["addresses"], spec["ctl_address"], root,
                                 clocks="clock" in kinds, disks="disk-full" in kinds,
                                 lazy="lose-unfsynced" in kinds)  # fmt: skip
            others = [c for c in spec.get("clients", ["python"]) if c != "python"]
            _one_run(cluster, history, faults, seed, duration_s, result, out, others)
        except Exception:
            result["error"] = traceback.format_exc()[-3000:]
        finally:
            if cluster is not None:
                cluster.stop()
            with contextlib.suppress(Exception):
                history.write(out)
            if cluster is not None:
                if not result.get("valid", False):
                    cluster.archive(out / "stores.tgz")
                elif cluster.retired:  # a replacement's steps are read from the members' logs
                    cluster.keep_logs(out / "logs")
                cluster.unmount()
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result.get("valid") else 1


def _one_run(
    cluster: NetCluster, history: History, faults: list[nemesis.Fault], seed: int,
    duration_s: float, result: dict[str, Any], out: Path, others: list[str],
) -> None:  # fmt: skip
    """``others``: the other clients' workloads to run too (``java``, ``node``), each program's
    stderr in ``out/<client>.log``."""
    cluster.start()
    cluster.leader(START_TIMEOUT_S)
    cluster.create_topic("jq", 4, "NORMAL")
    cluster.create_topic("jf", 2, "FIFO")
    cluster.create_topic("jt", 2, "TRANSACTION")
    cluster.create_group("cq", fifo=False)
    cluster.create_group("cf", fifo=True)
    cluster.create_group("ct", fifo=False)
    cluster.converged(CONVERGE_TIMEOUT_S)  # every member knows the topics before clients ask
    history.origin = time.monotonic()
    cluster.monitor(history)
    endpoints = cluster.endpoints
    senders = [Sender(endpoints, "jq", f"s{i}", history, SEND_RATE_PER_S) for i in (1, 2)]
    senders.append(Sender(endpoints, "jf", "f1", history, SEND_RATE_PER_S, groups=FIFO_GROUPS))
    poppers = [Popper(endpoints, "jq", "cq", "pq", history, seed),
               Popper(endpoints, "jf", "cf", "pf", history, seed + 1),
               Popper(endpoints, "jt", "ct", "pt", history, seed + 2)]  # fmt: skip
    tx = TxSender(endpoints, "jt", "t1", history, TX_RATE_PER_S, seed + 3)
    clients = [client_workload.KNOWN[name] for name in others]
    for client in clients:
        cluster.create_group(client.group, fifo=False)
    if clients:
        cluster.converged(CONVERGE_TIMEOUT_S)
    workloads = [client_workload.ClientWorkload(client, endpoints, "jq", history, SEND_RATE_PER_S,
                                                seed + 4 + n, out / f"{client.name}.log")
                 for n, client in enumerate(clients)]  # fmt: skip
    for sender in senders:
        sender.startup()
    tx.startup()
    for popper in poppers:
        popper.startup()
    for workload in workloads:
        workload.startup()
    chaos = nemesis.Nemesis(cluster, history, faults)
    chaos.start()
    threading.Event().wait(max(0.0, duration_s - history.now()))
    load_end = history.now()
    for sender in senders:
        sender.stop()
    tx.stop()
    for workload in workloads:
        workload.stop_sends()
    chaos.heal_all()
    healed = history.now()
    cluster.leader(RECOVER_TIMEOUT_S)
    result["leader_after_heal_s"] = round(history.now() - healed, 2)

    consumers: dict[str, tuple[str, drain.Missing]] = {
        "jq": ("pq", lambda events: checker.undelivered(events, "s", "pq")),
        "jf": ("pf", lambda events: checker.undelivered(events, "f", "pf")),
        "jt": ("pt", lambda events: checker.tx_undelivered(events, "t1", "pt")),
    }
    for client in clients:
        consumers[f"jq_{client.name}"] = (client.consumer, _missed_by(client.consumer))
    drained = drain.wait(history, consumers)
    for popper in poppers:
        popper.stop()
    for workload in workloads:
        workload.stop()
    tx.shutdown()
    commit = cluster.converged(CONVERGE_TIMEOUT_S)
    members = cluster.ids  # the slots' nodes: the replaced members' stores are gone
    listed, in_flight = cluster.listed()
    topics = ("jq", "jf", "jt")
    stored = {topic: {i: cluster.stored(i, topic) for i in members} for topic in topics}
    start = max(cluster.log_start(i) for i in members)
    reference = cluster.commitlog_bytes(members[0], commit, start)
    differ = [i for i in members[1:] if cluster.commitlog_bytes(i, commit, start) != reference]
    cluster.stop()
    events, samples = history.snapshot()
    verdict = checker.Verdict()
    if differ:
        verdict.violations.append(f"commit logs differ from member {members[0]}'s from {start} "
                                  f"to {commit}: {differ}")  # fmt: skip
    result["members"] = members
    result["replaced"] = sorted(cluster.retired)
    result["compared_from"] = start
    checker.check_members(verdict, members, listed, in_flight,
                          {i: cluster.store_gone(i) for i in cluster.retired})  # fmt: skip
    checker.check_sends(verdict, "jq", events, "s", stored["jq"])
    checker.check_sends(verdict, "jf", events, "f", stored["jf"])
    checker.check_pop(verdict, "pop", events, "pq")
    checker.check_pop(verdict, "fifo_pop", events, "pf")
    checker.check_fifo(verdict, events, "pf", stored["jf"][members[0]])
    checker.check_transactions(verdict, events, "t1", "pt", stored["jt"])
    checker.check_pop(verdict, "tx_pop", events, "pt")
    for workload in workloads:
        name = workload.client.name
        checker.check_pop(verdict, f"{name}_pop", events, workload.client.consumer)
        checker.client_figures(verdict, f"jq_{name}", events, workload.client.sender)
        result[f"{name}_malformed_lines"] = workload.malformed
    started = [e for e in events if e.process == "nemesis" and e.type == "start"]
    checker.check_terms(verdict, samples, faults, started)
    result["verify"] = {str(i): cluster.store_verify(i) for i in members}
    for member, (clean, text) in result["verify"].items():
        if not clean:
            verdict.violations.append(f"store verify of member {member}: {text[-300:]}")
    result["commit_offset"] = commit
    result["figures"] = verdict.figures
    result["violations"] = verdict.violations
    result["nemesis_errors"] = chaos.errors
    result["undelivered"] = {
        name: figures["undelivered"] for name, figures in drained["consumers"].items()
    }
    for name, (process, _) in consumers.items():
        drained["consumers"][name]["load_receive_per_s"] = drain.load_rate(events, process,
                                                                           load_end)  # fmt: skip
    drained["load_send_per_s"] = {"jq": drain.send_rate(events, "s", load_end),
                                  "jf": drain.send_rate(events, "f", load_end)}  # fmt: skip
    result["drain"] = drained
    result["outages"] = checker.outages(events, 0.0, load_end, faults)
    result["outage_per_fault"] = checker.outage_per_fault(events, faults, load_end)
    result["send_failures"] = _count(events, "send", "info")
    result["valid"] = verdict.valid


def _missed_by(process: str) -> drain.Missing:
    """The acknowledged sends of the ``s`` senders that ``process`` has not received."""
    return lambda events: checker.undelivered(events, "s", process)


def _count(events: list[Event], f: str, type_: str) -> int:
    return sum(1 for e in events if e.f == f and e.type == type_)


# ---------------------------------------------------------------------------- outer: many runs
def one(
    seed: int, duration_s: float, kinds: list[str], out: Path, size: int = 3,
    clients: tuple[str, ...] = ("python",),
) -> dict[str, Any]:  # fmt: skip
    """Run ``seed`` in fresh namespaces with the ``clients``' workloads; its ``result.json`` (or a
    harness error)."""
    spares = 1 + nemesis.REPLACE_MAX if "replace" in kinds else int("membership" in kinds)
    spaces = netns.Namespaces(size + spares, prefix="gfl")
    run_out = out / str(seed)
    if run_out.exists():
        shutil.rmtree(run_out)
    run_out.mkdir(parents=True)
    try:
        spaces.create()
        spec = {
            "seed": seed, "duration_s": duration_s, "nemeses": kinds, "out": str(run_out),
            "clients": list(clients),
            "nodes": spaces.nodes,
            "addresses": [spaces.address(i) for i in range(1, len(spaces.nodes) + 1)],
            "ctl_address": spaces.ctl_address,
        }  # fmt: skip
        with (
            (run_out / "inner.log").open("ab") as log,
            netns.inner_process(spaces, "e2e.faults.runner", spec, log) as process,
            contextlib.suppress(subprocess.TimeoutExpired),
        ):
            process.wait(duration_s + RUN_MARGIN_S)
    finally:
        spaces.delete()
    path = run_out / "result.json"
    if not path.exists():
        return {"seed": seed, "error": "no result (the run timed out or crashed; see inner.log)"}
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def error_line(error: str) -> str:
    """The telling line of a traceback (gRPC errors end in a line of their own)."""
    lines = [line.strip() for line in error.strip().splitlines() if len(line.strip()) > 3]
    telling = [line for line in lines if "details" in line or "Error" in line]
    return (telling or lines or ["?"])[-1][:300]


def summary_line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"seed {r['seed']}: HARNESS ERROR {error_line(r['error'])}"
    fig = r["figures"]
    worst = max((w["s"] for w in r["outages"]), default=0.0)
    return (
        f"seed {r['seed']}: {'valid' if r['valid'] else 'INVALID'}; acked "
        f"{fig['jq_acknowledged']}+{fig['jf_acknowledged']}, lost {fig['jq_lost']}+"
        f"{fig['jf_lost']}, transactions {fig.get('tx_committed', 0)} committed + "
        f"{fig.get('tx_rolled_back', 0)} rolled back, longest outage {worst:.1f} s, faults "
        f"{', '.join(f['what'] for f in r['faults'])}"
        + _client_acks(fig)
        + ("" if r["valid"] else f"; violations: {r['violations'][:3]}")
    )


def _client_acks(figures: dict[str, Any]) -> str:
    shares = [(name, figures.get(f"jq_{name}_acknowledged")) for name in CLIENTS[1:]]
    return "".join(f"; {name} acked {n}" for name, n in shares if n is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None, help="first seed (random if absent)")
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--nemeses", default="all", help=f"comma-separated of {nemesis.ALL}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    workloads = f"comma-separated workloads of {CLIENTS} (python always runs)"
    parser.add_argument("--clients", default=",".join(CLIENTS), help=workloads)
    rewrite = "rewrite <out>/report.md from the runs' result.json files"
    parser.add_argument("--report-only", action="store_true", help=rewrite)
    parser.add_argument("--inner", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        sys.exit(inner(json.loads(args.inner)))
    if args.report_only:
        found = [json.loads(p.read_text()) for p in args.out.glob("*/result.json")]
        report.write(args.out, sorted(found, key=lambda r: int(r["seed"])))
        print(args.out / "report.md")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks clean up
    why = netns.available()
    if why is not None:
        print(f"e2e-faults {why}", file=sys.stderr)
        sys.exit(2)
    kinds = list(nemesis.ALL) if args.nemeses == "all" else args.nemeses.split(",")
    unknown = set(kinds) - set(nemesis.ALL)
    if unknown:
        parser.error(f"unknown nemeses {sorted(unknown)}")
    clients = tuple(dict.fromkeys(["python", *args.clients.split(",")]))
    if set(clients) - set(CLIENTS):
        parser.error(f"unknown clients {sorted(set(clients) - set(CLIENTS))}: {CLIENTS}")
    for name in clients[1:]:
        client_workload.prepare(name)  # Maven and npm need the network: before the namespaces
    first = args.seed if args.seed is not None else random.randrange(1, 1_000_000)
    print(f"e2e-faults: {args.runs} runs of {args.duration_s:.0f} s from seed {first} "
          f"(replay one: --seed S --runs 1); nemeses {','.join(kinds)}; clients "
          f"{','.join(clients)}", flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in range(first, first + args.runs):
        print(f"seed {seed}: running", flush=True)
        result = one(seed, args.duration_s, kinds, args.out, clients=clients)
        results.append(result)
        print(summary_line(result), flush=True)
        report.write(args.out, results)
    bad = [r["seed"] for r in results if not r.get("valid")]
    print(f"e2e-faults: {len(results) - len(bad)} of {len(results)} runs valid; "
          f"failed seeds {bad}; report {args.out / 'report.md'}")  # fmt: skip
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
