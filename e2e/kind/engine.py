"""The e2e's own Docker engine: Debian's dockerd inside a network namespace with no route out.

``running()`` creates the network namespace ``gannet-kind`` (loopback only, no default route: every
container, pod and service address exists only inside it), starts dockerd in it with
``files/runc-bounded`` as its default runtime, and on exit (also on an exception or Ctrl-C)
stops dockerd — which stops its containers and its containerd — and deletes the namespace.

- ``nsenter --net=…`` and not ``ip netns exec``: the latter remounts ``/sys``, which hides the
  cgroup mounts kind's node needs.
- The data root is ``<cache>/docker/data``: it keeps the node and component images between runs
  (:mod:`e2e.kind.images`); the exec root, socket and pid file are under ``/run/gannet-kind``.
- Processes that need the cluster (kind, kubectl, helm, the tests) run through :func:`inside`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from e2e.kind import tools

NETNS = "gannet-kind"
NETNS_PATH = Path("/run/netns") / NETNS
RUN_DIR = Path("/run/gannet-kind")
SOCKET = RUN_DIR / "docker.sock"
PIDFILE = RUN_DIR / "dockerd.pid"
DOCKER_HOST = f"unix://{SOCKET}"
# Debian's docker CLI (20.10) matches its daemon; a newer docker elsewhere on PATH may not.
DOCKER_CLI = "/usr/bin/docker"
STARTUP_S_MAX = 60.0
STOP_S_MAX = 60.0


def data_root() -> Path:
    return tools.cache_dir() / "docker"


def path_dir() -> Path:
    """A directory put first on PATH for kind and the tests: ``docker`` is Debian's CLI, plus
    kind, kubectl and crictl from the cache."""
    directory = RUN_DIR / "bin"
    directory.mkdir(parents=True, exist_ok=True)
    links = {
        "docker": Path(DOCKER_CLI),
        "kind": tools.aux_binary("kind"),
        "kubectl": tools.cache_dir() / "kubectl",
    }
    for name, target in links.items():
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(target)
    return directory


def environment() -> dict[str, str]:
    env = {**os.environ, "DOCKER_HOST": DOCKER_HOST}
    env["PATH"] = f"{path_dir()}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def inside(command: list[str]) -> list[str]:
    """``command`` run inside the namespace."""
    return ["nsenter", f"--net={NETNS_PATH}", *command]


def docker(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [DOCKER_CLI, *args], env=environment(), check=True, text=True, **kwargs
    )


def _answers() -> bool:
    probe = subprocess.run(
        [DOCKER_CLI, "version", "--format", "{{.Server.Version}}"],
        env=environment(),
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def _pid() -> int | None:
    try:
        return int(PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: dockerd is reaped by whoever started it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


_started: list[subprocess.Popen[bytes]] = []


def stop() -> None:
    """Stop dockerd (by its pid file) and delete the namespace; safe to call when neither runs."""
    pid = _pid()
    if pid is not None and _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S_MAX
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            print(f"e2e-kind: dockerd {pid} ignored SIGTERM for {STOP_S_MAX:.0f} s: SIGKILL")
            os.kill(pid, signal.SIGKILL)
    for process in _started:
        process.wait()
    _started.clear()
    _kill_leftovers()
    PIDFILE.unlink(missing_ok=True)
    if NETNS_PATH.exists():
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
    shutil.rmtree(RUN_DIR, ignore_errors=True)


def _kill_leftovers() -> None:
    """containerd and shims dockerd started and left behind (found by their --address/-address
    under RUN_DIR, never by name)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(RUN_DIR).encode() in arg for arg in argv):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def start(log: Path) -> None:
    stop()  # a previous run killed hard may have left its engine
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    subprocess.run(["ip", "-n", NETNS, "link", "set", "lo", "up"], check=True)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    data_root().mkdir(parents=True, exist_ok=True)
    command = inside(
        [
            "nice",
            "-n",
            "10",
            "dockerd",
            "--data-root",
            str(data_root()),
            "--exec-root",
            str(RUN_DIR / "exec"),
            "-H",
            DOCKER_HOST,
            "--pidfile",
            str(PIDFILE),
            "--storage-driver",
            "overlay2",
            "--add-runtime",
            f"bounded={tools.FILES / 'runc-bounded'}",
            "--default-runtime",
            "bounded",
        ]
    )
    with log.open("ab") as out:
        _started.append(
            subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        )
    deadline = time.monotonic() + STARTUP_S_MAX
    while not _answers():
        if time.monotonic() > deadline:
            raise RuntimeError(f"dockerd did not answer within {STARTUP_S_MAX:.0f} s (see {log})")
        time.sleep(0.5)


@contextlib.contextmanager
def running(log: Path) -> Iterator[None]:
    try:
        start(log)
        yield
    finally:
        stop()
