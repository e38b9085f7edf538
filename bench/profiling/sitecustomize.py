"""cProfile for a broker that ``python -m bench.remoting --profile DIR`` starts: this folder goes
first on the broker's PYTHONPATH, and Python imports this module at start-up.

It does nothing unless ``GANNET_BENCH_PROFILE_DIR`` is set. Then it profiles the main thread
(the broker's event loop: the gRPC and remoting servers) between two signals: SIGUSR1 starts a
new profile, SIGUSR2 stops it and writes ``<n>.prof`` (n = 0, 1, ...) in that folder, through a
temporary name and a rename, so a file that exists is whole. Other threads (the store's
dispatch and flush threads) are not profiled; the harness reads their share from ``/proc``.
"""

from __future__ import annotations

import os

_FOLDER = os.environ.get("GANNET_BENCH_PROFILE_DIR")

if _FOLDER:
    import cProfile
    import itertools
    import signal
    from types import FrameType

    _numbers = itertools.count()
    _current: list[cProfile.Profile] = []

    def _start(signum: int, frame: FrameType | None) -> None:
        profile = cProfile.Profile()
        _current[:] = [profile]
        profile.enable()

    def _write(signum: int, frame: FrameType | None) -> None:
        if not _current:
            return
        profile = _current.pop()
        profile.disable()
        path = os.path.join(str(_FOLDER), f"{next(_numbers)}.prof")
        profile.dump_stats(path + ".tmp")
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _write)
