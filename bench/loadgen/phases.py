"""One measured phase of a benchmark run: start N load-generator worker processes (spawned, so
no gRPC state is inherited), let each connect and warm up, release them together through a
barrier, meter the broker processes (:class:`bench.peers.processes.Meter`) until every worker
reports, and combine the workers' figures. Called by :mod:`bench.loadgen.run`."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import queue
import re
import threading
import traceback
from dataclasses import dataclass
from typing import Any

from bench.loadgen import drivers, open_loop, stats
from bench.peers import processes

# Recorded tracebacks are committed with the results: no paths of the machine that ran them.
_REPO_PREFIX = str(pathlib.Path(__file__).resolve().parents[2]) + os.sep
_LIBRARY_PATH = re.compile(r'"[^"]*/(site-packages|python3\.\d+)/')


def portable_traceback(text: str) -> str:
    """``text`` with repository paths made relative and library paths shortened."""
    return _LIBRARY_PATH.sub(r'"<\1>/', text.replace(_REPO_PREFIX, ""))


READY_TIMEOUT_S = 180.0
RESULT_GRACE_S = 120.0


class PhaseError(RuntimeError):
    """A worker failed; the message holds its traceback."""


@dataclass
class PhaseResult:
    done: int
    errors: int
    elapsed_s: float
    payload_bytes: int
    latency_ms: dict[str, float]
    usage: processes.Usage
    first_error: str
    client_cpu_s: float = 0.0  # the workers' own CPU over their measured parts, summed

    @property
    def client_cpu_us_per_msg(self) -> float:
        return self.client_cpu_s / self.done * 1e6 if self.done else 0.0

    @property
    def msgs_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _worker(
    role: str, spec: drivers.WorkerSpec, barrier: Any, counter: Any, out: Any
) -> None:  # pragma: no cover - runs in a child process
    if spec.cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(spec.cpus))
    try:
        if role == "produce":
            result = drivers.PRODUCERS[spec.client](spec, barrier)
        elif role == "consume":
            result = drivers.CONSUMERS[spec.client](spec, barrier, counter)
        elif role == "open_produce":
            result = open_loop.PRODUCERS[spec.client](spec, barrier)
        else:
            result = open_loop.CONSUMERS[spec.client](spec, barrier, counter)
        out.put((role, result, ""))
    except BaseException:
        barrier.abort()
        out.put((role, None, portable_traceback(traceback.format_exc())[-3000:]))


def combine(results: list[drivers.WorkerResult], usage: processes.Usage) -> PhaseResult:
    """Totals over workers; elapsed runs from the first worker's start to the last message."""
    active = [r for r in results if r.done > 0]
    elapsed = max(r.end_s for r in active) - min(r.start_s for r in active) if active else 0.0
    latencies = [x for r in results for x in r.latencies_s]
    return PhaseResult(
        done=sum(r.done for r in results),
        errors=sum(r.errors for r in results),
        elapsed_s=elapsed,
        payload_bytes=sum(r.payload_bytes for r in results),
        latency_ms=stats.latency_summary(latencies),
        usage=usage,
        first_error=next((r.first_error for r in results if r.first_error), ""),
        client_cpu_s=sum(r.cpu_s for r in results),
    )


def run(role: str, specs: list[drivers.WorkerSpec], meter_pids: list[int]) -> PhaseResult:
    """Run ``specs`` (all of one role: "produce" or "consume") and meter ``meter_pids``."""
    results, usage = _run_workers([(role, spec) for spec in specs], meter_pids)
    return combine(results[role], usage)


@dataclass
class OpenLoopResult:
    """What the workers of one open-loop phase returned, and the broker's usage meanwhile."""

    producers: list[drivers.WorkerResult]
    consumers: list[drivers.WorkerResult]
    usage: processes.Usage


def run_open_loop(
    produce: list[drivers.WorkerSpec], consume: list[drivers.WorkerSpec], meter_pids: list[int]
) -> OpenLoopResult:
    """Producers and consumers of a fixed-rate scenario together, released by one barrier
    (consumers subscribed and, for Kafka, assigned before it)."""
    jobs = [("open_consume", s) for s in consume] + [("open_produce", s) for s in produce]
    results, usage = _run_workers(jobs, meter_pids)
    return OpenLoopResult(results["open_produce"], results["open_consume"], usage)


def _run_workers(
    jobs: list[tuple[str, drivers.WorkerSpec]], meter_pids: list[int]
) -> tuple[dict[str, list[drivers.WorkerResult]], processes.Usage]:
    """Start one worker process per (role, spec), release them together, meter ``meter_pids``
    until every worker has reported; the results by role."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(jobs) + 1)
    counter = ctx.Value("q", 0)
    out = ctx.Queue(maxsize=len(jobs) * 2)
    workers = [
        ctx.Process(target=_worker, args=(role, spec, barrier, counter, out), daemon=True)
        for role, spec in jobs
    ]
    for worker in workers:
        worker.start()
    roles = sorted({role for role, _ in jobs})
    try:
        try:
            barrier.wait(timeout=READY_TIMEOUT_S)
        except threading.BrokenBarrierError as exc:
            raise PhaseError(
                f"{'/'.join(roles)} workers failed to get ready: {_errors(out)}"
            ) from exc
        timeout_s = max(s.deadline_s for _, s in jobs) + RESULT_GRACE_S
        results: dict[str, list[drivers.WorkerResult]] = {role: [] for role in roles}
        with processes.Meter(meter_pids) as meter:
            for _ in jobs:
                try:
                    role, result, error = out.get(timeout=timeout_s)
                except queue.Empty as exc:
                    raise PhaseError(
                        f"{'/'.join(roles)} workers silent for {timeout_s:.0f} s"
                    ) from exc
                if result is None:
                    raise PhaseError(f"{role} worker failed:\n{error}")
                results[role].append(result)
        assert meter.usage is not None
        return results, meter.usage
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=10)


def _errors(out: Any) -> str:
    texts = []
    while True:
        try:
            _, _, error = out.get(timeout=2)
        except queue.Empty:
            break
        if error:
            texts.append(error)
    return "\n".join(texts) or "(no worker reported an error; a worker may have died)"
