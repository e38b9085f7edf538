"""A skewable wall clock for a broker process of the fault harness (the ``clock`` nemesis).

Put on ``PYTHONPATH`` with ``GANNET_FAULTS_CLOCK_FILE`` naming a file that holds an offset in
seconds: Python imports this module at start-up (``site``), before any of the broker's, and
``time.time`` and ``time.time_ns`` then add the file's offset, read again at most every
``REREAD_S``. The monotonic clocks (Raft's timers) are left alone, as a stepped or slewed
wall clock leaves them on a real machine. The harness's nemesis writes the file
(:meth:`e2e.faults.cluster.NetCluster.set_clock`); nothing of the broker changes.
"""

from __future__ import annotations

import os
import time

REREAD_S = 0.1
_PATH = os.environ.get("GANNET_FAULTS_CLOCK_FILE", "")

if _PATH:
    _real_time, _real_time_ns, _monotonic = time.time, time.time_ns, time.monotonic
    _state = [0.0, -REREAD_S]  # offset (s), when it was read (monotonic)

    def _offset() -> float:
        now = _monotonic()
        if now - _state[1] >= REREAD_S:
            _state[1] = now
            try:
                with open(_PATH) as f:
                    _state[0] = float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return _state[0]

    def _time() -> float:
        return _real_time() + _offset()

    def _time_ns() -> int:
        return _real_time_ns() + int(_offset() * 1e9)

    time.time = _time
    time.time_ns = _time_ns
