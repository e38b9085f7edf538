"""The command language of the Raft transcript tests (``tests/raft/testdata/*.txt``).

Called by ``tests/raft/test_transcripts.py``: each command runs against a ``raft_sim.Cluster``
(with fixed election jitter, so runs are reproducible) and returns the text the transcript
expects. Every Ready a node produces is printed before it is executed, one line per item, so a
transcript reads as a narrated trace of the driver loop. Commands:

    add-nodes N [election=10] [heartbeat=1] [append-max=4096] [inflight-msgs=64]
              [inflight-bytes=8388608] [pre-vote=true] [check-quorum=true]
    campaign N                 N's election timer fires now
    propose N BYTES            N is asked to append one record of BYTES bytes
    tick N|all [xK]            K ticks (default 1)
    deliver-msgs [to=A,B] [drop=A,B]
                               deliver (or drop) the messages in flight now, oldest first
    sync N|all                 the node's disk syncs; the core learns the durable offset
    stabilize                  sync and deliver until nothing is in flight
    partition 1 | 2 3          only nodes of one group talk; heal ends it
    crash N / restart N        crash loses the bytes written since the last sync
    transfer A -> B            leadership transfer
    raft-state                 one line per node
    raft-log N                 the records on N's disk
    status N                   the leader's view of its followers
"""

from __future__ import annotations

from gannet.node.raft.messages import NodeId
from gannet.node.raft.ready import Ready
from gannet.node.testing.raft_sim import NOOP_RECORD_ID, Cluster, describe

STABILIZE_ROUNDS_MAX = 100
TIMING_KEYS = {
    "election": "election_timeout_ticks",
    "heartbeat": "heartbeat_interval_ticks",
    "append-max": "append_bytes_max",
    "inflight-msgs": "inflight_messages_max",
    "inflight-bytes": "inflight_bytes_max",
    "pre-vote": "pre_vote",
    "check-quorum": "check_quorum",
}


class ScriptError(ValueError):
    """A transcript command is malformed."""


def describe_ready(node_id: NodeId, ready: Ready) -> list[str]:
    lines: list[str] = []
    if ready.soft_state is not None:
        soft = ready.soft_state
        lines.append(f"n{node_id}: {soft.role.value} term={soft.term} leader={soft.leader_id}")
    if ready.hard_state is not None:
        hard = ready.hard_state
        lines.append(f"n{node_id}: persist term={hard.term} vote={hard.vote}")
    if ready.truncate_to is not None:
        lines.append(f"n{node_id}: truncate to {ready.truncate_to}")
    for entry in ready.entries:
        kind = " noop" if entry.noop else ""
        lines.append(
            f"n{node_id}: append [{entry.start_offset},{entry.end_offset})@t{entry.term}{kind}"
        )
    if ready.committed_offset is not None:
        lines.append(f"n{node_id}: commit {ready.committed_offset}")
    lines.extend(f"  {describe(message)}" for message in ready.messages)
    return lines


class Script:
    """Runs transcript commands one by one. Invariant: ``cluster`` exists after add-nodes."""

    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        self._out: list[str] = []
        self._next_record_id = 1

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise ScriptError("add-nodes first")
        return self._cluster

    def run(self, line: str) -> str:
        words = line.split()
        if not words:
            raise ScriptError("empty command")
        self._out = []
        handler = getattr(self, "cmd_" + words[0].replace("-", "_"), None)
        if handler is None:
            raise ScriptError(f"unknown command {words[0]!r}")
        handler(words[1:])
        return "\n".join(self._out) if self._out else "ok"

    def _observe(self, node_id: NodeId, ready: Ready) -> None:
        self._out.extend(describe_ready(node_id, ready))

    def _nodes(self, word: str) -> list[NodeId]:
        if word == "all":
            return self.cluster.up_ids()
        return [NodeId(int(part)) for part in word.split(",") if part]

    # -------------------------------------------------------------- commands

    def cmd_add_nodes(self, args: list[str]) -> None:
        timing: dict[str, int] = {}
        for arg in args[1:]:
            key, _, value = arg.partition("=")
            if key not in TIMING_KEYS:
                raise ScriptError(f"unknown option {key!r}")
            timing[TIMING_KEYS[key]] = (
                int(value == "true") if value in ("true", "false") else int(value)
            )
        self._cluster = Cluster(
            int(args[0]), timing=timing, observer=self._observe, fixed_jitter=True
        )

    def cmd_campaign(self, args: list[str]) -> None:
        node_id = NodeId(int(args[0]))
        self.cluster.core(node_id).campaign()
        self.cluster.drain(node_id)

    def cmd_propose(self, args: list[str]) -> None:
        record_id = self._next_record_id
        self._next_record_id += 1
        outcome = self.cluster.propose(NodeId(int(args[0])), record_id, int(args[1]))
        self._out.insert(0, f"record {record_id}: {outcome}")

    def cmd_tick(self, args: list[str]) -> None:
        times = int(args[1].lstrip("x")) if len(args) > 1 else 1
        for _ in range(times):
            for node_id in self._nodes(args[0]):
                self.cluster.tick(node_id)

    def cmd_deliver_msgs(self, args: list[str]) -> None:
        options = dict(arg.partition("=")[::2] for arg in args)
        to = set(self._nodes(options["to"])) if "to" in options else None
        drop = set(self._nodes(options.get("drop", "")))
        batch, kept = list(self.cluster.in_flight), []
        self.cluster.in_flight.clear()
        for message in batch:
            if to is not None and message.target not in to and message.target not in drop:
                kept.append(message)
            elif message.target in drop:
                self._out.append(f"dropped {describe(message)}")
            else:
                reached = self.cluster.connected(message.sender, message.target) and (
                    self.cluster.nodes[message.target].up
                )
                self._out.append(f"{'>' if reached else 'lost'} {describe(message)}")
                self.cluster.deliver(message)
        self.cluster.in_flight[:0] = kept

    def cmd_sync(self, args: list[str]) -> None:
        for node_id in self._nodes(args[0]):
            self.cluster.sync(node_id)

    def cmd_stabilize(self, args: list[str]) -> None:
        for _ in range(STABILIZE_ROUNDS_MAX):
            for node_id in self.cluster.up_ids():
                if self.cluster.nodes[node_id].log.synced_offset < (
                    self.cluster.nodes[node_id].log.end_offset
                ):
                    self._out.append(f"n{node_id}: synced")
                    self.cluster.sync(node_id)
            if not self.cluster.in_flight:
                return
            self.cmd_deliver_msgs([])
        raise ScriptError("stabilize did not settle")

    def cmd_partition(self, args: list[str]) -> None:
        groups = " ".join(args).split("|")
        self.cluster.group_of = {
            NodeId(int(word)): index for index, group in enumerate(groups) for word in group.split()
        }

    def cmd_heal(self, args: list[str]) -> None:
        self.cluster.group_of = {}

    def cmd_crash(self, args: list[str]) -> None:
        node_id = NodeId(int(args[0]))
        self.cluster.crash(node_id)
        self._out.append(
            f"n{node_id}: down, disk keeps {self.cluster.nodes[node_id].log.end_offset} bytes"
        )

    def cmd_restart(self, args: list[str]) -> None:
        self.cluster.restart(NodeId(int(args[0])))

    def cmd_transfer(self, args: list[str]) -> None:
        source, target = NodeId(int(args[0])), NodeId(int(args[2]))
        outcome = self.cluster.core(source).transfer_leadership(target)
        self._out.append(f"{outcome}")
        self.cluster.drain(source)

    def cmd_raft_state(self, args: list[str]) -> None:
        for node_id, node in self.cluster.nodes.items():
            if node.core is None:
                self._out.append(f"n{node_id}: down")
                continue
            st = node.core.status()
            self._out.append(
                f"n{node_id}: {st.role.value} term={st.term} vote={st.vote} leader={st.leader_id}"
                f" last=(t{st.last_term},{st.last_offset}) durable={st.durable_offset}"
                f" commit={st.committed_offset}"
            )

    def cmd_raft_log(self, args: list[str]) -> None:
        log = self.cluster.nodes[NodeId(int(args[0]))].log
        for record in log.records:
            what = "noop" if record.record_id == NOOP_RECORD_ID else f"record {record.record_id}"
            synced = "" if record.end_offset <= log.synced_offset else " (not synced)"
            self._out.append(
                f"[{record.start_offset},{record.end_offset})@t{record.term} {what}{synced}"
            )
        if not log.records:
            self._out.append("empty")

    def cmd_status(self, args: list[str]) -> None:
        st = self.cluster.core(NodeId(int(args[0]))).status()
        for node_id, state, next_offset, match, durable in st.progress:
            self._out.append(
                f"n{node_id}: {state} next={next_offset} match={match} durable={durable}"
            )
