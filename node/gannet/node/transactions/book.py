"""The open transactions of one broker group, as its committed log says (no IO).

Every replica keeps a :class:`TransactionBook` and applies to it, in log order, the
transaction records that dispatch reaches (:mod:`transactions` turns a dispatched record into
one of :meth:`~TransactionBook.half`, :meth:`~TransactionBook.resolve` or
:meth:`~TransactionBook.checked`). Dispatch never passes the commit offset, so the book holds
exactly what a failover keeps: a new leader starts checking from the same open transactions,
check counts and check times as the old one.

The leader adds what is not in the log yet: resolutions it is writing (``_ending``: a second
EndTransaction for the same half message meanwhile is refused, never appended twice) and the
time before which it will not propose another check of a half message (``next_check_ms``).

One message id, one real message (issue 34, fault seed 1002): a producer's retry of a half
message may be stored as a second half message of the same id (its original was answered with
an error but committed). The book keeps, per (topic, message id), the half message whose commit
copy is in the log (``_committed``, the newest :data:`COMMITTED_REMEMBERED_MAX`) and the one
whose commit is being written (``_committing``): ending another half of that id as COMMIT
writes its op record only (:meth:`stored_by_another`), or is refused while the first commit is
in flight; a retried send of a committed id is answered with its half message
(:meth:`sent_half`).

Called from the dispatch thread, worker threads and the event loop: one lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

RESOLVED_REMEMBERED_MAX = 65_536
"""Resolutions remembered so that a retried EndTransaction gets OK (oldest forgotten first)."""
COMMITTED_REMEMBERED_MAX = 65_536
"""Committed message ids remembered for retried sends and second halves (oldest first out; the
index files answer for older ones: :meth:`TransactionService.prepare_end`)."""

Key = tuple[str, str]
"""(real topic, message id)."""


@dataclass(frozen=True, slots=True)
class CheckLimits:
    check_after_ms: int = 6_000
    """RocketMQ ``transactionTimeOut``: no check of a half message younger than this."""
    check_interval_ms: int = 60_000
    """RocketMQ ``transactionCheckInterval``: time between two checks of one half message."""
    check_max: int = 15
    """RocketMQ ``transactionCheckMax``: checks before the half message is discarded."""
    pending_max: int = 100_000
    """Open transactions at most; a transactional send beyond is ``TOO_MANY_REQUESTS``."""


@dataclass(slots=True)
class Pending:
    """One open transaction: its half message's commit-log offset and what the log says."""

    half_offset: int
    topic: str
    stored_ms: int
    checks: int = 0
    last_check_ms: int = 0
    """Store time of the newest check record (0: never checked)."""
    next_check_ms: int = 0
    """Leader only: no check proposed before this (a proposed check is not applied yet)."""
    message_id: str = ""
    queue_offset: int = 0
    """The half message's offset in the half topic's queue (the send's receipt offset)."""


class Resolution(Enum):
    COMMIT = "commit"
    ROLLBACK = "rollback"
    DISCARD = "discard"


class EndRefused(Exception):
    """An EndTransaction that must not be applied; the message says why."""


class TransactionBook:
    """Open transactions (applied from the log) plus the leader's resolutions in flight."""

    def __init__(self, limits: CheckLimits | None = None) -> None:
        self.limits = limits or CheckLimits()
        self._lock = threading.Lock()
        self._pending: dict[int, Pending] = {}
        self._by_message: dict[Key, int] = {}
        """(topic, message id) → half offset of the open transactions: a retried send."""
        self._committed: OrderedDict[Key, Pending] = OrderedDict()
        """(topic, message id) → the half message whose commit copy is in the log."""
        self._committing: dict[Key, int] = {}
        """(topic, message id) → half offset whose commit copy the leader is writing."""
        self._resolved: OrderedDict[int, Resolution] = OrderedDict()
        self._ending: dict[int, Resolution] = {}
        self.ended_total: dict[Resolution, int] = dict.fromkeys(Resolution, 0)
        """Resolutions this node wrote (it led when it wrote them)."""

    # ------------------------------------------------------------------ applied from the log
    def half(
        self,
        half_offset: int,
        topic: str,
        stored_ms: int,
        checks: int = 0,
        *,
        message_id: str = "",
        queue_offset: int = 0,
    ) -> None:
        with self._lock:
            if half_offset in self._resolved or half_offset in self._pending:
                return
            if len(self._pending) >= self.limits.pending_max:
                return  # refused at send time; only a smaller limit after a restart gets here
            pending = Pending(half_offset, topic, stored_ms, checks)
            pending.message_id, pending.queue_offset = message_id, queue_offset
            self._pending[half_offset] = pending
            if message_id:
                self._by_message.setdefault((topic, message_id), half_offset)

    def _drop(self, half_offset: int) -> None:
        pending = self._pending.pop(half_offset, None)
        if pending is not None and pending.message_id:
            key = (pending.topic, pending.message_id)
            if self._by_message.get(key) == half_offset:
                del self._by_message[key]
            if self._committing.get(key) == half_offset:  # dispatch may come before end_done
                del self._committing[key]

    def resolve(self, half_offset: int, resolution: Resolution) -> None:
        """A commit copy (COMMIT) or an op record (ROLLBACK) applied. The op record of a half
        message whose id is committed through another half counts as COMMIT: that is what
        became of the message (:meth:`stored_by_another`)."""
        with self._lock:
            pending = self._pending.get(half_offset)
            if pending is not None and pending.message_id:
                key = (pending.topic, pending.message_id)
                first = self._committed.get(key)
                if resolution is Resolution.COMMIT:
                    self._committed_add(key, pending)
                elif first is not None and first.half_offset != half_offset:
                    resolution = Resolution.COMMIT
            self._drop(half_offset)
            self._remember(half_offset, resolution)

    def _committed_add(self, key: Key, pending: Pending) -> None:
        if key in self._committed:
            return  # the first commit stays
        self._committed[key] = pending
        while len(self._committed) > COMMITTED_REMEMBERED_MAX:
            self._committed.popitem(last=False)

    def sent_half(self, topic: str, message_id: str) -> Pending | None:
        """The half message of a message id, open or committed: a send retried after its half
        message committed (e.g. across a failover), or after its transaction committed, is
        answered with it instead of a second half."""
        with self._lock:
            committed = self._committed.get((topic, message_id))
            if committed is not None:  # the first commit, before any later half of the id
                return committed
            offset = self._by_message.get((topic, message_id))
            return self._pending.get(offset) if offset is not None else None

    def stored_by_another(self, half_offset: int) -> bool:
        """Whether the message of the open half message at ``half_offset`` is committed
        through another half message of its id (its commit writes the op record only)."""
        with self._lock:
            pending = self._pending.get(half_offset)
            if pending is None or not pending.message_id:
                return False
            first = self._committed.get((pending.topic, pending.message_id))
            return first is not None and first.half_offset != half_offset

    def checked(self, half_offset: int, checks: int, stored_ms: int) -> Pending | None:
        """A check record: the pending transaction it updated, or None when resolved."""
        with self._lock:
            pending = self._pending.get(half_offset)
            if pending is not None:
                pending.checks = max(pending.checks, checks)
                pending.last_check_ms = max(pending.last_check_ms, stored_ms)
            return pending

    def _remember(self, half_offset: int, resolution: Resolution) -> None:
        self._resolved.setdefault(half_offset, resolution)
        while len(self._resolved) > RESOLVED_REMEMBERED_MAX:
            self._resolved.popitem(last=False)

    # ------------------------------------------------------------------ queries
    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    def pending_of(self, topic: str) -> int:
        """Open transactions of one real topic: prepared, neither committed nor rolled back
        nor discarded yet (a resolution being written counts until it committed)."""
        with self._lock:
            return sum(1 for p in self._pending.values() if p.topic == topic)

    def pending_offsets(self) -> set[int]:
        with self._lock:
            return set(self._pending)

    def get(self, half_offset: int) -> Pending | None:
        with self._lock:
            return self._pending.get(half_offset)

    # ------------------------------------------------------------------ the leader's writes
    def begin_end(self, half_offset: int, resolution: Resolution) -> bool:
        """Reserve the resolution of ``half_offset``: True to write it, False when the same
        resolution is already in the log (answer OK, write nothing). Raises
        :class:`EndRefused` for another resolution, one in flight, an unknown half, or a
        COMMIT while another half message of the same id is being committed."""
        with self._lock:
            if half_offset in self._ending:
                raise EndRefused("is being committed or rolled back by another request")
            pending = self._pending.get(half_offset)
            key = (pending.topic, pending.message_id) if pending and pending.message_id else None
            if resolution is Resolution.COMMIT and key is not None:
                other = self._committing.get(key)
                if other is not None and other != half_offset:
                    raise EndRefused(
                        f"has message id {key[1]!r}, whose other half message is being committed"
                    )
            done = self._resolved.get(half_offset)
            if done is not None and half_offset not in self._pending:
                if done is resolution:
                    return False
                raise EndRefused(f"has already been {_past(done)}")
            if half_offset not in self._pending:
                raise EndRefused("names no open transaction (already committed or rolled back)")
            self._ending[half_offset] = resolution
            if resolution is Resolution.COMMIT and key is not None:
                self._committing[key] = half_offset
            return True

    def _end_settled(self, half_offset: int) -> Resolution | None:
        """Release the reservation of ``half_offset`` (``_lock`` held)."""
        resolution = self._ending.pop(half_offset, None)
        pending = self._pending.get(half_offset)
        if pending is not None and pending.message_id:
            key = (pending.topic, pending.message_id)
            if self._committing.get(key) == half_offset:
                del self._committing[key]
        return resolution

    def end_failed(self, half_offset: int) -> None:
        """The write failed or its commit is uncertain: the log decides (dispatch applies it
        if it committed after all)."""
        with self._lock:
            self._end_settled(half_offset)

    def end_done(self, half_offset: int) -> None:
        """The resolution committed: apply it now (dispatch applies it again, harmlessly)."""
        with self._lock:
            resolution = self._end_settled(half_offset)
            if resolution is None:
                return
            pending = self._pending.get(half_offset)
            if resolution is Resolution.COMMIT and pending is not None and pending.message_id:
                self._committed_add((pending.topic, pending.message_id), pending)
            self._drop(half_offset)
            self._remember(half_offset, resolution)
            self.ended_total[resolution] += 1

    def due(self, now_ms: int) -> tuple[list[Pending], list[Pending]]:
        """Leader: (half messages to check now, half messages to discard now). Those to
        check get ``next_check_ms``; those to discard are reserved as DISCARD resolutions."""
        lim = self.limits
        check: list[Pending] = []
        discard: list[Pending] = []
        with self._lock:
            for p in self._pending.values():
                if p.half_offset in self._ending:
                    continue
                if now_ms - p.stored_ms < lim.check_after_ms:
                    continue
                if p.last_check_ms and now_ms - p.last_check_ms < lim.check_interval_ms:
                    continue
                if now_ms < p.next_check_ms:
                    continue
                if p.checks >= lim.check_max:
                    self._ending[p.half_offset] = Resolution.DISCARD
                    discard.append(p)
                    continue
                p.next_check_ms = now_ms + lim.check_interval_ms
                check.append(p)
        return check, discard


def _past(resolution: Resolution) -> str:
    return {
        Resolution.COMMIT: "committed",
        Resolution.ROLLBACK: "rolled back",
        Resolution.DISCARD: "discarded after its last check",
    }[resolution]
