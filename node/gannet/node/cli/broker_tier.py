"""The ``--tier-*`` options of ``gannet broker run``: tiered storage (docs/tiered-storage.md).

:func:`tier_options` adds the options to the command; :func:`tier_config` is the one place they
are checked together and turned into a :class:`TierConfig` (None without ``--tier-endpoint``).
Every problem is a ``click.BadParameter`` naming the option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gannet.node.store.tier import buckets, credentials_file, naming, planning, reading
from gannet.node.store.tier.offloading import TierConfig

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_REGION = "us-east-1"

_OPTIONS = (
    click.option(
        "--tier-endpoint",
        metavar="URL",
        help="S3-compatible endpoint (http(s)://host:port) of the tier: sealed commit-log files "
        "are offloaded to it and deleted locally once recorded in the replicated manifest. "
        "Without it everything stays local and the other --tier-* options are refused.",
    ),
    click.option("--tier-bucket", metavar="NAME", help="Bucket of the tier (must exist)."),
    click.option(
        "--tier-prefix",
        metavar="PREFIX",
        help="Key prefix of this broker group's objects, e.g. gannet/<cluster>/<group> "
        "(letters, digits and . _ = - in '/'-separated segments); objects are "
        "<prefix>/commitlog/<20-digit offset>.",
    ),
    click.option(
        "--tier-credentials-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="File with 'aws_access_key_id = ...' and 'aws_secret_access_key = ...' lines "
        "(AWS shared-credentials spelling).",
    ),
    click.option(
        "--tier-region",
        default=None,
        help="Region the requests are signed for  [default: us-east-1].",
    ),
    click.option(
        "--tier-offload-after-s",
        type=click.FloatRange(0, 10 * 365 * 86400),
        default=3600.0,
        show_default=True,
        help="Offload a sealed, committed commit-log file once it is this old.",
    ),
    click.option(
        "--tier-offload-disk-ratio",
        type=click.FloatRange(0, 1, min_open=True),
        default=0.7,
        show_default=True,
        help="Offload sealed files sooner while the disk is more used than this "
        "(used / (used + available), as df).",
    ),
    click.option(
        "--tier-local-retention-bytes",
        type=click.IntRange(0),
        default=0,
        show_default=True,
        help="Keep the newest offloaded files up to this many bytes on local disk too (a hot "
        "cache for consumers near the head); older offloaded files are deleted locally.",
    ),
    click.option(
        "--tier-uploads-per-pass",
        type=click.IntRange(1, 64),
        default=4,
        show_default=True,
        help="Files uploaded at most per offload pass.",
    ),
    click.option(
        "--tier-remote-retention-s",
        type=click.FloatRange(0, 100 * 365 * 86400),
        default=None,
        help="Expire offloaded files from the tier this long after their upload: the manifest "
        "forgets them (through the Raft log), then their objects are deleted. Never a file "
        "still on local disk, never the tier's newest file. 0 or absent: keep forever.",
    ),
    click.option(
        "--tier-remote-bytes-max",
        type=click.IntRange(0),
        default=None,
        help="Expire the oldest offloaded files while the tier holds more than this many bytes "
        "(same rules as --tier-remote-retention-s). 0 or absent: no limit.",
    ),
    click.option(
        "--tier-sweep-interval-s",
        type=click.FloatRange(1, 7 * 86400),
        default=600.0,
        show_default=True,
        help="How often the leader lists <prefix>/commitlog/ and deletes objects the manifest "
        "does not record and no upload can still record (orphans of a crash); also once at "
        "every start.",
    ),
    click.option(
        "--tier-orphan-grace-s",
        type=click.FloatRange(60, 30 * 86400),
        default=3600.0,
        show_default=True,
        help="An unrecorded object at or past the tier's end (possibly an upload in flight) "
        "is swept only once it is this old; objects below the tier's end never can be "
        "recorded and go at the next sweep.",
    ),
    click.option(
        "--tier-pass-interval-s",
        type=click.FloatRange(0.1, 3600),
        default=10.0,
        show_default=True,
        help="Time between offload passes; after a failed pass (bucket unreachable) the wait "
        "doubles up to 300 s. Writes never wait for the tier.",
    ),
    click.option(
        "--tier-cache-bytes",
        type=click.IntRange(0),
        default=reading.ReadOptions().disk_cache_bytes_max,
        show_default=True,
        help="Bytes of offloaded files cached on local disk under <store>/tiercache/ (kept "
        "across restarts, least recently used deleted first; 0: no disk cache).",
    ),
    click.option(
        "--tier-memory-cache-bytes",
        type=click.IntRange(1 << 20),
        default=reading.ReadOptions().memory_cache_bytes_max,
        show_default=True,
        help="Bytes of offloaded files cached in memory, in front of the disk cache.",
    ),
)


def tier_options(command: F) -> F:
    """Add the ``--tier-*`` options to ``command`` (their values arrive as keyword args)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def tier_config(
    *,
    tier_endpoint: str | None,
    tier_bucket: str | None,
    tier_prefix: str | None,
    tier_credentials_file: Path | None,
    tier_region: str | None,
    tier_offload_after_s: float,
    tier_offload_disk_ratio: float,
    tier_local_retention_bytes: int,
    tier_uploads_per_pass: int,
    tier_pass_interval_s: float,
    tier_remote_retention_s: float | None = None,
    tier_remote_bytes_max: int | None = None,
    tier_sweep_interval_s: float = 600.0,
    tier_orphan_grace_s: float = 3600.0,
    tier_cache_bytes: int = reading.ReadOptions().disk_cache_bytes_max,
    tier_memory_cache_bytes: int = reading.ReadOptions().memory_cache_bytes_max,
) -> TierConfig | None:
    """The tier of the options, None without ``--tier-endpoint`` (module docstring)."""
    given = {
        "--tier-bucket": tier_bucket,
        "--tier-prefix": tier_prefix,
        "--tier-credentials-file": tier_credentials_file,
        "--tier-region": tier_region,
        "--tier-remote-retention-s": tier_remote_retention_s,
        "--tier-remote-bytes-max": tier_remote_bytes_max,
    }
    if tier_endpoint is None:
        for name, value in given.items():
            if value is not None:  # an empty value too: it was given
                raise click.BadParameter(f"{name} needs --tier-endpoint", param_hint=name)
        return None
    if not tier_bucket:
        raise click.BadParameter("--tier-endpoint needs --tier-bucket", param_hint="--tier-bucket")
    if not tier_prefix:
        raise click.BadParameter("--tier-endpoint needs --tier-prefix", param_hint="--tier-prefix")
    if tier_credentials_file is None:
        raise click.BadParameter(
            "--tier-endpoint needs --tier-credentials-file", param_hint="--tier-credentials-file"
        )
    try:
        naming.check_prefix(tier_prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-prefix") from None
    try:
        secrets = credentials_file.load(tier_credentials_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-credentials-file") from None
    try:
        bucket = buckets.BucketConfig(
            endpoint_url=tier_endpoint,
            bucket=tier_bucket,
            access_key=secrets.access_key,
            secret_key=secrets.secret_key,
            region=DEFAULT_REGION if tier_region is None else tier_region,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-endpoint") from None
    policy = planning.TierPolicy(
        offload_age_s_min=tier_offload_after_s,
        local_use_ratio_max=tier_offload_disk_ratio,
        uploads_max=tier_uploads_per_pass,
        local_keep_bytes=tier_local_retention_bytes,
        remote_retention_s=tier_remote_retention_s or None,  # 0: keep forever
        remote_bytes_max=tier_remote_bytes_max or None,  # 0: no limit
    )
    return TierConfig(
        bucket=bucket,
        prefix=tier_prefix,
        policy=policy,
        pass_interval_s=tier_pass_interval_s,
        retry_backoff_s_max=max(300.0, tier_pass_interval_s),
        sweep_interval_s=tier_sweep_interval_s,
        orphan_grace_s=tier_orphan_grace_s,
        reads=reading.ReadOptions(
            memory_cache_bytes_max=tier_memory_cache_bytes, disk_cache_bytes_max=tier_cache_bytes
        ),
    )
