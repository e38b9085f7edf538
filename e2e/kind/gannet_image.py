"""The Gannet image built without a registry: the offline twin of ``deploy/image/Dockerfile``.

The Dockerfile (kept for users) starts ``FROM python:3.11-slim-bookworm`` and runs pip against
PyPI: neither works where no registry is reachable from the docker engine. This builds an image
with the same contents and the same runtime contract:

1. ``pip wheel`` on the host: the project's wheel (with the store's native encoder) and the
   wheels of its runtime dependencies (no dev or pipeline extras, as in the Dockerfile);
2. a Debian bookworm ``minbase`` rootfs with Debian's ``python3`` and ``python3-venv``
   (``mmdebstrap``, cached by :mod:`e2e.kind.tools`);
3. in a chroot: a venv ``/opt/gannet`` with those wheels installed from the local directory
   only (``--no-index``), and the user and group ``gannet`` (10001) owning ``/var/lib/gannet``;
4. ``docker import`` with the Dockerfile's ENV, USER 10001:10001, WORKDIR, VOLUME, EXPOSE,
   ENTRYPOINT ``["gannet"]`` and CMD.

Both images must pass ``e2e/kind/test_image.py`` (non-root, ``gannet --help``, a broker that
starts and answers).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from e2e.kind import engine, images, tools

REPO = Path(__file__).resolve().parents[2]
VENV = "/opt/gannet"
HOME = "/var/lib/gannet"
# The Dockerfile's runtime metadata, as `docker import --change` lines.
CHANGES = (
    f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV PYTHONUNBUFFERED=1",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    "USER 10001:10001",
    f"WORKDIR {HOME}",
    f'VOLUME ["{HOME}"]',
    "EXPOSE 8081 8091 5557 8080",
    'ENTRYPOINT ["gannet"]',
    'CMD ["broker", "run", "--data-dir", "/var/lib/gannet", "--listen", "0.0.0.0:8081", '
    '"--metrics-listen", "0.0.0.0:5557"]',
)


def _wheels(target: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(target), str(REPO)]
    subprocess.run(pip, check=True)


def _chroot(root: Path, *command: str) -> None:
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    subprocess.run(["/usr/sbin/chroot", str(root), *command], check=True, env={"PATH": path})


def build(tag: str, work: Path) -> None:
    """Build the image ``tag`` in the e2e's docker engine (about a minute)."""
    started = time.monotonic()
    root = work / "gannet-rootfs"
    root.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(root), "-xf", str(tools.rootfs_tar("python"))], check=True)
    wheels = root / "tmp/wheels"
    _wheels(wheels)
    _chroot(root, "python3", "-m", "venv", VENV)
    pip = [f"{VENV}/bin/pip", "install", "--quiet", "--no-index", "--no-cache-dir"]
    _chroot(root, *pip, "--find-links", "/tmp/wheels", "gannet")
    shutil.rmtree(wheels)
    _chroot(root, "groupadd", "--gid", "10001", "gannet")
    user = ["useradd", "--uid", "10001", "--gid", "10001", "--home-dir", HOME, "--create-home"]
    _chroot(root, *user, "--shell", "/usr/sbin/nologin", "gannet")
    for cache in ("var/cache/apt", "var/lib/apt/lists"):
        shutil.rmtree(root / cache, ignore_errors=True)
    images._import(root, tag, *CHANGES)
    shutil.rmtree(root)
    print(f"e2e-kind: image {tag}: {time.monotonic() - started:.0f} s", flush=True)


def retag(source: str, tag: str) -> None:
    engine.docker("tag", source, tag)
