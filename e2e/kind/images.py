"""Every image the kind cluster runs, built locally with no registry.

- **The node image** ``gannet.local/kind-node:v1.34.4-<files hash>``: kind's ``kindest/base``
  and ``kind build node-image`` steps done by hand from Debian packages — the ``node`` rootfs
  (systemd, containerd 1.6, runc, CNI plugins), kind's own ``images/base/files`` from the kind
  module in the Go module cache, the kubelet/kubeadm/kubectl just built, the files of
  ``files/`` (static bridge CNI, local-path-provisioner manifest) and, imported into the node's
  containerd, the images kubeadm and kind expect under their upstream names.
- **The component images** (``registry.k8s.io/kube-*``, etcd, CoreDNS, pause, and the
  local-path provisioner and helper): ``docker import`` of tiny roots holding one static binary
  (kube-proxy gets a Debian root with iptables and conntrack).
- **The Gannet image** (:func:`build_gannet`): the offline twin of ``deploy/image/Dockerfile``.

The node image is rebuilt only when its tag is missing from the e2e's docker data root; the tag
carries the Kubernetes version and a hash of ``files/``, so an edit there rebuilds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from e2e.kind import engine, tools

V = tools.KUBE_VERSION
NODE_FILES = ("10-bridge.conflist", "default-cni.yaml", "default-storage.yaml")
LOCAL_PATH_IMAGE = "gannet.local/local-path-provisioner:v0.0.30"
LOCAL_PATH_HELPER = "gannet.local/local-path-helper:busybox"
PATH_ENV = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def node_image() -> str:
    digest = hashlib.sha256()
    for name in (*NODE_FILES, "runc-bounded"):
        digest.update((tools.FILES / name).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return f"gannet.local/kind-node:{V}-{digest.hexdigest()[:10]}"


def has_image(tag: str) -> bool:
    found = subprocess.run(
        [engine.DOCKER_CLI, "image", "inspect", tag],
        env=engine.environment(),
        capture_output=True,
        check=False,
    )
    return found.returncode == 0


def _import(root: Path, tag: str, *changes: str) -> None:
    """``docker import`` of the directory ``root`` as ``tag``."""
    flags = [arg for change in (PATH_ENV, *changes) for arg in ("--change", change)]
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    engine.docker("import", *flags, "-", tag, stdin=tar.stdout, stdout=subprocess.DEVNULL)
    if tar.wait() != 0:
        raise RuntimeError(f"tar of {root} failed")


def _tiny_root(root: Path) -> Path:
    """A root for one static binary: passwd and group, /tmp, CA certificates."""
    for sub in ("etc/ssl/certs", "tmp", "usr/local/bin", "bin", "var/lib"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
    )
    (root / "etc/group").write_text("root:x:0:\nnobody:x:65534:\n")
    (root / "etc/nsswitch.conf").write_text("hosts: files dns\n")
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/")
    return root


def _component_images(work: Path) -> list[str]:
    """Build the images kubeadm and kind pull, under the names they pull; return the tags."""
    kube = tools.cache_dir()
    tags: list[str] = []

    def one(name: str, binary: Path, tag: str, *changes: str, dest: str = "usr/local/bin") -> None:
        root = _tiny_root(work / name)
        shutil.copy(binary, root / dest / binary.name)
        _import(root, tag, *changes)
        tags.append(tag)

    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        entry = f'ENTRYPOINT ["/usr/local/bin/{name}"]'
        one(name, kube / name, f"registry.k8s.io/{name}:{V}", entry)
    proxy = work / "kube-proxy"
    proxy.mkdir()
    _extract(tools.rootfs_tar("kube-proxy"), proxy)
    shutil.copy(kube / "kube-proxy", proxy / "usr/local/bin/kube-proxy")
    _import(proxy, f"registry.k8s.io/kube-proxy:{V}", 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]')
    tags.append(f"registry.k8s.io/kube-proxy:{V}")
    one("etcd", tools.aux_binary("etcd"), f"registry.k8s.io/etcd:{tools.ETCD_VERSION}-0")
    (work / "etcd/var/lib/etcd").mkdir(parents=True, exist_ok=True)
    coredns = f"registry.k8s.io/coredns/coredns:{tools.COREDNS_VERSION}"
    one("coredns", tools.aux_binary("coredns"), coredns, 'ENTRYPOINT ["/coredns"]', dest="")
    pause = f"registry.k8s.io/pause:{tools.PAUSE_VERSION}"
    one(
        "pause",
        tools.aux_binary("pause"),
        pause,
        'ENTRYPOINT ["/pause"]',
        "USER 65535:65535",
        dest="",
    )
    engine.docker("tag", pause, "registry.k8s.io/pause:3.10")
    tags.append("registry.k8s.io/pause:3.10")
    one("lpp", tools.aux_binary("local-path-provisioner"), LOCAL_PATH_IMAGE)
    helper = _tiny_root(work / "helper")
    shutil.copy(tools.BUSYBOX, helper / "bin/busybox")
    for applet in ("sh", "mkdir", "rm", "ls", "cat", "chmod"):
        (helper / "bin" / applet).symlink_to("busybox")
    _import(helper, LOCAL_PATH_HELPER)
    tags.append(LOCAL_PATH_HELPER)
    return tags


def _extract(tar: Path, root: Path) -> None:
    subprocess.run(["tar", "-C", str(root), "-xf", str(tar)], check=True)


def _kind_base_files() -> Path:
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(modcache) / f"sigs.k8s.io/kind@{tools.KIND_VERSION}/images/base/files"


def _install(source: Path, target: Path, mode: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    target.chmod(mode)


def _node_root(root: Path) -> None:
    """The node rootfs: Debian + kind's base files + kube binaries + this e2e's files."""
    _extract(tools.rootfs_tar("node"), root)
    kind = _kind_base_files()
    for script in (kind / "usr/local/bin").iterdir():
        _install(script, root / "usr/local/bin" / script.name, 0o755)
    shutil.copytree(kind / "kind", root / "kind", dirs_exist_ok=True)
    for path in (root / "kind").rglob("*"):
        path.chmod(0o755 if path.is_dir() or path.parent.name == "bin" else 0o644)
    for rel in ("etc/crictl.yaml", "etc/containerd/config.toml", "etc/default/kubelet"):
        _install(kind / rel, root / rel, 0o644)
    for pattern in ("etc/sysctl.d/*", "etc/systemd/system/*.service", "etc/systemd/system/*.slice"):
        for source in kind.glob(pattern):
            _install(source, root / source.relative_to(kind), 0o644)
    for source in (kind / "etc/systemd/system/kubelet.service.d").iterdir():
        _install(source, root / source.relative_to(kind), 0o644)
    # systemd trimmed to what a container needs, as kind's base image does.
    system = root / "lib/systemd/system"
    for pattern in (
        "sysinit.target.wants/systemd-tmpfiles-setup.service",
        "multi-user.target.wants/*",
        "local-fs.target.wants/*",
        "sockets.target.wants/*udev*",
        "sockets.target.wants/*initctl*",
        "basic.target.wants/*",
    ):
        for path in system.glob(pattern):
            path.unlink()
    for path in (root / "etc/systemd/system").glob("*.wants/*"):
        path.unlink()
    with (root / "etc/systemd/journald.conf").open("a") as conf:
        conf.write("ReadKMsg=no\n")
    (root / "sbin/init").unlink(missing_ok=True)
    (root / "sbin/init").symlink_to("/lib/systemd/systemd")
    (root / "usr/local/bin/containerd").unlink(missing_ok=True)
    (root / "usr/local/bin/containerd").symlink_to("/usr/bin/containerd")
    shutil.copytree(root / "usr/lib/cni", root / "opt/cni/bin", symlinks=True)
    chroot = ["/usr/sbin/chroot", str(root)]
    enable = ["systemctl", "enable", "kubelet.service", "containerd.service"]
    subprocess.run([*chroot, *enable, "undo-mount-hacks.service"], check=False)
    subprocess.run([*chroot, "systemctl", "mask", "systemd-binfmt.service"], check=True)
    # The runtime spec template kind's containerd config names: containerd's default spec with
    # kind's mount hook and without rlimits.
    hook = '{"path": "/kind/bin/mount-product-files.sh"}'
    jq = f".hooks.createContainer += [{hook}] | del(.process.rlimits)"
    spec = subprocess.run(
        [*chroot, "sh", "-c", f"ctr oci spec | jq '{jq}'"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (root / "etc/containerd/cri-base.json").write_text(spec)
    # No process here may lower oom_score_adj (CAP_SYS_RESOURCE is outside the bounding set):
    # containerd clamps the kubelet's negative values instead, as rootless kind does.
    config = root / "etc/containerd/config.toml"
    text = config.read_text()
    config.write_text(
        text.replace("restrict_oom_score_adj = false", "restrict_oom_score_adj = true")
    )
    _install(tools.aux_binary("crictl"), root / "usr/local/bin/crictl", 0o755)
    for name in ("kubelet", "kubeadm", "kubectl"):
        _install(tools.cache_dir() / name, root / "usr/bin" / name, 0o755)
    (root / "kind/version").write_text(V)
    (root / "kind/manifests").mkdir(parents=True, exist_ok=True)
    for name in ("default-cni.yaml", "default-storage.yaml"):
        _install(tools.FILES / name, root / "kind/manifests" / name, 0o644)
    _install(tools.FILES / "10-bridge.conflist", root / "etc/cni/net.d/10-bridge.conflist", 0o644)
    (root / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)


def build_node(work: Path) -> str:
    """The node image (cached in the e2e's docker data root); returns its tag."""
    tag = node_image()
    if has_image(tag):
        return tag
    started = time.monotonic()
    root = work / "node"
    root.mkdir(parents=True)
    _node_root(root)
    base = tag.replace("kind-node", "kind-node-base")
    _import(root, base + "-rootfs")
    shutil.rmtree(root)
    # docker import cannot set STOPSIGNAL: a Dockerfile with no RUN adds it, offline.
    dockerfile = (
        f"FROM {base}-rootfs\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\n"
        'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]\n'
    )
    env = {**engine.environment(), "DOCKER_BUILDKIT": "0"}
    subprocess.run(
        [engine.DOCKER_CLI, "build", "-q", "-t", base, "-"],
        input=dockerfile,
        text=True,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    components = _component_images(work / "components")
    run = ["run", "-d", "--privileged", "--security-opt", "seccomp=unconfined"]
    cid = engine.docker(
        *run, "--entrypoint", "sleep", base, "infinity", capture_output=True
    ).stdout.strip()
    try:
        engine.docker("exec", cid, "sh", "-c", "containerd >/tmp/containerd.log 2>&1 &")
        wait = (
            "for i in $(seq 60); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done; exit 1"
        )
        engine.docker("exec", cid, "sh", "-c", wait)
        save = subprocess.Popen(
            [engine.DOCKER_CLI, "save", *components],
            stdout=subprocess.PIPE,
            env=engine.environment(),
        )
        ctr = ["ctr", "--namespace=k8s.io", "images", "import", "--all-platforms", "--no-unpack"]
        ctr += ["--digests", "-"]
        engine.docker("exec", "-i", cid, *ctr, stdin=save.stdout, stdout=subprocess.DEVNULL)
        if save.wait() != 0:
            raise RuntimeError("docker save of the component images failed")
        stop = (
            "kill $(pidof containerd); while pidof containerd; do sleep 0.2; done; rm -f /tmp/*.log"
        )
        engine.docker("exec", cid, "sh", "-c", stop, stdout=subprocess.DEVNULL)
        entry = 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'
        engine.docker("commit", "--change", entry, cid, tag, stdout=subprocess.DEVNULL)
    finally:
        engine.docker("rm", "-f", "-v", cid, stdout=subprocess.DEVNULL)
    for component in components:  # they live on in the node's containerd
        engine.docker("rmi", component, stdout=subprocess.DEVNULL)
    engine.docker("rmi", base, base + "-rootfs", stdout=subprocess.DEVNULL)
    print(f"e2e-kind: node image {tag}: {time.monotonic() - started:.0f} s", flush=True)
    return tag


def prune_nodes(keep: str) -> None:
    """Remove node images (and bases) of other hashes: older builds, or an interrupted one."""
    listing = engine.docker(
        "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", capture_output=True
    ).stdout.split()
    for tag in listing:
        if tag.startswith("gannet.local/kind-node") and tag != keep:
            engine.docker("rmi", tag, stdout=subprocess.DEVNULL)


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="gannet-kind-", dir=os.environ.get("TMPDIR", "/tmp")))
