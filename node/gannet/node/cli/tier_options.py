"""The ``--tier-*`` options of ``gannet store`` and what they open: a tiered store's bucket
and manifest.

All or none: ``--tier-bucket``, ``--tier-endpoint``, ``--tier-credentials-file`` (read as
``gannet broker run`` reads it: :mod:`gannet.node.store.tier.credentials_file`) and
``--tier-prefix`` (the broker group's key prefix, ``docs/tiered-storage.md`` §2); optionally
``--tier-manifest`` (the manifest bytes of §3: ``<store>/tier/manifest.json`` on a broker, the
file a ``FileManifestLog`` keeps, or a copy). Without it the manifest's copy in the bucket,
``<prefix>/manifest.json`` (written by the leader after each committed change, so it may lag
the broker's manifest but is never ahead), is read; a bucket without one is a usage error that
says to pass ``--tier-manifest``. A missing or malformed option is a usage error naming it
(exit 2). Errors of the bucket itself map to the exit codes scripts read:
unreachable → 4, credentials or request refused → 5 (:func:`tier_exit`).

Used by :mod:`gannet.node.cli.store`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from gannet.node.cli.exits import EXIT_CHECK_FAILED, EXIT_REFUSED, EXIT_UNREACHABLE, fail
from gannet.node.store.tier import (
    buckets,
    credentials_file,
    errors,
    manifest_copy,
    manifests,
    naming,
    reading,
)

F = TypeVar("F", bound=Callable[..., Any])
NAMES = ("tier_bucket", "tier_endpoint", "tier_credentials_file", "tier_prefix")
"""The options a tiered store needs (``--tier-manifest`` is optional: module docstring)."""


@dataclass(frozen=True, slots=True)
class Tier:
    """An opened tier: the bucket, its configuration and the manifest read from the file."""

    config: buckets.BucketConfig
    bucket: buckets.S3Bucket
    manifest: manifests.Manifest

    def reader(self) -> reading.TierReader:
        manifest = self.manifest
        return reading.TierReader(self.bucket, lambda: manifest)


def tier_options(command: F) -> F:
    """Add the five ``--tier-*`` options; the command receives them as keyword arguments."""
    decorators = (
        click.option("--tier-bucket", help="Bucket holding the offloaded commit-log files."),
        click.option("--tier-endpoint", help="S3 endpoint URL of the bucket (http or https)."),
        click.option(
            "--tier-credentials-file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="AWS shared-credentials file with the bucket's access key and secret "
            "(the file gannet broker run --tier-credentials-file reads).",
        ),
        click.option("--tier-prefix", help="Key prefix of this broker group (gannet/<c>/<g>)."),
        click.option(
            "--tier-manifest",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Tier manifest file (docs/tiered-storage.md §3); without it the copy the "
            "broker's leader keeps in the bucket, <prefix>/manifest.json, is read (it may lag "
            "the broker's manifest, never run ahead of it).",
        ),
    )
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def open_tier(values: dict[str, Any]) -> Tier | None:
    """The tier the options name, None when none is given; a usage error when only some are."""
    given = {name: values.get(name) for name in NAMES}
    manifest_path = values.get("tier_manifest")
    if all(v is None for v in given.values()):
        if manifest_path is not None:
            raise click.UsageError(
                "--tier-manifest needs the other --tier-* options (bucket, endpoint,"
                " credentials file, prefix)"
            )
        return None
    missing = [f"--{n.replace('_', '-')}" for n, v in given.items() if v is None]
    if missing:
        raise click.UsageError(f"a tiered store needs every --tier-* option; missing {missing}")
    try:
        credentials = credentials_file.load(Path(str(given["tier_credentials_file"])))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-credentials-file") from None
    try:
        config = buckets.BucketConfig(
            endpoint_url=str(given["tier_endpoint"]),
            bucket=str(given["tier_bucket"]),
            access_key=credentials.access_key,
            secret_key=credentials.secret_key,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-endpoint/--tier-bucket") from None
    prefix = str(given["tier_prefix"])
    try:
        naming.check_prefix(prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier-prefix") from None
    bucket = buckets.S3Bucket(config)
    if manifest_path is None:
        return Tier(config, bucket, read_bucket_copy(bucket, prefix))
    manifest = read_manifest(Path(str(manifest_path)))
    if manifest.prefix != prefix:
        raise click.BadParameter(
            f"the manifest is for prefix {manifest.prefix!r}, not {prefix!r}",
            param_hint="--tier-prefix",
        )
    return Tier(config, bucket, manifest)


def read_bucket_copy(bucket: buckets.S3Bucket, prefix: str) -> manifests.Manifest:
    """The manifest's copy in the bucket (module docstring); exits when it cannot be had."""
    where = f"s3://{bucket.config.bucket}/{naming.manifest_key(prefix)}"
    try:
        return manifest_copy.read_copy(bucket, prefix)
    except manifest_copy.NoManifestCopy:
        raise click.UsageError(
            f"no manifest in the bucket at {where}; pass --tier-manifest"
        ) from None
    except errors.ManifestCorrupt as exc:
        fail(f"[red]the manifest copy at {where} is damaged[/]: {exc}", EXIT_CHECK_FAILED)
    except errors.TierError as exc:
        tier_exit(exc)


def read_manifest(path: Path) -> manifests.Manifest:
    try:
        return manifests.decode(path.read_bytes())
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror}", param_hint="--tier-manifest") from None
    except errors.ManifestCorrupt as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--tier-manifest") from None


def tier_exit(exc: errors.TierError) -> NoReturn:
    """Exit with the code of a bucket error: 4 unreachable, 5 refused."""
    if isinstance(exc, errors.TierUnavailable):
        fail(f"[red]tier bucket unreachable[/]: {exc}", EXIT_UNREACHABLE)
    fail(f"[red]tier bucket refused the request[/]: {exc}", EXIT_REFUSED)
