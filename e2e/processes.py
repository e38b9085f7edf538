"""What every end-to-end harness needs to drive local processes it does not control: a free
port, polling for a condition (another process has no event to await), and stopping a set of
processes so that none outlives its test."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable

POLL_INTERVAL_S = 0.05


class WaitTimeout(AssertionError, TimeoutError):
    """A condition did not hold in time. Both kinds, so that harnesses which catch a failed
    check (AssertionError) and those which catch a timeout (TimeoutError) see it alike."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment of the call."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bindable(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now."""
    if not 0 < port <= 65535:
        return False
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for(
    condition: Callable[..., object],
    timeout_s: float,
    what: str,
    interval_s: float = POLL_INTERVAL_S,
) -> None:
    """Poll ``condition()`` every ``interval_s`` until it is true; :class:`WaitTimeout` naming
    ``what`` after ``timeout_s``. It is called without arguments: a lambda whose defaults bind a
    loop variable is fine."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout_s:.0f} s waiting for {what}")
        pause.wait(interval_s)


def stop_all(processes: Iterable[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """SIGTERM every live process (after SIGCONT: a paused one cannot exit), wait up to
    ``timeout_s`` for each, then SIGKILL what is left. Every process is reaped on return."""
    chosen = list(processes)
    for process in chosen:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    for process in chosen:
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
