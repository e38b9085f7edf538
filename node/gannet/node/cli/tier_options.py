"""The ``--tier-*`` options of ``gannet store`` and what they open: a tiered store's bucket
and manifest.

All or none: ``--tier-bucket``, ``--tier-endpoint``, ``--tier-credentials-file`` (read as
``gannet broker run`` reads it: :mod:`gannet.node.store.tier.credentials_file`),
``--tier-prefix`` (the broker group's key prefix, ``docs/tiered-storage.md`` §2) and
``--tier-manifest`` (the manifest bytes of §3: ``<store>/tier/manifest.json`` on a broker, the
file a ``FileManifestLog`` keeps, or a copy). A missing or malformed one is a
usage error naming it (exit 2). Errors of the bucket itself map to the exit codes scripts read:
unreachable → 4, credentials or request refused → 5 (:func:`tier_exit`).

Used by :mod:`gannet.node.cli.store` and :mod:`gannet.node.cli.pipeline` (whose jobs may also
read the manifest from the bucket's ``<prefix>/manifest.json``: ``open_tier``'s
``manifest_from_bucket``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from gannet.node.cli.exits import EXIT_REFUSED, EXIT_UNREACHABLE, fail
from gannet.node.store.tier import buckets, credentials_file, errors, manifests, reading

F = TypeVar("F", bound=Callable[..., Any])
NAMES = ("tier_bucket", "tier_endpoint", "tier_credentials_file", "tier_prefix", "tier_manifest")


@dataclass(frozen=True, slots=True)
class Tier:
    """An opened tier: the bucket, its configuration and the manifest read from the file."""

    config: buckets.BucketConfig
    bucket: buckets.S3Bucket
    manifest: manifests.Manifest

    def reader(self) -> reading.TierReader:
        manifest = self.manifest
        return reading.TierReader(self.bucket, lambda: manifest)


def tier_options(
    command: F, *, manifest_help: str = "Tier manifest file (docs/tiered-storage.md §3)."
) -> F:
    """Add the five ``--tier-*`` options; the command receives them as keyword arguments.
    ``manifest_help``: the help of ``--tier-manifest`` (a command whose manifest may also come
    from the bucket says so)."""
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
            help=manifest_help,
        ),
    )
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


ManifestFromBucket = Callable[[buckets.S3Bucket, str], manifests.Manifest]
"""Reads the manifest from the bucket, given the bucket and the prefix (a command that allows
``--tier-manifest`` to be left out passes one to :func:`open_tier`)."""


def open_tier(
    values: dict[str, Any], *, manifest_from_bucket: ManifestFromBucket | None = None
) -> Tier | None:
    """The tier the options name, None when none is given; a usage error when only some are.
    With ``manifest_from_bucket``, ``--tier-manifest`` may be left out: the manifest is then
    what that function reads from the bucket (its errors are the caller's to report)."""
    given = {name: values.get(name) for name in NAMES}
    if all(v is None for v in given.values()):
        return None
    optional = {"tier_manifest"} if manifest_from_bucket is not None else set()
    missing = [
        f"--{n.replace('_', '-')}" for n, v in given.items() if v is None and n not in optional
    ]
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
    bucket = buckets.S3Bucket(config)
    if given["tier_manifest"] is None and manifest_from_bucket is not None:
        manifest = manifest_from_bucket(bucket, str(given["tier_prefix"]))
    else:
        manifest = read_manifest(Path(str(given["tier_manifest"])))
    if manifest.prefix != given["tier_prefix"]:
        raise click.BadParameter(
            f"the manifest is for prefix {manifest.prefix!r}, not {given['tier_prefix']!r}",
            param_hint="--tier-prefix",
        )
    return Tier(config, bucket, manifest)


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
