"""A broker thread's event loop drops grpcio's spurious poller wake-ups and nothing else."""

from __future__ import annotations

import asyncio

import pytest

from gannet.node.broker import threads


class _Poller:
    def _handle_events(self) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")


def _context(error: BaseException, callback: object) -> dict[str, object]:
    loop = asyncio.new_event_loop()
    try:
        handle = asyncio.Handle(callback, (), loop)  # type: ignore[arg-type]
    finally:
        loop.close()
    return {"message": "Exception in callback", "exception": error, "handle": handle}


def test_a_poller_wake_up_that_found_no_byte_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    try:
        context = _context(BlockingIOError(11, "EAGAIN"), _Poller()._handle_events)
        threads._quiet_poller_wakeups(loop, context)
    finally:
        loop.close()
    assert not caplog.records


@pytest.mark.parametrize(
    ("error", "callback"),
    [
        (BlockingIOError(11, "EAGAIN"), print),  # another callback's BlockingIOError
        (ValueError("boom"), _Poller()._handle_events),  # another error of the poller
    ],
)
def test_every_other_error_reaches_the_default_handler(
    error: BaseException, callback: object, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.new_event_loop()
    try:
        threads._quiet_poller_wakeups(loop, _context(error, callback))
    finally:
        loop.close()
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert type(error).__name__ in caplog.text
