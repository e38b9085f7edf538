"""A real S3 server for the tier tests: SeaweedFS's ``weed server -s3``, built from the Go proxy.

- **Build.** ``weed`` (SeaweedFS, Apache-2.0) is built by the small Go module in
  ``e2e/tier/weed/`` (``github.com/seaweedfs/seaweedfs`` at the pseudo-version pinned in its
  ``go.mod``; ``CGO_ENABLED=0 go build github.com/seaweedfs/seaweedfs/weed``) and cached as
  ``$GANNET_S3_CACHE/weed-<commit>`` (default ``~/.cache/gannet-s3/``). A cold build takes minutes
  on 2 cores, so it never runs inside a test: ``make e2e-tier`` runs
  ``python -m e2e.tier.seaweedfs build`` first, and the fixture skips with a message naming the
  command when the binary is missing. MinIO's server is AGPL and is not used.
- **Serve.** :class:`SeaweedS3` starts one ``weed server`` (master, volume, filer and S3 gateway
  in one process) on free 127.0.0.1 ports with its data in a temporary directory, with one S3
  identity (access key + secret, so requests are really signed and checked), waits until its
  bucket (:data:`BUCKET`) can be created and an object written and read back, and on
  :meth:`SeaweedS3.stop` kills the process group and removes the directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from gannet.node.store.tier import buckets, errors

HERE = Path(__file__).resolve().parent
GO_MODULE = HERE / "weed"
SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
ACCESS_KEY = "gannet-tier-test"
SECRET_KEY = "gannet-tier-test-secret"
START_TIMEOUT_S = 60.0
# One bucket per server: SeaweedFS grows 7 volumes per bucket (a collection), so tests share it
# and keep apart by key prefix.
BUCKET = "gannet-tier"


def cache_dir() -> Path:
    return Path(os.environ.get("GANNET_S3_CACHE") or Path.home() / ".cache" / "gannet-s3")


def weed_binary() -> Path:
    """Where the pinned ``weed`` is cached (named by its commit, so a version bump rebuilds)."""
    return cache_dir() / f"weed-{SEAWEEDFS_VERSION.rsplit('-', 1)[1]}"


def build(*, force: bool = False) -> Path:
    """Build ``weed`` unless cached (``go`` must be on PATH), at ``nice -n 19``."""
    target = weed_binary()
    if not force and os.access(target, os.X_OK):
        return target
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("go is not on PATH: SeaweedFS's weed builds with it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".building")
    started = time.monotonic()
    print(f"building weed {SEAWEEDFS_VERSION} into {target} (minutes) ...", flush=True)
    subprocess.run(
        [
            "nice",
            "-n",
            "19",
            go,
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(staging),
            f"{SEAWEEDFS_MODULE}/weed",
        ],
        cwd=GO_MODULE,
        env={**os.environ, "CGO_ENABLED": "0"},
        check=True,
    )
    staging.replace(target)  # only a complete binary reaches the cache
    print(f"built in {time.monotonic() - started:.0f} s", flush=True)
    return target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SeaweedS3:
    """One ``weed server -s3`` on 127.0.0.1; use as a context manager or start()/stop()."""

    def __init__(self, binary: Path | None = None) -> None:
        self.binary = binary or weed_binary()
        self.workdir = Path(tempfile.mkdtemp(prefix="gannet-seaweedfs-"))
        self.s3_port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.s3_port}"
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self._process: subprocess.Popen[bytes] | None = None
        # Chosen once: a restart (kill() then start()) serves the same endpoint and data.
        self._ports = {name: free_port() for name in ("master", "volume", "filer")}
        self._grpc_ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}

    def _command(self) -> list[str]:
        config = self.workdir / "s3.json"
        identity = {
            "name": "gannet",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        (self.workdir / "data").mkdir(exist_ok=True)
        ports, grpc = self._ports, self._grpc_ports
        return [
            str(self.binary),
            "server",
            f"-dir={self.workdir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={grpc['master']}",
            "-master.volumeSizeLimitMB=64",
            # One master: its Raft election after a restart need not wait the default 10 s.
            "-master.electionTimeout=1s",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={grpc['volume']}",
            "-volume.max=8",
            "-filer",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={grpc['filer']}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={grpc['s3']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            "-debug.port=0",
            "-metricsPort=0",
        ]

    def start(self, *, probe_bucket: str = BUCKET) -> SeaweedS3:
        """Start the server and return once an object can be written and read back."""
        if not os.access(self.binary, os.X_OK):
            raise FileNotFoundError(
                f"{self.binary} is missing: build it with `python -m e2e.tier.seaweedfs build`"
            )
        log = (self.workdir / "weed.log").open("ab")
        # Its glog files go to the temporary directory: ours, removed with it (they were left
        # in /tmp). Its local sockets do not follow TMPDIR: stop() removes them.
        environment = {**os.environ, "TMPDIR": str(self.workdir)}
        self._process = subprocess.Popen(
            self._command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=environment,
        )
        log.close()
        self._wait_ready(probe_bucket)
        return self

    def _wait_ready(self, probe_bucket: str) -> None:
        bucket = buckets.S3Bucket(self.bucket_config(probe_bucket, attempts_max=1, timeout_s=15.0))
        deadline = time.monotonic() + START_TIMEOUT_S
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise RuntimeError(f"weed server exited; log: {self.log_tail()}")
            try:
                bucket.create_bucket()
                probe = self.workdir / "00000000000000000000"
                probe.write_bytes(b"ready")
                bucket.put_file("probe/ready", probe, md5_digest=hashlib.md5(b"ready").digest())
                if bucket.get_range("probe/ready", 0, 5) != b"ready":
                    raise errors.TierUnavailable("probe object read back wrong")
            except errors.TierError as exc:
                last_error = exc
                time.sleep(0.2)  # polling a starting server, with a deadline
                continue
            return
        raise TimeoutError(
            f"weed server not ready in {START_TIMEOUT_S} s: {last_error}; {self.log_tail()}"
        )

    def bucket_config(
        self, bucket: str, *, attempts_max: int = 2, timeout_s: float = 5.0
    ) -> buckets.BucketConfig:
        return buckets.BucketConfig(
            endpoint_url=self.endpoint_url,
            bucket=bucket,
            access_key=self.access_key,
            secret_key=self.secret_key,
            connect_timeout_s=timeout_s,
            read_timeout_s=timeout_s,
            attempts_max=attempts_max,
        )

    def log_tail(self, lines: int = 20) -> str:
        path = self.workdir / "weed.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def kill(self) -> None:
        """SIGKILL the server's process group and keep its data: :meth:`start` again restarts
        it on the same ports (a bucket outage in tests)."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=10)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP the server's process group: it keeps its sockets but answers nothing (a
        hung bucket: connections are accepted by the kernel, reads time out)."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Kill the server's process group and remove its directory."""
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
        ports = {*self._ports.values(), *self._grpc_ports.values(), self.s3_port}
        for port in ports:  # /tmp/seaweedfs-<server>[-grpc]-<port>.sock, named by the server
            for socket_file in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                socket_file.unlink(missing_ok=True)

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SeaweedFS for the tier tests: build or check it")
    parser.add_argument("action", choices=("build", "check"))
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    if args.action == "build":
        print(build(force=args.force))
    if not os.access(weed_binary(), os.X_OK):
        print(
            f"{weed_binary()} is missing: run `python -m e2e.tier.seaweedfs build`", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
