"""Isolation every test gets, whatever ran before it (``pytest -p randomly`` shuffles the order).

The main thread's asyncio state. ``asyncio.run`` ends by setting the main thread's event loop
to ``None``, which makes a later ``asyncio.get_event_loop()`` there raise "There is no current
event loop in thread 'MainThread'" instead of making one. The official RocketMQ client's gRPC
channels (grpc.aio) look the loop up that way when they are created from the calling thread,
so a PushConsumer test run after any ``asyncio.run`` test timed out waiting for its settings.
Each test therefore starts with a fresh default policy (the main thread's first
``get_event_loop`` makes a loop, as in a new process) and no loop set; a loop a test left set is
closed when nothing runs it.

Hypothesis properties have no deadline. Its default (200 ms per example, wall clock) is a timing
assertion: a property that writes files failed at 478 ms on a busy machine although every example
was right. Speed targets live in ``bench/``; what a property asserts is its property. Examples
that are slow to generate are not a health problem for the same reason. Each test's own
``@settings`` still sets its example counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "gannet", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("gannet")


@pytest.fixture(autouse=True)
def fresh_main_thread_event_loop() -> Iterator[None]:
    asyncio.set_event_loop_policy(None)
    yield
    _close_left_loop()
    asyncio.set_event_loop_policy(None)


def _close_left_loop() -> None:
    policy = asyncio.get_event_loop_policy()
    local = getattr(policy, "_local", None)
    loop = getattr(local, "_loop", None)
    if (
        isinstance(loop, asyncio.AbstractEventLoop)
        and not loop.is_running()
        and not loop.is_closed()
    ):
        loop.close()
