"""The image smoke test both Gannet images must pass: the offline build (e2e/kind/gannet_image.py,
run here) and ``deploy/image/Dockerfile`` (needs a registry; run it where one is reachable:
``docker build -f deploy/image/Dockerfile -t X . && GANNET_SMOKE_IMAGE=X pytest
e2e/kind/test_image.py`` with DOCKER_HOST set and the container's address reachable).

- the container runs as the non-root user 10001, in /var/lib/gannet;
- ``gannet --help`` (the ENTRYPOINT with an argument) prints the usage;
- the default CMD starts a broker that answers ``/readyz`` and ``/metrics`` on 5557.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from e2e.kind import cluster, engine

IMAGE = os.environ.get("GANNET_SMOKE_IMAGE", cluster.IMAGE)
START_S_MAX = 60.0


def docker(*args: str) -> str:
    return engine.docker(*args, capture_output=True).stdout


def test_runs_as_non_root() -> None:
    assert docker("run", "--rm", "--entrypoint", "id", IMAGE, "-u").strip() == "10001"
    assert docker("run", "--rm", "--entrypoint", "pwd", IMAGE).strip() == "/var/lib/gannet"


def test_help() -> None:
    text = docker("run", "--rm", IMAGE, "--help")
    assert "broker" in text, text
    assert "operator" in text, text


def _answers(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bytes(response.read()) if response.status == 200 else None
    except OSError:
        return None


@pytest.fixture
def broker() -> object:
    name = "gannet-smoke"
    subprocess.run(
        [engine.DOCKER_CLI, "rm", "-f", name],
        env=engine.environment(),
        capture_output=True,
        check=False,
    )
    docker("run", "-d", "--name", name, IMAGE)
    yield name
    print(docker("logs", "--tail", "20", name))
    docker("rm", "-f", "-v", name)


def test_broker_starts_and_answers(broker: str) -> None:
    inspected = json.loads(docker("inspect", broker))[0]
    address = inspected["NetworkSettings"]["IPAddress"]
    # Another process in a container: nothing to await but its port (polled, bounded).
    deadline = time.monotonic() + START_S_MAX
    while _answers(f"http://{address}:5557/readyz") is None:
        state = json.loads(docker("inspect", broker))[0]["State"]
        assert state["Running"], f"the broker exited: {docker('logs', broker)}"
        assert time.monotonic() < deadline, "the broker did not answer /readyz"
        time.sleep(0.2)
    metrics = _answers(f"http://{address}:5557/metrics")
    assert metrics is not None
    assert b"gannet_" in metrics
    status = docker("exec", broker, "cat", "/proc/1/status")
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {"10001"}, status
