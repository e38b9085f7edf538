"""What the leader knows about one follower, and how much it may send it.

Owned by ``core.RaftCore`` while it leads; rebuilt on every election. Two states, after
etcd-io/raft's ``Progress``:

* ``PROBE``: the leader does not know where the follower's log matches its own. It sends one
  ``AppendEntries`` at ``next_offset`` and waits for the answer (or the next heartbeat).
* ``REPLICATE``: the follower matched; the leader streams ranges optimistically, advancing
  ``next_offset`` as it sends, bounded by a window of ``inflight_messages_max`` messages and
  ``inflight_bytes_max`` bytes. Acknowledgements free the window. If nothing is acknowledged
  for a while (a message was lost) the leader goes back to ``PROBE`` at ``match_offset``
  (go-back-N, as DLedger's push timeout).

``durable_offset`` is what counts toward the commit offset: bytes the follower has *synced*
and that match the leader's log in this term.
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass

from gannet.node.invariants import invariant
from gannet.node.raft.messages import ByteOffset


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"


@dataclass(frozen=True, slots=True)
class Inflight:
    end_offset: ByteOffset
    length_bytes: int


class Progress:
    """Replication state of one follower, seen from the leader.

    Invariant: ``durable_offset <= match_offset``; in REPLICATE, ``match_offset <= next_offset``.
    Invariant: the in-flight window holds at most ``inflight_messages_max`` entries whose
    lengths sum to ``inflight_bytes`` (a single message may exceed the byte limit alone).
    """

    def __init__(
        self, next_offset: ByteOffset, *, inflight_messages_max: int, inflight_bytes_max: int
    ) -> None:
        invariant(inflight_messages_max >= 1, "window of at least one message")
        invariant(inflight_bytes_max >= 1, "window of at least one byte")
        self.state = ProgressState.PROBE
        self.next_offset = next_offset
        self.match_offset = ByteOffset(0)
        self.durable_offset = ByteOffset(0)
        self.probe_sent = False
        self.reset_pending = False
        """In PROBE: the follower needs bytes before the leader's log start, so the probe is a
        ``ResetLogStart`` (cleared when the follower matches)."""
        self.recent_active = False
        self.stalled_ticks = 0
        self.inflight_messages_max = inflight_messages_max
        self.inflight_bytes_max = inflight_bytes_max
        self._inflight: collections.deque[Inflight] = collections.deque()
        self.inflight_bytes = 0

    def window_full(self) -> bool:
        return (
            len(self._inflight) >= self.inflight_messages_max
            or self.inflight_bytes >= self.inflight_bytes_max
        )

    def inflight_count(self) -> int:
        return len(self._inflight)

    def become_probe(self, next_offset: ByteOffset) -> None:
        self.state = ProgressState.PROBE
        self.next_offset = next_offset
        self.match_offset = min(self.match_offset, next_offset)
        self.durable_offset = min(self.durable_offset, self.match_offset)
        self.probe_sent = False
        self.reset_pending = False
        self.stalled_ticks = 0
        self._inflight.clear()
        self.inflight_bytes = 0

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next_offset = self.match_offset
        self.probe_sent = False
        self.reset_pending = False
        self.stalled_ticks = 0
        self._inflight.clear()
        self.inflight_bytes = 0

    def sent(self, end_offset: ByteOffset, length_bytes: int) -> None:
        """A range ending at ``end_offset`` went out in REPLICATE state."""
        invariant(self.state is ProgressState.REPLICATE, "optimistic send outside REPLICATE")
        invariant(end_offset > self.next_offset, "send must advance next_offset")
        self.next_offset = end_offset
        self._inflight.append(Inflight(end_offset, length_bytes))
        self.inflight_bytes += length_bytes

    def acknowledged(self, match_offset: ByteOffset, durable_offset: ByteOffset) -> bool:
        """Record a success answer; returns whether ``match_offset`` moved forward."""
        invariant(durable_offset <= match_offset, "durable beyond match in an answer")
        moved = match_offset > self.match_offset
        self.match_offset = max(self.match_offset, match_offset)
        self.durable_offset = max(self.durable_offset, durable_offset)
        self.next_offset = max(self.next_offset, self.match_offset)
        while self._inflight and self._inflight[0].end_offset <= self.match_offset:
            self.inflight_bytes -= self._inflight.popleft().length_bytes
        if moved or not self._inflight:
            self.stalled_ticks = 0
        return moved
