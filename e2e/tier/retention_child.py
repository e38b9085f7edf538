"""A separate process that runs one pass of a broker's tier loop with remote retention on a real
store and dies by SIGKILL at one retention step.

``python -m e2e.tier.retention_child <config.json>``: the config names the endpoint, bucket,
credentials, store directory, prefix, the tier's byte limit, the clock, the step to die at
(``after-expire``: the expiry is committed, nothing deleted; ``after-delete``: after a delete)
and the 1-based occurrence of it. Used by test_retention.py; the parent then restarts the loop
in its own process, whose first pass sweeps.

:func:`offloader` is the loop over a store both use: the broker's own pieces
(:class:`~gannet.node.broker.tiering.StoreSide`, the single node's manifest log on
``<store>/tier/manifest.json``, :class:`~gannet.node.store.tier.offloading.Offloader`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from gannet.node.broker.tiering import StoreSide
from gannet.node.store.config import StoreConfig
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier import applied, buckets, offloading, planning, uploading


def offloader(
    store: MessageStore,
    bucket_config: buckets.BucketConfig,
    prefix: str,
    *,
    remote_bytes_max: int | None,
    clock_ms: Callable[[], int],
) -> offloading.Offloader:
    """The broker's tier loop over ``store``: offload at once, remote retention by bytes."""
    policy = planning.TierPolicy(
        offload_age_s_min=0,
        local_use_ratio_max=None,
        uploads_max=64,
        remote_bytes_max=remote_bytes_max,
    )
    config = offloading.TierConfig(bucket_config, prefix, policy)
    log = uploading.FileManifestLog(applied.manifest_path(store.config.root_dir), prefix)

    def tier_range() -> tuple[int, int] | None:  # as the broker tells its cleanup
        manifest = log.current()
        if manifest.start_offset is None or manifest.end_offset is None:
            return None
        return manifest.start_offset, manifest.end_offset

    store.cleaner.tier_range = tier_range
    return offloading.Offloader(
        config, StoreSide(store, None), log, buckets.S3Bucket(bucket_config), clock_ms=clock_ms
    )


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    bucket_config = buckets.BucketConfig(**config["bucket"])
    store_config = StoreConfig.for_tests(Path(config["store"]))
    remaining = int(config["occurrence"])

    def on_step(step: str) -> None:
        nonlocal remaining
        if step == config["crash_at"]:
            remaining -= 1
            if remaining == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    with MessageStore(store_config).open() as store:
        loop = offloader(
            store,
            bucket_config,
            config["prefix"],
            remote_bytes_max=int(config["remote_bytes_max"]),
            clock_ms=lambda: int(config["now_ms"]),
        )
        loop.remote.on_step = on_step
        if not loop.run_pass():
            print(loop.figures.last_failure, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
