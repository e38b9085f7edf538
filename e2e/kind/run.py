"""``make e2e-kind``: build what is missing, start the e2e's Docker engine, run the tests, stop.

1. Host packages (apt), the Debian root filesystems, the Kubernetes binaries and the aux tools
   (:mod:`e2e.kind.tools`; cached under ``~/.cache/gannet-kube/v1.34.4``, cold ~20 min on 2
   cores, a no-op when warm).
2. dockerd in the network namespace ``gannet-kind`` (:mod:`e2e.kind.engine`).
3. The node image (cached in the engine's data root) and the Gannet image (built every run
   from the working tree: :mod:`e2e.kind.gannet_image`).
4. ``pytest e2e/kind`` inside the namespace: the session creates the kind cluster and deletes it
   at its end (:mod:`e2e.kind.cluster`).
5. On the way out — a failure, Ctrl-C or SIGTERM included — dockerd is stopped (with its
   containers) and the namespace deleted.

``python -m e2e.kind.run [pytest arguments]``; ``--build-only`` stops after step 3.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from e2e.kind import cluster, engine, gannet_image, images, tools

REPO = Path(__file__).resolve().parents[2]


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    build_only = "--build-only" in argv
    pytest_args = [arg for arg in argv if arg != "--build-only"]
    tools.build_all()
    print(f"e2e-kind: tools ready at {time.monotonic() - started:.0f} s", flush=True)
    logs = Path(os.environ.get("GANNET_KIND_LOGS", "/tmp/gannet-kind-logs"))
    logs.mkdir(parents=True, exist_ok=True)
    with engine.running(logs / "dockerd.log"):
        work = images.workdir()
        try:
            node = images.build_node(work)
            images.prune_nodes(node)
            gannet_image.build(cluster.IMAGE, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"e2e-kind: images ready at {time.monotonic() - started:.0f} s", flush=True)
        if build_only:
            return 0
        env = {**engine.environment(), "GANNET_KIND_NODE_IMAGE": node}
        pytest = [sys.executable, "-m", "pytest", "-p", "no:randomly", "e2e/kind", *pytest_args]
        done = subprocess.run(engine.inside(pytest), cwd=REPO, env=env, check=False)
    print(f"e2e-kind: {time.monotonic() - started:.0f} s in all", flush=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
