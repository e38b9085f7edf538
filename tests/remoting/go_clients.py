"""The Go RocketMQ client's harness (``e2e/clients/go``: github.com/apache/rocketmq-client-go/v2,
remoting protocol), built with ``go`` from the Go module proxy and cached as
``$GANNET_GO_CLIENTS_CACHE/goclients-<hash of go.mod, go.sum and main.go>`` (default
``~/.cache/gannet-go-clients/``), so a change to the program or a version bump rebuilds.

``python tests/remoting/go_clients.py build`` builds it ahead (``make go-clients``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

MODULE = Path(__file__).resolve().parents[2] / "e2e" / "clients" / "go"
BUILD_TIMEOUT_S = 900.0
"""A cold build (module download and compile) took about a minute here; a busy machine more."""


def cache_dir() -> Path:
    return Path(
        os.environ.get("GANNET_GO_CLIENTS_CACHE") or Path.home() / ".cache" / "gannet-go-clients"
    )


def binary() -> Path:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((MODULE / name).read_bytes())
    return cache_dir() / f"goclients-{digest.hexdigest()[:16]}"


def build() -> Path:
    """The cached binary, built first unless there (``go`` must be on PATH), at ``nice -n 19``."""
    target = binary()
    if os.access(target, os.X_OK):
        return target
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("go is not on PATH: it builds the Go client harness")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(".partial")
    subprocess.run(
        ["nice", "-n", "19", go, "build", "-o", str(staging), "."],
        cwd=MODULE,
        env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    staging.replace(target)  # only a complete binary reaches the cache
    return target


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python tests/remoting/go_clients.py build")
    print(build())
