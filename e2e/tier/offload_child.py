"""A separate process that offloads commit-log files and dies by SIGKILL at one boundary.

``python -m e2e.tier.offload_child <config.json>``: the config names the endpoint, bucket,
credentials, manifest path, prefix, the files (in order), the boundary to die at and the
1-based occurrence of it (the n-th file reaching that boundary). Used by test_uploading.py to
crash a real offload between every two steps; the parent then resumes in its own process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from gannet.node.store.tier import buckets, uploading


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    bucket = buckets.S3Bucket(buckets.BucketConfig(**config["bucket"]))
    log = uploading.FileManifestLog(Path(config["manifest"]), config["prefix"])
    crash_at = uploading.Boundary(config["crash_at"])
    remaining = int(config["occurrence"])

    def on_boundary(boundary: uploading.Boundary) -> None:
        nonlocal remaining
        if boundary is crash_at:
            remaining -= 1
            if remaining == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    for name in config["files"]:
        uploading.offload(Path(name), bucket=bucket, log=log, now_ms=1, on_boundary=on_boundary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
