"""Session fixture of the tier suite (``make e2e-tier``): one real SeaweedFS S3 server.

The server starts once per session (about 10 s: SeaweedFS's filer waits for its lock ring before
the first write) on free 127.0.0.1 ports in a temporary directory, and is killed and removed at
the end. Tests share its one bucket and each gets its own key prefix, so they do not see each
other's objects. A missing
``weed`` binary skips the suite with the command that builds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.tier import seaweedfs, stores
from gannet.node.store.tier import buckets

_prefix_numbers = itertools.count()


@pytest.fixture(scope="session")
def seaweed() -> Iterator[seaweedfs.SeaweedS3]:
    if not seaweedfs.weed_binary().exists():
        pytest.skip(
            f"{seaweedfs.weed_binary()} is missing: run `python -m e2e.tier.seaweedfs build`"
        )
    with seaweedfs.SeaweedS3() as server:
        yield server


@pytest.fixture
def bucket(seaweed: seaweedfs.SeaweedS3) -> buckets.S3Bucket:
    """The session server's bucket (created when the server started)."""
    return buckets.S3Bucket(seaweed.bucket_config(seaweedfs.BUCKET))


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test of the session uses."""
    return f"gannet/test{next(_prefix_numbers)}/g0"


@pytest.fixture
def written(bucket: buckets.S3Bucket, prefix: str, tmp_path: Path) -> stores.Written:
    """A real store of 64 KiB commit-log files whose two oldest files are offloaded under
    ``prefix`` and deleted locally (:func:`stores.write_offloaded_store`)."""
    return stores.write_offloaded_store(bucket, prefix, tmp_path)
