"""Checkers over one run's history, as Jepsen's queue and Kafka tests check theirs.

Safety (a run fails on any of them):

* **lost**: an acknowledged send (``ok``) whose message id is not stored on every member, or not
  at the queue offset its receipt named; split into *prefix*, *middle* and *postfix* by where
  it falls among the acknowledged sends that were kept, in acknowledgement order;
* **duplicated id**: one message id stored twice (a key stored twice with two ids comes from the
  client's own retries after an ``info`` and is counted, not failed);
* **unexpected**: a stored message no operation sent, or whose body is not its key;
* **offsets**: a queue whose offsets are not gapless from its first, or an acknowledged send
  whose offset is not above that of every send on its queue acknowledged before it began;
* **replicas**: members whose stored queues differ (commit logs are compared by the runner);
* **Pop**, per stored copy of a message (a revive writes a new copy to the retry topic): a copy
  acked twice (two ``ok`` acks), delivered again after an ``ok`` ack of it was answered, or
  delivered again while its lease was certainly live (the second receive answered before the
  first lease could end); a new copy after an answered ack of an earlier one is counted;
  FIFO: within a message group, first deliveries out of the stored order;
* **transactions**: a key whose half message and commit were acknowledged not stored exactly
  once, a key decided rollback stored or delivered, any key stored twice (an in-doubt commit,
  its answer lost, may be discarded after unanswered checks: counted). The outcome is decided
  before the half message is sent; the producer's checker answers the broker's checks with it
  (:class:`e2e.faults.workload.TxSender`);
* **terms**: two leaders in one term; a member's term going down; a member cut off from every
  peer whose term rose during the cut (pre-vote must keep it);
* **members**: the group the leader lists at the end is not exactly the members that should
  be there (a replaced member still listed, its successor missing), a change still in flight,
  or a replaced member's store still on disk.

Liveness (reported, never failed): every window longer than ``OUTAGE_S`` with no successful send,
with the faults it overlaps; acknowledged sends never delivered to the Pop consumer.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from e2e.faults.history import Event, Sample
from e2e.faults.nemesis import Fault
from e2e.faults.workload import CHANGED_INVISIBLE_S, INVISIBLE_S
from gannet.node.store.log.records import Message

OUTAGE_S = 1.0
CUT_OFF = ("leader-isolated", "leader-peers", "minority", "follower-cut")
"""Faults that leave one member with no peer (``halves`` too when its small side is one)."""
SAMPLE_SETTLE_S = 0.5
FRESH_SAMPLE_S = 1.0
"""A member's last sample before a cut stands for its term at the cut only this recent: the
sampler may not reach it for a while (it runs beside the client; seed 1301: no sample of any
member for 7.5 s, in which member 1 won term 5 on the majority side, was killed and restarted
into the next cut with term 5)."""
POP_MARGIN_S = 0.5


@dataclass
class Verdict:
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.violations


def _sends(events: list[Event], prefix: str) -> tuple[dict[str, int], list[Event], list[Event]]:
    invoked: dict[str, int] = defaultdict(int)
    oks: list[Event] = []
    invokes: dict[tuple[str, str], Event] = {}
    pairs: list[Event] = []
    for e in events:
        if e.f != "send" or not e.process.startswith(prefix):
            continue
        key = str(e.value["key"])
        if e.type == "invoke":
            invoked[key] += 1
            invokes[(e.process, key)] = e
        elif e.type == "ok":
            oks.append(e)
            pairs.append(invokes[(e.process, key)])
    return invoked, oks, pairs


def check_sends(
    verdict: Verdict, label: str, events: list[Event], prefix: str,
    stored: dict[int, dict[int, list[Message]]],
) -> None:  # fmt: skip
    """``stored``: member → queue → messages, as read after the run."""
    invoked, oks, invokes = _sends(events, prefix)
    reference: dict[int, list[Message]] | None = None
    for member, queues in sorted(stored.items()):
        flat = [(q, m.queue_offset, m.uniq_key) for q, ms in sorted(queues.items()) for m in ms]
        if reference is None:
            reference = queues
            ref_flat = flat
        elif flat != ref_flat:
            verdict.violations.append(f"{label}: member {member}'s queues differ from the first")
        by_id: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for q, messages in queues.items():
            expected = messages[0].queue_offset if messages else 0
            for m in messages:
                if m.queue_offset != expected:
                    verdict.violations.append(
                        f"{label}: member {member} queue {q}: offset {m.queue_offset} where "
                        f"{expected} was due"
                    )
                    expected = m.queue_offset
                expected += 1
                key = m.keys[0] if m.keys else ""
                if key not in invoked or m.body != key.encode():
                    verdict.violations.append(
                        f"{label}: member {member}: unexpected message {m.uniq_key} key {key!r}"
                    )
                by_id[m.uniq_key or ""].append((q, m.queue_offset))
        lost = [e for e in oks if int(e.value["offset"])
                not in [o for _, o in by_id.get(str(e.value["id"]), [])]]  # fmt: skip
        twice = [i for i, places in by_id.items() if len(places) > 1]
        if twice:
            verdict.violations.append(f"{label}: member {member}: ids stored twice {twice[:5]}")
        if lost:
            kept = [i for i, e in enumerate(oks) if e not in lost]
            first, last = (kept[0], kept[-1]) if kept else (len(oks), -1)
            parts = {"prefix": 0, "middle": 0, "postfix": 0}
            for e in lost:
                i = oks.index(e)
                parts["prefix" if i < first else "postfix" if i > last else "middle"] += 1
            verdict.violations.append(
                f"{label}: member {member}: {len(lost)} acknowledged sends lost {parts}, first "
                f"{[str(e.value['key']) for e in lost[:5]]}"
            )
            verdict.figures[f"{label}_lost"] = max(verdict.figures.get(f"{label}_lost", 0),
                                                   len(lost))  # fmt: skip
    keys_stored: dict[str, int] = defaultdict(int)
    for messages in (reference or {}).values():
        for m in messages:
            keys_stored[m.keys[0] if m.keys else ""] += 1
    verdict.figures[f"{label}_invoked"] = sum(invoked.values())
    verdict.figures[f"{label}_acknowledged"] = len(oks)
    verdict.figures[f"{label}_stored"] = sum(keys_stored.values())
    verdict.figures[f"{label}_retry_duplicates"] = sum(n - 1 for n in keys_stored.values() if n > 1)
    verdict.figures.setdefault(f"{label}_lost", 0)
    queue_of = {m.uniq_key: q for q, ms in (reference or {}).items() for m in ms}
    _check_real_time_offsets(verdict, label, oks, invokes, queue_of)


def _check_real_time_offsets(
    verdict: Verdict, label: str, oks: list[Event], invokes: list[Event],
    queue_of: dict[str | None, int],
) -> None:  # fmt: skip
    per_queue: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for ok, invoke in zip(oks, invokes, strict=True):
        queue = queue_of.get(str(ok.value["id"]))
        if queue is None:
            continue  # not in any queue: reported as lost
        per_queue[queue].append((invoke.t, ok.t, int(ok.value["offset"])))
    for queue, ops in per_queue.items():
        by_ok = sorted(ops, key=lambda o: o[1])
        ok_times = [o[1] for o in by_ok]
        best = []
        running = -1
        for o in by_ok:
            running = max(running, o[2])
            best.append(running)
        for invoke_t, _, offset in ops:
            n = bisect.bisect_left(ok_times, invoke_t)
            if n and best[n - 1] >= offset:
                verdict.violations.append(
                    f"{label}: queue {queue}: offset {offset} acknowledged after offset "
                    f"{best[n - 1]} was, for a send begun later"
                )
                return


def check_pop(verdict: Verdict, label: str, events: list[Event], process: str) -> None:
    """Pop leases, per stored copy of a message (``copy``: topic flag, queue and offset of the
    receipt handle; a revive writes a new copy, with the same message id, to the retry topic).
    A copy acked twice, delivered again after an answered ack of that copy, or delivered again
    during its certainly live lease fails the run. A new copy delivered after an answered ack of
    an earlier copy of the same id is counted (``<label>_copies_after_ack``), not failed, when it
    may come from a copy no ack reached: a revive adds one delivery attempt, so its source is a
    copy with one attempt less, and revive is at least once across a leader change
    (docs/architecture.md). It fails when every known copy with one attempt less had an
    answered ack and no receive of the consumer failed since the id's first delivery (a pop
    whose answer was lost makes a copy the history does not show).

    An ack that follows a change of invisible time of the same copy answered ``info`` (its
    outcome unknown) names the old receipt handle: if the change took effect, the copy's lease
    lives on under a new checkpoint the ack does not reach (RocketMQ's rule: a changed handle
    is replaced), and the copy is revived when that lease ends (fault seed 1002's replay: the
    change's records are in the log, its answer was lost). Such an ack does not make a new
    copy's source acked (counted as ``<label>_acks_after_unknown_change``); an ack after a
    change answered OK still does."""
    invoke_at: dict[str, float] = {}
    acks_ok: dict[str, list[float]] = defaultdict(list)
    id_acks: dict[str, list[tuple[float, int]]] = defaultdict(list)  # id -> (ack answered, attempt)
    attempts: dict[str, int] = {}
    first_seen: dict[str, float] = {}
    receive_failed: list[float] = []
    leases: dict[str, float] = {}
    delivered: dict[str, int] = defaultdict(int)
    copies: dict[str, set[str]] = defaultdict(set)
    change_unknown: set[str] = set()  # copies whose last change was answered ``info``
    acks_after_unknown: set[str] = set()  # copies acked with a handle such a change may replace
    bad_redelivered: list[str] = []
    bad_live: list[str] = []
    after_ack: list[str] = []
    for e in events:
        if e.process != process:
            continue
        copy = f"{e.value.get('id', '')}@{e.value.get('copy', '')}"
        key = f"{e.f}:{copy}"
        if e.type == "invoke":
            invoke_at[key] = e.t
            if e.f == "receive":
                invoke_at["receive"] = e.t
            continue
        if e.type != "ok":
            if e.f == "receive":
                receive_failed.append(e.t)
            elif e.f == "change" and e.type == "info":
                change_unknown.add(copy)
            continue
        if e.f == "receive":
            begun = invoke_at["receive"]
            for m in e.value["messages"]:
                one = f"{m['id']}@{m.get('copy', '')}"
                attempts[one] = int(m.get("attempt", 0))
                if acks_ok[one] and acks_ok[one][0] < begun:
                    bad_redelivered.append(one)
                elif one not in copies[m["id"]] and any(t < begun for t, _ in id_acks[m["id"]]):
                    sources = [c for c in copies[m["id"]] if attempts[c] == attempts[one] - 1]
                    unseen = any(first_seen[m["id"]] <= t < begun for t in receive_failed)
                    from_acked = sources and all(
                        acks_ok[c] and acks_ok[c][0] < begun and c not in acks_after_unknown
                        for c in sources
                    )
                    (bad_redelivered if from_acked and not unseen else after_ack).append(one)
                first_seen.setdefault(m["id"], begun)
                live = one in leases and e.t < leases[one] - POP_MARGIN_S
                if live and not acks_ok[one]:
                    bad_live.append(one)
                delivered[m["id"]] += 1
                copies[m["id"]].add(one)
                leases[one] = begun + INVISIBLE_S
        elif e.f == "ack":
            acks_ok[copy].append(e.t)
            if copy in change_unknown:
                acks_after_unknown.add(copy)
            id_acks[str(e.value["id"])].append((e.t, attempts.get(copy, 0)))
        elif e.f == "change":
            change_unknown.discard(copy)
            leases[copy] = max(leases.get(copy, 0.0), invoke_at[key] + CHANGED_INVISIBLE_S)
    twice = [i for i, times in acks_ok.items() if len(times) > 1]
    for what, found in (("acked twice", twice), ("delivered after its ack was answered",
                        bad_redelivered), ("delivered during a live lease", bad_live)):  # fmt: skip
        if found:
            verdict.violations.append(f"{label}: {len(found)} copies {what}: {found[:5]}")
    verdict.figures[f"{label}_delivered_ids"] = len(delivered)
    verdict.figures[f"{label}_redeliveries"] = sum(n - 1 for n in delivered.values())
    verdict.figures[f"{label}_acked"] = len({i.split("@")[0] for i in acks_ok})
    verdict.figures[f"{label}_copies"] = sum(len(c) for c in copies.values())
    verdict.figures[f"{label}_copies_after_ack"] = len(after_ack)
    verdict.figures[f"{label}_acks_after_unknown_change"] = len(acks_after_unknown)
    if after_ack:
        verdict.figures[f"{label}_copies_after_ack_first"] = after_ack[:5]


def client_figures(verdict: Verdict, label: str, events: list[Event], process: str) -> None:
    """One client's share of the sends checked with others (``check_sends`` of their prefix):
    its invoked and acknowledged sends (a loss among them is a loss of the whole check)."""
    mine = [e for e in events if e.f == "send" and e.process == process]
    verdict.figures[f"{label}_invoked"] = sum(1 for e in mine if e.type == "invoke")
    verdict.figures[f"{label}_acknowledged"] = sum(1 for e in mine if e.type == "ok")


def undelivered(events: list[Event], sender_prefix: str, process: str) -> list[str]:
    """Acknowledged sends' ids never received by ``process``."""
    sent = {
        str(e.value["id"])
        for e in events
        if e.f == "send" and e.type == "ok" and e.process.startswith(sender_prefix)
    }
    got = {
        str(m["id"])
        for e in events
        if e.process == process and e.f == "receive" and e.type == "ok"
        for m in e.value["messages"]
    }
    return sorted(sent - got)


def _decided(events: list[Event], process: str) -> tuple[dict[str, bool], set[str], set[str]]:
    """Transactions of ``process``: key -> commit decided, the keys whose half message was
    acknowledged, and those whose commit was acknowledged."""
    decided: dict[str, bool] = {}
    acked: set[str] = set()
    commit_ok: set[str] = set()
    for e in events:
        if e.process == process and e.f == "half":
            if e.type == "invoke":
                decided[str(e.value["key"])] = bool(e.value["commit"])
            elif e.type == "ok":
                acked.add(str(e.value["key"]))
        elif e.process == process and e.f == "commit" and e.type == "ok":
            commit_ok.add(str(e.value["key"]))
    return decided, acked, commit_ok


def _received_keys(events: list[Event], process: str) -> set[str]:
    return {
        str(m["key"])
        for e in events
        if e.process == process and e.f == "receive" and e.type == "ok"
        for m in e.value["messages"]
    }


def check_transactions(
    verdict: Verdict, events: list[Event], process: str, popper: str,
    stored: dict[int, dict[int, list[Message]]],
) -> None:  # fmt: skip
    """``stored``: member → queue → messages of the transactional topic, read after the run.

    Committed: the commit was acknowledged; it must be stored exactly once. A transaction whose
    commit answer was lost (``info``) is in doubt: the broker asks the producer's checker, and
    discards the half message after ``--transaction-check-max`` checks nobody answered (as
    RocketMQ does), so it is stored at most once; in-doubt commits not stored are counted
    (``tx_in_doubt_not_stored``) with the checks that reached the producer (``tx_checks``)."""
    decided, acked, commit_ok = _decided(events, process)
    committed = commit_ok & acked
    in_doubt = {k for k in acked if decided[k]} - committed
    for member, queues in sorted(stored.items()):
        count: dict[str, int] = defaultdict(int)
        for messages in queues.values():
            for m in messages:
                count[m.body.decode(errors="replace")] += 1
        missing = sorted(committed - set(count))
        verdict.figures["tx_in_doubt_not_stored"] = max(
            verdict.figures.get("tx_in_doubt_not_stored", 0), len(in_doubt - set(count))
        )
        twice = sorted(k for k, n in count.items() if n > 1)
        rolled = sorted(k for k in count if decided.get(k) is False)
        unexpected = sorted(k for k in count if k not in decided)
        for what, found in (("committed transactions not stored", missing),
                            ("transactions stored twice", twice),
                            ("rolled-back transactions stored", rolled),
                            ("unexpected transactional messages", unexpected)):  # fmt: skip
            if found:
                verdict.violations.append(f"tx: member {member}: {len(found)} {what}: {found[:5]}")
    delivered_rolled = sorted(k for k in _received_keys(events, popper) if decided.get(k) is False)
    if delivered_rolled:
        verdict.violations.append(
            f"tx: {len(delivered_rolled)} rolled-back transactions delivered: "
            f"{delivered_rolled[:5]}"
        )
    ends: dict[str, int] = defaultdict(int)
    for e in events:
        if e.process == process and e.f in ("commit", "rollback") and e.type in ("ok", "info"):
            ends[f"{e.f}_{e.type}"] += 1
    verdict.figures["tx_transactions"] = len(decided)
    verdict.figures["tx_half_acknowledged"] = len(acked)
    verdict.figures["tx_committed"] = len(committed)
    verdict.figures["tx_in_doubt"] = len(in_doubt)
    verdict.figures["tx_rolled_back"] = len(acked) - len(committed) - len(in_doubt)
    verdict.figures["tx_checks"] = sum(1 for e in events if e.process == process and e.f == "check")
    verdict.figures["tx_ends"] = dict(ends)


def tx_undelivered(events: list[Event], process: str, popper: str) -> list[str]:
    """Keys of committed transactions (commit acknowledged) never received by ``popper``."""
    _, acked, commit_ok = _decided(events, process)
    return sorted((acked & commit_ok) - _received_keys(events, popper))


def check_fifo(
    verdict: Verdict, events: list[Event], process: str, stored: dict[int, list[Message]]
) -> None:
    position: dict[str, tuple[str, int, int]] = {}
    for q, messages in stored.items():
        for m in messages:
            group = m.properties.get("__SHARDINGKEY", "")
            position[m.uniq_key or ""] = (group, q, m.queue_offset)
    last: dict[str, tuple[int, int]] = {}
    seen: set[str] = set()
    inversions = []
    for e in events:
        if e.process != process or e.f != "receive" or e.type != "ok":
            continue
        for m in e.value["messages"]:
            message_id = str(m["id"])
            if message_id in seen or message_id not in position:
                continue
            seen.add(message_id)
            group, q, offset = position[message_id]
            if group in last and last[group] > (q, offset):
                inversions.append(f"{group}: {last[group]} then {(q, offset)}")
            last[group] = max(last.get(group, (q, offset)), (q, offset))
    if inversions:
        verdict.violations.append(f"fifo: {len(inversions)} out of order: {inversions[:3]}")
    verdict.figures["fifo_groups"] = len(last)


def check_members(
    verdict: Verdict, members: list[int], listed: list[int], in_flight: bool,
    store_gone: dict[int, bool],
) -> None:  # fmt: skip
    """``members``: the nodes that should form the group at the end (the replaced ones'
    successors included); ``listed``: the leader's ``ListMembers``; ``store_gone``: each
    replaced node -> whether its store is gone."""
    if listed != sorted(members):
        verdict.violations.append(f"members: the leader lists {listed}, expected {members}")
    if in_flight:
        verdict.violations.append("members: a membership change still in flight at the end")
    kept = sorted(i for i, gone in store_gone.items() if not gone)
    if kept:
        verdict.violations.append(f"members: replaced members' stores still on disk: {kept}")
    verdict.figures["members_replaced"] = len(store_gone)


def check_terms(verdict: Verdict, samples: list[Sample], faults: list[Fault],
                started: list[Event]) -> None:  # fmt: skip
    leaders: dict[int, set[int]] = defaultdict(set)
    last_term: dict[int, int] = {}
    for s in samples:
        if s.role == "leader":
            leaders[s.term].add(s.node)
        if s.term < last_term.get(s.node, 0):
            verdict.violations.append(f"terms: member {s.node} went from term "
                                      f"{last_term[s.node]} to {s.term}")  # fmt: skip
        last_term[s.node] = max(s.term, last_term.get(s.node, 0))
    split = {t: sorted(n) for t, n in leaders.items() if len(n) > 1}
    if split:
        verdict.violations.append(f"terms: two leaders in one term {split}")
    verdict.figures["max_term"] = max((s.term for s in samples), default=0)
    verdict.figures["elections"] = len(leaders)
    inflated = []
    unsampled = 0
    unmatched = list(faults)
    pairs = []
    for start in started:  # a fault that could not be applied has no start event
        fault = next((f for f in unmatched if f.describe() == start.value.get("fault")), None)
        if fault is not None:
            unmatched.remove(fault)
            pairs.append((fault, start))
    for fault, start in pairs:
        lonely = int(start.value.get("node", 0))
        if fault.kind == "halves" and len(fault.params["small"]) == 1:
            lonely = fault.params["small"][0]
        if (fault.kind not in CUT_OFF and fault.kind != "halves") or not lonely:
            continue
        before = [s.term for s in samples if s.node == lonely
                  and start.t - FRESH_SAMPLE_S <= s.t <= start.t]  # fmt: skip
        during = [s.term for s in samples if s.node == lonely
                  and start.t + SAMPLE_SETTLE_S <= s.t <= fault.stop]  # fmt: skip
        if not during:
            continue
        # Its term at the cut: a fresh sample, else the first one within the cut (then only a
        # rise during the cut counts).
        at_cut = before[-1] if before else during[0]
        if not before:
            unsampled += 1
        # A term it is seen in with a known leader (itself or another) is no inflation, and
        # nothing up to it is: a term it leads it won with a majority's votes, which it cannot
        # gather from its side of the cut, so it held that term when the cut began (seed 1503:
        # member 3 won term 2 in the 0.19 s between its last sample and the `leader-peers`
        # cut); a term it follows came from that leader's messages, sent before the cut (seed
        # 1550: member 2 voted member 1 into term 3 and acknowledged its first append in the
        # 0.1 s between its last sample and the `minority` cut, then went pre-candidate in term
        # 3) or by a member the cut left out (seed 1439: a fourth member added by `membership`
        # before the cut). A rise counts only above every such term: its own campaigns.
        known = [s.term for s in samples if s.node == lonely and s.leader != 0
                 and s.role in ("leader", "follower") and start.t <= s.t <= fault.stop]  # fmt: skip
        at_cut = max([at_cut, *known])
        if max(during) > at_cut:
            inflated.append(f"member {lonely} term {at_cut}->{max(during)} in {fault.kind}")
    verdict.figures["cuts_without_a_fresh_sample"] = unsampled
    if inflated:
        verdict.violations.append(f"terms: a cut-off member's term rose: {inflated}")


def outages(
    events: list[Event], begin: float, end: float, faults: list[Fault]
) -> list[dict[str, Any]]:
    """Windows longer than ``OUTAGE_S`` with no successful send, with overlapping faults."""
    times = sorted(e.t for e in events if e.f == "send" and e.type == "ok")
    marks = [begin, *(t for t in times if begin <= t <= end), end]
    windows = []
    for a, b in itertools.pairwise(marks):
        if b - a > OUTAGE_S:
            during = [f.describe() for f in faults if f.start < b and f.stop + 2 > a]
            windows.append({"from": round(a, 2), "to": round(b, 2), "s": round(b - a, 2),
                            "faults": during})  # fmt: skip
    return windows


def outage_per_fault(events: list[Event], faults: list[Fault], end: float) -> list[float]:
    """For each fault, the longest time without a successful send that overlaps it."""
    times = sorted(e.t for e in events if e.f == "send" and e.type == "ok")
    out = []
    for f in faults:
        lo = bisect.bisect_left(times, f.start)
        marks = [times[lo - 1] if lo else f.start]
        marks += [t for t in times[lo:] if t <= f.stop]
        after = bisect.bisect_right(times, f.stop)
        marks.append(times[after] if after < len(times) else end)
        out.append(round(max(b - a for a, b in itertools.pairwise(marks)), 2))
    return out
