"""``gannet cluster certs list|renew``: the certificates of ``gannet cluster up --tls``, their
expiry, and their renewal while the cluster runs or not.

``list`` prints one row per certificate — the CA, then each member: member, file, subject,
SANs, expiry, whole days left, whether the CA issued it, and its state (ok, expiring within
``--warn-days``, expired, not yet valid, invalid: unreadable, key not matching, another CA's) —
and a warning on stderr for each one that expires soon, saying what to do; ``-o json|yaml``
for scripts. It reads ``DATA_ROOT/tls/`` (or ``--tls-dir``), or the user's own
``--tls-cert/--tls-key/--tls-ca``. Exit codes: 0 every certificate is usable (some may expire
within ``--warn-days``: warned, still 0, unless ``--strict``); 1 a certificate is expired, not
yet valid or invalid (``cluster up`` would refuse it), the folder holds no certificates, or with
``--strict`` one expires within ``--warn-days``.

``renew`` re-issues member certificates from the cluster CA: those expiring within
``--warn-days`` (default), the MEMBERs named, or ``--all``; ``--ca`` first re-signs the CA
certificate with its own key (members and clients of the old one keep working). Running members
pick the new files up at their next TLS handshake; no restart. Exit 1 when a certificate that
was due or named could not be renewed (the reason is printed).

Registered on ``gannet cluster`` by :mod:`gannet.node.cli.cluster.commands`. The work is done by
:mod:`cert_expiry`, imported inside the commands (``cryptography`` costs every
``gannet`` command about 0.2 s at start).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gannet.node.cli import exits, options, output
from gannet.node.cli.cluster import tls as cluster_tls

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DATA_ROOT = Path("gannet-cluster")
WARN_DAYS_MAX = 36_500
MEMBER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A member name as :func:`tls.member_name` makes it (never a path)."""


def _minute(iso: str | None) -> str:
    """``2026-12-01T10:00:00+00:00`` as ``2026-12-01 10:00``."""
    return iso[:16].replace("T", " ") if iso else "-"


COLUMNS = (
    output.Column("member", "member"),
    output.Column("file", "file"),
    output.Column("subject", "subject"),
    output.Column("sans", "SANs", show=lambda v: ", ".join(v) if v else "-"),
    output.Column("not_after", "not after (UTC)", show=_minute),
    output.Column("days_left", "days left", numeric=True),
    output.Column("ca_ok", "CA ok"),
    output.Column("state", "state"),
    output.Column("problem", "problem"),
)


def _folder_options(command: F) -> F:
    for option in reversed(
        (
            click.option(
                "--data-root",
                type=click.Path(path_type=Path, file_okay=False),
                default=DEFAULT_DATA_ROOT,
                show_default=True,
                help="The --data-root of `cluster up`: its certificates are in DATA_ROOT/tls/.",
            ),
            click.option(
                "--tls-dir",
                type=click.Path(path_type=Path, file_okay=False),
                help="The --tls-dir of `cluster up` (instead of DATA_ROOT/tls/).",
            ),
            click.option(
                "--warn-days",
                type=click.IntRange(0, WARN_DAYS_MAX),
                default=cluster_tls.WARN_DAYS_DEFAULT,
                show_default=True,
                help="A certificate that expires within this many days is 'expiring'.",
            ),
        )
    ):
        command = option(command)
    return command


@click.group("certs")
def certs() -> None:
    """Certificates of `cluster up --tls`: expiry, issuer, renewal."""
    output.fit_to_stdout()


@certs.command("list")
@_folder_options
@click.option("--tls-cert", type=options.PEM_FILE, help="Your own certificate (`cluster up`'s).")
@click.option("--tls-key", type=options.PEM_FILE, help="Private key of --tls-cert.")
@click.option("--tls-ca", type=options.PEM_FILE, help="The CA that issued --tls-cert.")
@click.option(
    "--strict",
    is_flag=True,
    help="Also exit 1 when a certificate expires within --warn-days (for monitoring).",
)
@output.output_option
def certs_list(
    data_root: Path,
    tls_dir: Path | None,
    warn_days: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_ca: Path | None,
    strict: bool,
) -> None:
    """Each certificate with its subject, SANs, expiry, days left, issuer check and state.

    Exit codes: 0 all usable (expiring ones are warned about); 1 one is expired, not yet valid
    or invalid, none was found, or (--strict) one expires within --warn-days."""
    from gannet.node.cli.cluster import cert_expiry as expiry  # noqa: PLC0415 (docstring)
    from gannet.node.cli.cluster.certs import (  # noqa: PLC0415 (docstring)
        ClusterTls,
        MemberFiles,
    )

    now = dt.datetime.now(dt.UTC)
    own = (tls_cert, tls_key, tls_ca)
    if any(p is not None for p in own):
        if tls_cert is None or tls_key is None or tls_ca is None:
            raise click.UsageError(
                "your own certificates need all three of --tls-cert, --tls-key and --tls-ca"
            )
        files = ClusterTls(tls_ca, {expiry.EVERY_MEMBER: MemberFiles(tls_cert, tls_key)})
        reports = expiry.inspect_cluster(files, expiry.PROVIDED, warn_days=warn_days, now=now)
        folder = None
    else:
        folder = tls_dir or data_root / cluster_tls.TLS_DIR_NAME
        if not (folder / "ca.crt").exists() and not any(folder.glob("*.crt")):
            exits.fail(
                f"no certificates in {folder}: `gannet cluster up --tls` creates them there "
                "(give --data-root or --tls-dir of that cluster)",
                exits.EXIT_NOT_FOUND,
            )
        reports = expiry.inspect_dir(folder, warn_days=warn_days, now=now)
    rows = [r.document() for r in reports]
    title = f"Certificates of {folder}" if folder is not None else "Your own certificates"
    document = {"tls_dir": str(folder) if folder else None, "warn_days": warn_days,
                "certificates": rows}  # fmt: skip
    output.emit(document, output.table(title, COLUMNS, rows))
    expiry.announce(expiry.warnings(reports, tls_dir=folder), style="yellow")
    failed = [r for r in reports if r.state not in ("ok", "expiring")]
    expiry.announce(expiry.failure_lines(failed), style="red")
    if failed or (strict and any(r.state == "expiring" for r in reports)):
        sys.exit(exits.EXIT_CHECK_FAILED)


@certs.command("renew")
@click.argument("members", nargs=-1)
@_folder_options
@click.option("--all", "renew_all", is_flag=True, help="Renew every member certificate now.")
@click.option(
    "--ca",
    "renew_ca",
    is_flag=True,
    help="First re-sign the CA certificate with its own key for 10 years (certificates and "
    "clients of the old one keep working; give clients the new ca.crt before the old expires).",
)
def certs_renew(
    members: tuple[str, ...],
    data_root: Path,
    tls_dir: Path | None,
    warn_days: int,
    renew_all: bool,
    renew_ca: bool,
) -> None:
    """Re-issue member certificates from the cluster CA: those expiring within --warn-days,
    the MEMBERs named (e.g. broker-a-node1), or --all. Running members pick them up at their
    next TLS handshake; no restart. Your own --tls-cert files are never touched."""
    from gannet.node.cli.cluster import cert_expiry as expiry  # noqa: PLC0415 (docstring)

    for name in members:
        if not MEMBER_NAME.fullmatch(name):
            raise click.BadParameter(
                f"{name!r} is not a member name (such as broker-a-node1 or broker-0-node2)",
                param_hint="MEMBERS",
            )
    folder = tls_dir or data_root / cluster_tls.TLS_DIR_NAME
    if members and renew_all:
        raise click.UsageError("give MEMBERs or --all, not both")
    for name in members:
        if not (folder / f"{name}.crt").exists():
            raise click.BadParameter(
                f"no certificate {folder / (name + '.crt')}; `gannet cluster certs list` "
                "shows the members",
                param_hint="MEMBERS",
            )
    if not (folder / "ca.crt").exists():
        exits.fail(
            f"no cluster CA in {folder}: `gannet cluster up --tls` creates it there "
            "(give --data-root or --tls-dir of that cluster)",
            exits.EXIT_NOT_FOUND,
        )
    done = [expiry.renew_ca(folder)] if renew_ca else []
    outcome = expiry.renew_members(
        folder,
        members or None,
        warn_days=warn_days,
        force=renew_all or bool(members),
        now=dt.datetime.now(dt.UTC),
    )
    for line in expiry.renewal_lines([*done, *outcome.renewed], running=True):
        output.console.print(line, style="green", markup=False, highlight=False, soft_wrap=True)
    for name, why in outcome.skipped.items():
        output.err_console.print(
            f"TLS: {name} not renewed: {why}", style="red", markup=False, highlight=False
        )
    if not done and not outcome.renewed and not outcome.skipped:
        output.err_console.print(
            f"TLS: no member certificate in {folder} expires within {warn_days} days; nothing "
            "renewed (name MEMBERs or give --all to renew anyway)",
            markup=False,
            highlight=False,
        )
    if outcome.skipped:
        sys.exit(exits.EXIT_CHECK_FAILED)
