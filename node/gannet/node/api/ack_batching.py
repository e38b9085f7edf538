"""Concurrent AckMessage calls acknowledged together: one worker-thread hop, one hold of the
Pop buffer lock, one commit-log append (so one Raft proposal) and one offset commit for all
the acks that arrive while the previous batch runs.

The official clients send one AckMessage per message, so under load many small ack calls are
in flight at once; each used to cost its own ``asyncio.to_thread`` hop (a thread-pool submit
and a GIL hand-off, ``bench/results/PROFILE.md``) and its own append. :class:`AckBatcher` queues
each call's ``(group, topic, handles)`` and one drain task runs the queue, up to
:data:`JOBS_PER_BATCH_MAX` calls per batch, through :meth:`PopBroker.ack_jobs`, which gives each
call the results it would have had alone, in arrival order. A call's answer waits only for its
own batch. A batch is judged at the time it starts, never before any of its calls arrived (so a
handle that expired before its ack arrived is never accepted; one that expires while its ack
waits for the running batch is refused as expired, and the client acks the redelivery). The
queue holds at most one entry per AckMessage call in flight, which the gRPC server bounds. A
store error fails every call of its batch (none of its stored-checkpoint bits is set; the
clients retry).

With ``ack_now`` (:meth:`PopBroker.ack_jobs_now`), a call that arrives while no batch runs is
acked at once on the event loop when that can be done without waiting (no other thread holds a
lock it needs, no disk flush to wait for): no future, no task and no thread hop, which at a few
calls in flight is most of an AckMessage's cost on the loop (``bench/results/PROFILE.md``).
Otherwise it queues as above.

Used by :class:`gannet.node.api.receiving.PopHandler`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from gannet.node.pop.acking import AckJob
from gannet.node.pop.errors import PopError
from gannet.node.store import steady_clock

JOBS_PER_BATCH_MAX = 256

AckJobs = Callable[[list[AckJob], int], list[list[PopError | None]]]
"""Acknowledges jobs at a time in ms, blocking (:meth:`PopBroker.ack_jobs`)."""

AckJobsNow = Callable[[list[AckJob], int], list[list[PopError | None]] | None]
"""Acknowledges jobs if it can without waiting, else None (:meth:`PopBroker.ack_jobs_now`)."""

_Queued = tuple[AckJob, "asyncio.Future[list[PopError | None]]"]


def _now_ms() -> int:
    return steady_clock.now_ms()


class AckBatcher:
    """One per Pop handler, used on its event loop."""

    def __init__(
        self,
        ack_jobs: AckJobs,
        *,
        jobs_per_batch_max: int = JOBS_PER_BATCH_MAX,
        ack_now: AckJobsNow | None = None,
    ):
        if jobs_per_batch_max < 1:
            raise ValueError("jobs_per_batch_max must be at least 1")
        self._ack_jobs = ack_jobs
        self._ack_now = ack_now
        self._jobs_per_batch_max = jobs_per_batch_max
        self._queued: deque[_Queued] = deque()
        self._drain: asyncio.Task[None] | None = None
        self.batches_total = 0
        self.jobs_total = 0
        self.inline_total = 0
        """Calls acked at once on the loop (``ack_now``), counted apart from batches."""

    async def ack(self, job: AckJob) -> list[PopError | None]:
        """The results of ``job``'s handles, one per handle (None: acknowledged)."""
        if self._ack_now is not None and self._drain is None:
            # Nothing queued or running (the drain task ends once the queue is empty), so
            # acking now keeps the arrival order.
            results = self._ack_now([job], _now_ms())
            if results is not None:
                self.inline_total += 1
                return results[0]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[PopError | None]] = loop.create_future()
        self._queued.append((job, future))
        if self._drain is None:
            self._drain = loop.create_task(self._run())
        # A caller that goes away cancels only its own future; the batch runs on in the task.
        return await future

    async def _run(self) -> None:
        batch: list[_Queued] = []
        try:
            while self._queued:
                take = min(len(self._queued), self._jobs_per_batch_max)
                batch = [self._queued.popleft() for _ in range(take)]
                jobs = [job for job, _ in batch]
                try:
                    results = await asyncio.to_thread(self._ack_jobs, jobs, _now_ms())
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self.batches_total += 1
                self.jobs_total += len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._drain = None
            # Cancelled (the loop is closing): no caller waits forever.
            for _, future in (*batch, *self._queued):
                if not future.done():
                    future.cancel()
            self._queued.clear()
