"""Where the operator tests put broker stores (used by ``conftest`` and ``e2e.operator``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def stack_store(workdir: Path) -> Path:
    """The broker's store directory: on tmpfs (/dev/shm) when it has room, else in ``workdir``.
    The store refuses writes while its disk is above 90 % used, and a shared build machine's
    disk can be (other jobs' benchmark files); this scenario is about the operator."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 1 << 30:
        return Path(tempfile.mkdtemp(prefix="gannet-operator-e2e-", dir=shm))
    store = workdir / "store"
    store.mkdir(parents=True, exist_ok=True)
    return store
