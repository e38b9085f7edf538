"""The pinned tools of ``make e2e-kind``, built from package registries alone and cached by version.

Everything lands in ``$GANNET_KUBE_CACHE/v1.34.4/`` (default ``~/.cache/gannet-kube/v1.34.4/``),
the directory ``make e2e-kube`` already fills with kube-apiserver, kube-controller-manager and
kubectl:

- ``kubelet kubeadm kube-proxy kube-scheduler`` (plus the three above): the Go module in
  ``e2e/kube/binaries`` (:func:`e2e.kube.tools.build`);
- ``aux/``: kind v0.30.0, crictl v1.34.0, local-path-provisioner v0.0.30 and CoreDNS v1.12.1
  (``go install`` of pinned versions), etcd v3.6.5 (the wrapper module ``e2e/kind/etcd``; etcd's
  own module cannot be ``go install``\\ ed), and the pause container (``pause.c`` from the
  Kubernetes module, compiled statically with gcc);
- ``rootfs/``: Debian bookworm root filesystems from ``mmdebstrap`` for the kind node, the
  kube-proxy image and the Gannet image;
- ``docker/``: the data root of the e2e's own dockerd, which keeps the built node and component
  images between runs (:mod:`e2e.kind.images`).

The Go module and build caches stay Go's defaults (``~/go/pkg/mod``, ``~/.cache/go-build``;
about 8 GB after a cold build). Go builds run at ``nice -n 19``. Only complete outputs reach the
cache (written to a temporary name, then renamed), so an interrupted build is simply redone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from e2e.kube import tools as kube_tools

HERE = Path(__file__).resolve().parent
FILES = HERE / "files"
KUBE_VERSION = kube_tools.KUBE_VERSION
KIND_VERSION = "v0.30.0"
ETCD_VERSION = "3.6.5"
COREDNS_VERSION = "v1.12.1"
PAUSE_VERSION = "3.10.1"
# `go install` targets of the aux tools: name -> module path@version.
GO_INSTALLS = {
    "kind": f"sigs.k8s.io/kind@{KIND_VERSION}",
    "crictl": "sigs.k8s.io/cri-tools/cmd/crictl@v1.34.0",
    "local-path-provisioner": "github.com/rancher/local-path-provisioner@v0.0.30",
    "coredns": f"github.com/coredns/coredns@{COREDNS_VERSION}",
}
AUX = (*GO_INSTALLS, "etcd", "pause")
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# mmdebstrap --include lists of the three root filesystems.
ROOTFS_PACKAGES = {
    # kindest/base's contents from Debian: systemd as init, containerd 1.6, runc, CNI plugins.
    "node": (
        "systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,"
        "mount,kmod,libseccomp2,pigz,fuse-overlayfs,bash,ca-certificates,curl,jq,procps,"
        "containerd,runc,containernetworking-plugins,socat,ebtables"
    ),
    "kube-proxy": "iptables,conntrack,nftables,kmod",
    "python": "python3,python3-venv,ca-certificates",
}
# Debian packages the host needs (make e2e-kind installs the missing ones).
APT_PACKAGES = (
    "docker.io",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "mmdebstrap",
    "iptables",
    "conntrack",
    "busybox-static",
    "gcc",
    "libc6-dev",
)
BUSYBOX = Path("/bin/busybox")


def cache_dir() -> Path:
    return kube_tools.cache_dir()


def aux_binary(name: str) -> Path:
    return cache_dir() / "aux" / name


def rootfs_tar(name: str) -> Path:
    return cache_dir() / "rootfs" / f"{name}.tar"


def _timed(what: str, command: list[str], **kwargs: object) -> None:
    started = time.monotonic()
    print(f"e2e-kind: {what} ...", flush=True)
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]
    print(f"e2e-kind: {what}: {time.monotonic() - started:.0f} s", flush=True)


def build_kube_binaries() -> None:
    kube_tools.build(commands=kube_tools.COMMANDS + kube_tools.NODE_COMMANDS)


def build_aux() -> None:
    """go install the pinned tools, build etcd's wrapper module and pause.c (cached)."""
    target = cache_dir() / "aux"
    staging = target / ".building"
    staging.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": str(staging)}
    for name, module in GO_INSTALLS.items():
        if not os.access(target / name, os.X_OK):
            go = ["nice", "-n", "19", "go", "install", "-trimpath", "-ldflags=-s", module]
            _timed(f"go install {module}", go, env=env)
            (staging / name).replace(target / name)
    if not os.access(target / "etcd", os.X_OK):
        out = staging / "etcd"
        go = ["nice", "-n", "19", "go", "build", "-trimpath", "-ldflags=-s", "-o", str(out), "."]
        _timed(f"etcd {ETCD_VERSION}", go, cwd=HERE / "etcd", env=env)
        out.replace(target / "etcd")
    if not os.access(target / "pause", os.X_OK):
        modcache = subprocess.run(
            ["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True
        ).stdout.strip()
        source = Path(modcache) / f"k8s.io/kubernetes@{KUBE_VERSION}/build/pause/linux/pause.c"
        out = staging / "pause"
        gcc = ["gcc", "-Os", "-static", f"-DVERSION={PAUSE_VERSION}", "-o", str(out), str(source)]
        _timed("pause", gcc)
        out.replace(target / "pause")


def build_rootfs() -> None:
    """The Debian root filesystems (mmdebstrap minbase, from the Debian mirror; cached)."""
    for name, packages in ROOTFS_PACKAGES.items():
        tar = rootfs_tar(name)
        if tar.exists():
            continue
        tar.parent.mkdir(parents=True, exist_ok=True)
        part = tar.with_suffix(".part.tar")
        command = ["nice", "-n", "19", "mmdebstrap", "--quiet", "--variant=minbase"]
        command += [f"--include={packages}", DEBIAN_SUITE, str(part), DEBIAN_MIRROR]
        _timed(f"mmdebstrap {name}", command)
        part.replace(tar)


def missing_host_packages() -> list[str]:
    status = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *APT_PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    installed = {line.split()[0] for line in status.splitlines() if line.endswith(" installed")}
    return [name for name in APT_PACKAGES if name not in installed]


def install_host_packages() -> None:
    wanted = missing_host_packages()
    if not wanted:
        return
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*apt, "update", "-q"], check=True, env=env)
    install = [*apt, "install", "-y", "-q", "--no-install-recommends", *wanted]
    _timed("apt-get install " + " ".join(wanted), install, env=env)


def build_all() -> None:
    """Everything ``make e2e-kind`` needs outside docker; a no-op on a warm cache."""
    install_host_packages()
    if shutil.which("go") is None:
        raise FileNotFoundError("go is not on PATH: the Kubernetes binaries build with it")
    build_rootfs()
    build_kube_binaries()
    build_aux()


def warm() -> bool:
    """Whether every cached artifact is there (``.ci/run`` runs the e2e only then)."""
    kube = kube_tools.COMMANDS + kube_tools.NODE_COMMANDS
    return (
        all(os.access(kube_tools.kube_binary(name), os.X_OK) for name in kube)
        and all(os.access(aux_binary(name), os.X_OK) for name in AUX)
        and all(rootfs_tar(name).exists() for name in ROOTFS_PACKAGES)
    )
