"""The Markdown report of many runs, and a timeline picture per failed run.

``report.md`` reads as a Jepsen analysis: the faults, the workload, what was checked, the
results per nemesis (faults applied, longest outage overlapping each) and per run (seed, figures,
violations). ``timeline-<seed>.png`` shows, for a run: the faults as bands, successful and failed
sends, Pop acks, and each member's term and leadership from the monitor's samples.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from e2e.faults import drain, history

HEADER = """# Gannet under faults: `make e2e-faults`

Three `gannet broker run --flush sync` processes, each in its own network namespace behind a
veth on a bridge; the harness (client and nemesis) in a fourth namespace. Faults come from a
seeded schedule (replay one run: `python -m e2e.faults.runner --seed S`): partitions (`halves`,
`leader-isolated`, `leader-peers`, `bridge`, `minority`) and random packet `loss` and `flap`ping
links by iptables in the members' namespaces, `follower-cut`; `pause` (SIGSTOP/SIGCONT) and
`kill` (SIGKILL, restart) of the leader, a random member or a follower, `disk-full` (a
member's tmpfs filled to 95 %), `clock` (a member's wall clock skewed or strobed),
`membership` (a fourth member added and removed), `lose-unfsynced` (SIGKILL, then every
change the member had not fsynced dropped by a FUSE layer, restart) and `replace` (a member
replaced under a new node id by a brand-new node in a namespace of its own: its disk lost —
killed, store deleted, removed, then the new node added — or the new node added first and the
old one removed and deleted), overlapping the network faults. Nemeses are
described in `e2e/faults/nemesis.py`; what the runs found, with the seeds, in
docs/architecture.md (section "Faults as Jepsen injects them").

Workload: the official Python client (rocketmq-python-client), every member's endpoint given:
two producers on a normal topic (4 queues) and one on a FIFO topic in three message groups, each
~15 sends/s with key = body, a raised send retried twice with its key; a SimpleConsumer (Pop) on
each topic receiving, changing the invisible time of a fifth, acking each; transactions on a
TRANSACTION topic (~8/s: a half message, then commit or rollback as drawn from the seed, the
producer's checker answering the broker's checks with the same outcome) and a SimpleConsumer on
it. With `--clients python,java,node` (`make e2e-faults`' default) the official Java client
(rocketmq-client-java 5.0.8, one JVM) and Node.js client (rocketmq-client-nodejs 1.0.8, through
a Service-like proxy in front of every member: it dials one address) each add a sender on the
normal topic (~15/s, key = body, retried twice with its key) and a SimpleConsumer in a group of
their own (receiving every message of the topic: receive, change a fifth, ack); their sends are
checked with the Python senders', their Pop copies as the Python consumer's.

Checked after the faults heal (module docstring of `e2e/faults/checker.py`): acknowledged sends
lost (prefix/middle/postfix), one message id stored twice, unexpected messages, gapless queue
offsets and real-time order of acknowledged offsets, replicas' queues and commit logs
byte-identical up to the commit offset, `gannet store verify` clean on every member; Pop, per
stored copy of a message (a revive writes a new copy, same id, to the retry topic): acked twice,
delivered after its ack was answered (or a copy revived from an acked one), delivered during a
live lease, FIFO order within a group; transactions: committed ones stored exactly once,
rolled-back ones never stored or delivered; terms: one leader per term, terms never down, no
term rise on a member cut off from every peer (pre-vote); after a `replace`, the group the
leader lists is exactly the members kept (the replaced ones gone with their stores, their
successors checked like every member; commit logs compared from the latest log start).
Availability (reported, not failed): windows over 1 s without a successful send.

Drain (`e2e/faults/drain.py`): after the heal the consumers get as long as they progress (a
consumer that received none of what it misses for 30 s is stuck; at most 240 s); "undelivered"
counts the acknowledged sends a consumer had not received by the drain's end, with each such
consumer, how many it missed, `slow` (still receiving them) or `stuck`, and its last receive
(seconds since the run's start). `result.json`'s `drain` has every consumer's figures.
"""


CATEGORIES = (
    ("acknowledged send lost", "acknowledged sends lost"),
    ("one message id stored twice", "stored twice"),
    ("unexpected message", "unexpected message"),
    ("queue offsets (gap or real-time order)", "offset"),
    ("replicas' queues or commit logs differ", "differ"),
    ("store verify not clean", "store verify"),
    ("Pop: acked twice", "acked twice"),
    ("Pop: delivered after its ack was answered", "after its ack"),
    ("Pop: delivered during a live lease", "live lease"),
    ("FIFO order within a group", "out of order"),
    ("transactions (committed not once, rolled back seen)", "tx:"),
    ("terms (two leaders, term down, cut-off term rose)", "terms:"),
    ("members at the end (after a replacement)", "members:"),
)


def write(out: Path, results: list[dict[str, Any]]) -> None:
    lines = [HEADER, "## Results", ""]
    done = [r for r in results if "error" not in r]
    errors = [r for r in results if "error" in r]
    invalid = [r for r in done if not r["valid"]]
    lost = sum(r["figures"]["jq_lost"] + r["figures"]["jf_lost"] for r in done)
    acked = sum(r["figures"]["jq_acknowledged"] + r["figures"]["jf_acknowledged"] for r in done)
    retries = sum(
        r["figures"]["jq_retry_duplicates"] + r["figures"]["jf_retry_duplicates"] for r in done
    )
    lists = sorted({",".join(r.get("nemeses", [])) for r in results})
    lines += [
        "Replay a run: `python -m e2e.faults.runner --seed S --nemeses N`, N the run's list "
        "(the schedule draws from the list in its order): "
        + "; ".join(f"`{n}` (seeds {_seeds_of(results, n)})" for n in lists),
        "",
        f"- runs: {len(results)} ({len(done)} checked, {len(errors)} harness errors); "
        f"seeds {', '.join(str(r['seed']) for r in results)}",
        f"- valid: {len(done) - len(invalid)} of {len(done)}; failed seeds: "
        f"{[r['seed'] for r in invalid] or 'none'}",
        f"- acknowledged sends {acked}, lost {lost}, retry duplicates (a key stored twice after "
        f"an unknown outcome, allowed) {retries}",
        f"- transactions: {_total(done, 'tx_committed')} committed, "
        f"{_total(done, 'tx_rolled_back')} rolled back (half message acknowledged); Pop copies "
        "revived again from an unacked original after an ack of another copy (at least once, "
        f"counted): {_total(done, 'pop_copies_after_ack')} + transactional "
        f"{_total(done, 'tx_pop_copies_after_ack')} + FIFO "
        f"{_total(done, 'fifo_pop_copies_after_ack')} + Java "
        f"{_total(done, 'java_pop_copies_after_ack')} + Node.js "
        f"{_total(done, 'node_pop_copies_after_ack')}",
        f"- of the acknowledged sends, by the Java client {_total(done, 'jq_java_acknowledged')} "
        f"(runs with it: {sum(1 for r in done if 'jq_java_acknowledged' in r['figures'])}), by "
        f"the Node.js client {_total(done, 'jq_node_acknowledged')} (runs with it: "
        f"{sum(1 for r in done if 'jq_node_acknowledged' in r['figures'])}); messages acked by "
        f"their consumers: Java {_total(done, 'java_pop_acked')}, Node.js "
        f"{_total(done, 'node_pop_acked')}",
        "",
        "### Violations by kind (runs in which each was found)",
        "",
        "| violation | runs | seeds |",
        "| --- | --- | --- |",
    ]
    for name, needle in CATEGORIES:
        seeds = [r["seed"] for r in done if any(needle in v for v in r["violations"])]
        lines.append(f"| {name} | {len(seeds)} | {', '.join(map(str, seeds[:12]))} |")
    lines += [
        "",
        "### Per nemesis",
        "",
        "| nemesis | faults | longest outage overlapping it (s): median | max | seeds of the max |",
        "| --- | --- | --- | --- | --- |",
    ]
    per: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in done:
        for fault, outage in zip(r["faults"], r["outage_per_fault"], strict=True):
            per[fault["kind"]].append((outage, r["seed"]))
    for kind, values in sorted(per.items()):
        top = max(values)
        lines.append(
            f"| {kind} | {len(values)} | {statistics.median(v for v, _ in values):.2f} | "
            f"{top[0]:.2f} | {top[1]} |"
        )
    lines += [
        "",
        "### Runs",
        "",
        "| seed | valid | acked | of them Java / Node.js | lost | retry dup. | Pop redeliveries | "
        "undelivered | longest outage (s) | faults | violations |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if "error" in r:
            error = runner_error_line(r["error"])
            lines.append(f"| {r['seed']} | error | | | | | | | | | {error} |")
            continue
        fig = r["figures"]
        worst = max((w["s"] for w in r["outages"]), default=0.0)
        faults = "; ".join(f"{f['start']:.0f}-{f['stop']:.0f} s {f['what']}" for f in r["faults"])
        lines.append(
            f"| {r['seed']} | {'yes' if r['valid'] else '**no**'} | "
            f"{fig['jq_acknowledged'] + fig['jf_acknowledged']} | "
            f"{fig.get('jq_java_acknowledged', '-')} / {fig.get('jq_node_acknowledged', '-')} | "
            f"{fig['jq_lost'] + fig['jf_lost']} | "
            f"{fig['jq_retry_duplicates'] + fig['jf_retry_duplicates']} | "
            f"{fig['pop_redeliveries']} | {_undelivered(r)} | {worst:.2f} | "
            f"{faults} | {'<br>'.join(r['violations'])[:600]} |"
        )
    lines += ["", "### Outage windows over 1 s", ""]
    for r in done:
        for w in r["outages"]:
            lines.append(
                f"- seed {r['seed']}: {w['from']:.1f}-{w['to']:.1f} s ({w['s']:.1f} s) during "
                f"{', '.join(w['faults']) or 'no fault'}"
            )
    for r in invalid:
        with_picture = timeline(out / str(r["seed"]), r)
        if with_picture is not None:
            lines += ["", f"![seed {r['seed']}]({with_picture.relative_to(out)})"]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def _undelivered(r: dict[str, Any]) -> str:
    """The run's undelivered sends, and which consumers missed them (slow or stuck, when its
    last receive was: :mod:`e2e.faults.drain`) with how long the drain lasted."""
    total = sum(r["undelivered"].values())
    if "drain" not in r:  # runs before the drain was measured
        return str(total)
    late = drain.describe(r["drain"])
    return f"{total} ({late}; drain {r['drain']['s']:.0f} s)" if late else str(total)


def _total(results: list[dict[str, Any]], figure: str) -> int:
    return sum(int(r["figures"].get(figure, 0)) for r in results)


def runner_error_line(error: str) -> str:
    lines = [line.strip() for line in error.strip().splitlines() if len(line.strip()) > 3]
    telling = [line for line in lines if "details" in line or "Error" in line]
    return (telling or lines or ["?"])[-1][:200].replace("|", "/")


def _seeds_of(results: list[dict[str, Any]], nemeses: str) -> str:
    seeds = [int(r["seed"]) for r in results if ",".join(r.get("nemeses", [])) == nemeses]
    return f"{min(seeds)}-{max(seeds)}" if seeds else "none"


def timeline(run_dir: Path, result: dict[str, Any]) -> Path | None:
    """``timeline-<seed>.png`` of a run (None when its history is missing)."""
    import matplotlib  # noqa: PLC0415  (drawn only when a run failed)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    if not (run_dir / "history.jsonl").exists():
        return None
    events, samples = history.load(run_dir)
    figure, (ax_ops, ax_term) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    for n, fault in enumerate(result["faults"]):
        for ax in (ax_ops, ax_term):
            ax.axvspan(fault["start"], fault["stop"], alpha=0.15, color=f"C{n % 10}")
        ax_ops.text(fault["start"], 3.3, fault["what"], fontsize=6, rotation=20)
    rows = {"ok send": 0, "info send": 1, "ok ack": 2}
    for label, row in rows.items():
        type_, f = label.split()
        times = [e.t for e in events if e.type == type_ and e.f == f]
        ax_ops.plot(times, [row] * len(times), "|", markersize=8)
    ax_ops.set_yticks(list(rows.values()), list(rows))
    ax_ops.set_ylim(-0.5, 4)
    ax_ops.set_title(f"seed {result['seed']}: {'; '.join(result.get('violations', []))[:150]}",
                     fontsize=8)  # fmt: skip
    for node in sorted({s.node for s in samples}):
        mine = [s for s in samples if s.node == node]
        ax_term.plot([s.t for s in mine], [s.term for s in mine], ".", markersize=2,
                     label=f"member {node} term")  # fmt: skip
        leads = [s for s in mine if s.role == "leader"]
        ax_term.plot([s.t for s in leads], [s.term for s in leads], "s", markersize=4,
                     color=f"C{node}", alpha=0.4)  # fmt: skip
    ax_term.set_xlabel("seconds since the run's start (squares: leading)")
    ax_term.legend(fontsize=7)
    path = run_dir.parent / f"timeline-{result['seed']}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
