"""The official C++ RocketMQ client, as Apache's Python 4.x client ``rocketmq-client-python``
0.5.0rc2 ships it (its manylinux1 wheel bundles ``rocketmq/librocketmq.so``, rocketmq-client-cpp
with its C API, and needs only glibc and libstdc++), installed from PyPI — pinned by version
and sha256 — into a directory of its own, ``$GANNET_CPP_CLIENTS_CACHE/<version>-<hash>``
(default ``~/.cache/gannet-cpp-clients/``). Its top-level package is ``rocketmq``, the name of
the 5.x gRPC client in Gannet's virtualenv, so it is never installed there: the harness
(``e2e/clients/cpp/scenarios.py``) runs in a subprocess with only that directory and the
standard library on its path (``python -S``).

``python tests/remoting/cpp_clients.py install`` installs it ahead (``make cpp-clients``)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGE = "rocketmq-client-python"
VERSION = "0.5.0rc2"
WHEEL_SHA256 = "5d71a88ea023f06a6dc3ffd35d88270b8d8aa553f2075e258fc67d4d3e9ba5b9"
"""rocketmq_client_python-0.5.0rc2-py2.py3-none-manylinux1_x86_64.whl, as PyPI lists it."""
HARNESS = Path(__file__).resolve().parents[2] / "e2e" / "clients" / "cpp" / "scenarios.py"
INSTALL_TIMEOUT_S = 300.0


def supported() -> str | None:
    """Why the wheel cannot run here, or None: it is built for Linux on x86_64 only."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"{PACKAGE} {VERSION} ships librocketmq.so for Linux x86_64 only"
    return None


def cache_dir() -> Path:
    return Path(
        os.environ.get("GANNET_CPP_CLIENTS_CACHE") or Path.home() / ".cache" / "gannet-cpp-clients"
    )


def target() -> Path:
    return cache_dir() / f"{VERSION}-{WHEEL_SHA256[:12]}"


def install() -> Path:
    """The client's directory, installed first unless there. Raises RuntimeError naming the
    package and the cause when pip cannot fetch it (PyPI unreachable, hash mismatch)."""
    directory = target()
    if (directory / "rocketmq" / "librocketmq.so").is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = directory.with_suffix(".partial")
    shutil.rmtree(staging, ignore_errors=True)
    requirements = directory.parent / f"requirements-{VERSION}.txt"
    requirements.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    argv += ["--no-deps", "--only-binary=:all:", "--require-hashes", "-r", str(requirements)]
    argv += ["--target", str(staging)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(
            f"could not install {PACKAGE}=={VERSION} (sha256 {WHEEL_SHA256[:12]}...) from PyPI "
            f"into {staging}: pip exited {done.returncode}: {done.stderr.strip()[-1500:]}"
        )
    staging.replace(directory)  # only a complete install reaches the cache
    return directory


def run(
    namesrv: str, scenarios: list[str], home: Path, timeout_s: float, *options: str
) -> dict[str, dict[str, Any]]:
    """Run the harness's ``scenarios`` in one process against ``namesrv``; each scenario's
    report by name. The C++ client writes its logs under ``home`` (``$HOME/logs``), which the
    reports' ``client_log`` lines come from."""
    client = install()
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PYTHONPATH": str(client)}
    argv = [sys.executable, "-S", str(HARNESS), "--namesrv", namesrv, *options, *scenarios]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env
    )
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_name = {report["scenario"]: report for report in reports}
    if sorted(by_name) != sorted(scenarios):
        raise AssertionError(
            f"the harness reported {sorted(by_name)} of {sorted(scenarios)} "
            f"(exit {done.returncode}): {done.stderr[-4000:]}"
        )
    # shown with a failure (or -s): where the run's time went
    seen = {name: (r["seconds"], r.get("client_retries", 0)) for name, r in by_name.items()}
    print("C++ client scenarios (seconds, sends retried after the client's connect race):", seen)
    return by_name


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python tests/remoting/cpp_clients.py install")
    why = supported()
    if why is not None:
        sys.exit(why)
    print(install())
