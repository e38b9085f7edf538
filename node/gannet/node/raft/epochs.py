"""The core's model of the commit log: byte offsets plus the leader-epoch list.

Used only by ``core.RaftCore``. The core never holds message bytes; what Raft needs from the
log is its end (``last_offset``) and the term that wrote each byte. Terms are kept as Kafka's
leader-epoch cache: a list of ``Epoch(term, start_offset)``, one per term that wrote bytes, so
``term_at`` is a binary search and the divergence search of a follower is a walk over a list
that holds one line per term, not per record.

Why it is shaped so: every replica's epoch ``T`` starts at the same offset (only leader ``T``
wrote term-``T`` bytes, each at one offset), so "the byte before ``o`` has the same term in two
logs" implies the two logs are identical up to ``o`` — Raft's log matching property on bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from gannet.node.invariants import invariant
from gannet.node.raft.messages import ZERO_OFFSET, ZERO_TERM, ByteOffset, Term


@dataclass(frozen=True, slots=True)
class Epoch:
    term: Term
    start_offset: ByteOffset


class EpochLog:
    """Byte positions and terms of one replica's log.

    Invariant: ``_starts`` and ``_terms`` mirror ``_epochs`` field by field.
    Invariant: epochs have strictly increasing terms and strictly increasing start offsets,
    each in ``[start_offset, last_offset)``: no epoch is empty.
    Invariant: ``start_offset <= last_offset``; the bytes before ``start_offset`` (deleted by
    retention) were written in ``start_term``.
    """

    def __init__(
        self,
        epochs: Iterable[Epoch] = (),
        *,
        last_offset: ByteOffset = ZERO_OFFSET,
        start_offset: ByteOffset = ZERO_OFFSET,
        start_term: Term = ZERO_TERM,
    ) -> None:
        invariant(start_offset <= last_offset, "log start beyond its end")
        self.start_offset = start_offset
        self.start_term = start_term
        self.last_offset = last_offset
        # An epoch file may name a term whose first bytes were lost in a crash: drop it.
        self._epochs = [e for e in epochs if e.start_offset < last_offset]
        # Parallel to _epochs, for binary searches without rebuilding a list per lookup.
        self._starts = [e.start_offset for e in self._epochs]
        self._terms = [e.term for e in self._epochs]
        for before, after in zip(self._epochs, self._epochs[1:], strict=False):
            invariant(before.term < after.term, "epoch terms must increase")
            invariant(before.start_offset < after.start_offset, "epoch starts must increase")
        invariant(
            not self._epochs or self._epochs[0].start_offset >= start_offset,
            "epoch before the log start",
        )
        invariant(last_offset == start_offset or bool(self._epochs), "bytes without an epoch")

    @property
    def epochs(self) -> tuple[Epoch, ...]:
        return tuple(self._epochs)

    @property
    def last_term(self) -> Term:
        return self.term_at(self.last_offset)

    def term_at(self, offset: ByteOffset) -> Term:
        """The term of the byte just before ``offset`` (``start_term`` at the log start)."""
        invariant(self.start_offset <= offset <= self.last_offset, f"offset {offset} not in log")
        index = self._epoch_index(offset - 1)
        return self.start_term if index < 0 else self._epochs[index].term

    def epoch_end(self, index: int) -> ByteOffset:
        """Where epoch number ``index`` ends: the next epoch's start or the log end."""
        if index + 1 < len(self._epochs):
            return self._epochs[index + 1].start_offset
        return self.last_offset

    def end_of_byte_epoch(self, offset: ByteOffset) -> ByteOffset:
        """End of the epoch that holds the byte at ``offset`` (which must exist)."""
        invariant(self.start_offset <= offset < self.last_offset, f"no byte at {offset}")
        return self.epoch_end(self._epoch_index(offset))

    def end_for_term(self, term: Term) -> ByteOffset:
        """Kafka's end offset for an epoch: where the largest epoch with a term ≤ ``term``
        ends in this log (the log start if there is none)."""
        index = bisect.bisect_right(self._terms, term) - 1
        return self.start_offset if index < 0 else self.epoch_end(index)

    def matches(self, prev_offset: ByteOffset, prev_term: Term) -> bool:
        if prev_offset > self.last_offset or prev_offset < self.start_offset:
            return False
        return self.term_at(prev_offset) == prev_term

    def divergence_hint(self, prev_offset: ByteOffset, prev_term: Term) -> tuple[Term, ByteOffset]:
        """For a refused ``(prev_offset, prev_term)``: our largest epoch with a term ≤
        ``prev_term`` that starts before ``prev_offset``, and how far we hold it.

        The leader answers with ``min(hint_offset, its end_for_term(hint_term))`` as the next
        ``prev_offset``, which is strictly smaller than the refused one, so the search ends.
        """
        limit = min(prev_offset, self.last_offset)
        index = self._epoch_index(limit - 1) if limit > self.start_offset else -1
        while index >= 0 and self._epochs[index].term > prev_term:
            index -= 1
        if index < 0:
            return self.start_term, self.start_offset
        return self._epochs[index].term, min(self.epoch_end(index), limit)

    def first_conflict(self, start: ByteOffset, end: ByteOffset, term: Term) -> ByteOffset | None:
        """First offset in ``[start, min(end, last_offset))`` whose byte is not of ``term``."""
        stop = min(end, self.last_offset)
        if start >= stop:
            return None
        index = self._epoch_index(start)
        if self._epochs[index].term != term:
            return start
        epoch_end = self.epoch_end(index)
        return epoch_end if epoch_end < stop else None

    def append(self, start: ByteOffset, end: ByteOffset, term: Term) -> None:
        invariant(start == self.last_offset, f"append at {start}, log ends at {self.last_offset}")
        invariant(end > start, "empty append")
        if not self._epochs or self._epochs[-1].term != term:
            # The first epoch after the log start may continue the start's term.
            newer = term > self.last_term or (not self._epochs and term == self.start_term)
            invariant(newer, f"term {term} after term {self.last_term}")
            self._epochs.append(Epoch(term, start))
            self._starts.append(start)
            self._terms.append(term)
        self.last_offset = end

    def truncate(self, offset: ByteOffset) -> None:
        invariant(self.start_offset <= offset <= self.last_offset, f"truncate to {offset}")
        while self._epochs and self._epochs[-1].start_offset >= offset:
            self._epochs.pop()
            self._starts.pop()
            self._terms.pop()
        self.last_offset = offset

    def reset(self, start_offset: ByteOffset, start_term: Term) -> None:
        """Discard the whole log; it restarts empty at ``start_offset``, the byte before it of
        ``start_term`` (a follower told to start at the leader's retention start)."""
        self._epochs.clear()
        self._starts.clear()
        self._terms.clear()
        self.start_offset = start_offset
        self.start_term = start_term
        self.last_offset = start_offset

    def compact(self, start_offset: ByteOffset) -> None:
        """Retention deleted the bytes before ``start_offset``: the log now starts there.
        Epochs that end before it are dropped; the one holding it starts at it."""
        invariant(
            self.start_offset <= start_offset <= self.last_offset,
            f"compact to {start_offset} outside [{self.start_offset}, {self.last_offset}]",
        )
        if start_offset == self.start_offset:
            return
        term = self.term_at(start_offset)
        index = self._epoch_index(start_offset)
        kept = self._epochs[index:] if index >= 0 else list(self._epochs)
        if kept and kept[0].start_offset < start_offset:
            if start_offset < self.last_offset:
                kept[0] = Epoch(kept[0].term, start_offset)
            else:
                kept = kept[1:]
        self._epochs = kept
        self._starts = [e.start_offset for e in kept]
        self._terms = [e.term for e in kept]
        self.start_offset = start_offset
        self.start_term = term

    def _epoch_index(self, byte_offset: int) -> int:
        """Index of the epoch holding the byte at ``byte_offset``; -1 before the first."""
        return bisect.bisect_right(self._starts, byte_offset) - 1
