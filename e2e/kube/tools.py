"""The pinned tools of the e2e-kube harness: where they are, and how the Kubernetes ones are built.

- kube-apiserver, kube-controller-manager and kubectl v1.34.4 are built from the Go module
  proxy by the small Go module in ``e2e/kube/binaries/`` (its ``go.mod`` replaces the 31
  ``k8s.io/*`` staging modules that ``k8s.io/kubernetes`` points at ``./staging`` by their
  published ``v0.34.4``) and
  cached under ``$GANNET_KUBE_CACHE`` (default ``~/.cache/gannet-kube/v1.34.4/``). A cold build
  takes minutes per binary on a 2-core machine, so it never runs inside a test:
  ``make e2e-kube`` runs ``python -m e2e.kube.tools build`` first, and the pytest fixtures skip
  with a message naming the missing binary and this command.
- etcd comes from Debian's ``etcd-server`` package (3.4; ``make e2e-kube`` installs it).
- helm is the Helm SDK of the ``helm-python-sdk`` wheel (a dev dependency, also used by
  tests/operator/test_chart.py): ``helm_python.Config(...).install`` is ``helm install``. The
  wheel ships no kubectl, hence the build above.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

KUBE_VERSION = "v1.34.4"
HERE = Path(__file__).resolve().parent
GO_MODULE = HERE / "binaries"
COMMANDS = ("kube-apiserver", "kube-controller-manager", "kubectl")
# The node binaries of the kind cluster (make e2e-kind, e2e/kind/): built straight from
# k8s.io/kubernetes's own commands, in the same module and the same cache directory.
NODE_COMMANDS = ("kubelet", "kubeadm", "kube-proxy", "kube-scheduler")
PACKAGES = {
    **{name: f"./{name}" for name in COMMANDS},
    **{name: f"k8s.io/kubernetes/cmd/{name}" for name in NODE_COMMANDS},
}
# kubectl refuses a server whose /version carries no parseable version.
LDFLAGS = (
    f"-s -w -X k8s.io/component-base/version.gitVersion={KUBE_VERSION}"
    " -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"
    " -X k8s.io/component-base/version.gitTreeState=clean"
)


def cache_dir() -> Path:
    root = os.environ.get("GANNET_KUBE_CACHE") or str(Path.home() / ".cache" / "gannet-kube")
    return Path(root) / KUBE_VERSION


def kube_binary(name: str) -> Path:
    return cache_dir() / name


def missing() -> list[str]:
    """What the harness cannot run without, each with the command that provides it."""
    problems = [
        f"{kube_binary(name)} is not built (run `python -m e2e.kube.tools build` or "
        "`make e2e-kube`)"
        for name in COMMANDS
        if not os.access(kube_binary(name), os.X_OK)
    ]
    if etcd() is None:
        problems.append("etcd is not installed (apt-get install etcd-server, or `make e2e-kube`)")
    try:
        import helm_python  # noqa: F401, PLC0415 - a dev dependency
    except ImportError:
        problems.append("helm-python-sdk is not installed (pip install -e '.[dev]')")
    return problems


def etcd() -> Path | None:
    found = shutil.which("etcd")
    return Path(found) if found else None


def build(*, force: bool = False, commands: tuple[str, ...] = COMMANDS) -> list[Path]:
    """Build the Kubernetes binaries that are not cached yet (``go`` must be on PATH), at
    ``nice -n 19``: the machine's cores are shared."""
    target = cache_dir()
    wanted = [name for name in commands if force or not os.access(target / name, os.X_OK)]
    if not wanted:
        return [target / name for name in commands]
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("go is not on PATH: the Kubernetes binaries build with it")
    target.mkdir(parents=True, exist_ok=True)
    staging = target / ".building"
    staging.mkdir(exist_ok=True)
    started = time.monotonic()
    print(f"building {', '.join(wanted)} {KUBE_VERSION} into {target} (minutes) ...", flush=True)
    subprocess.run(
        ["nice", "-n", "19", go, "build", "-trimpath", "-ldflags", LDFLAGS, "-o", f"{staging}/"]
        + [PACKAGES[name] for name in wanted],
        cwd=GO_MODULE,
        env={**os.environ, "CGO_ENABLED": "0"},
        check=True,
    )
    for name in wanted:  # only complete binaries reach the cache
        (staging / name).replace(target / name)
    staging.rmdir()
    print(f"built in {time.monotonic() - started:.0f} s", flush=True)
    return [target / name for name in commands]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="e2e-kube tools: build or check them")
    parser.add_argument("action", choices=("build", "check"))
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    if args.action == "build":
        for path in build(force=args.force):
            print(path)
    problems = missing()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
