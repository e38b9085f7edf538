"""TLS of a local cluster: ``gannet cluster up --tls`` (or ``--tls-dir DIR``, or the user's own
``--tls-cert/--tls-key/--tls-ca``): which certificate each member runs with.

Generated (``--tls``): ``DATA_ROOT/tls/`` (or ``--tls-dir``) holds a cluster CA (``ca.crt``,
its key ``ca.key``) and one certificate per member, ``<member>.crt``/``<member>.key`` (member
``broker-a-node1``, or ``broker-<g>-node<i>`` with several groups: :func:`member_name`),
created once and reused by the next ``up`` (:mod:`pki` makes and checks them), which
re-issues a member certificate from the same CA when it expires within ``--tls-warn-days``
(or ``--renew-certs``) and warns about any certificate that still does
(:mod:`cert_expiry`). Own files: one certificate serves every member (they all listen
on ``--host``); never rewritten, only warned about. Each member runs with its certificate on the
client port (TLS only) and on the peer port (mutual TLS, cluster CA), and trusts the CA when it
calls the other groups (``--cluster-tls-ca``):
:meth:`~gannet.node.cli.cluster.certs.ClusterTls.argv`.

Called by :mod:`commands` (``cluster up`` and :func:`~commands.start_cluster`).
``cryptography`` is loaded only when TLS is asked for (:func:`prepare`): it would add about
0.2 s to the start of every ``gannet`` command.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import click

from gannet.node.cli.cluster.certs import ClusterTls

TLS_DIR_NAME = "tls"
WARN_DAYS_DEFAULT = 30
"""Warn about certificates that expire within this many days; renew the generated members'."""


def member_name(broker_name: str, node_id: int) -> str:
    return f"{broker_name}-node{node_id}"


def prepare(
    data_root: Path,
    members: Sequence[str],
    host: str,
    *,
    tls: bool,
    tls_dir: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    ca_file: Path | None,
    warn_days: int = WARN_DAYS_DEFAULT,
    renew: bool = False,
) -> ClusterTls | None:
    """``cluster up``'s TLS options → the members' certificates (None: TLS off). Usage errors
    for an incomplete or contradictory choice. Generated member certificates that expire
    within ``warn_days`` (every one with ``renew``) are re-issued from the cluster CA first;
    then every certificate that still expires within ``warn_days`` gets a warning on stderr
    (:mod:`cert_expiry`)."""
    own = (cert_file, key_file, ca_file)
    if any(p is not None for p in own):
        if cert_file is None or key_file is None or ca_file is None:
            raise click.UsageError(
                "your own certificates need all three of --tls-cert, --tls-key and --tls-ca "
                "(or use --tls to have cluster up create them)"
            )
        if tls_dir is not None:
            raise click.UsageError(
                "--tls-dir is where cluster up keeps the certificates it creates; with your "
                "own --tls-cert/--tls-key/--tls-ca leave it out"
            )
        if renew:
            raise click.UsageError(
                "--renew-certs re-issues the certificates cluster up created; your own "
                "--tls-cert is renewed by the CA that issued it (cluster up only warns about it)"
            )
        from gannet.node.cli.cluster import (  # noqa: PLC0415 (module docstring: start time)
            cert_expiry,
            pki,
        )

        found = pki.provided(cert_file, key_file, ca_file, members, host)
        renewals = cert_expiry.Renewals()
        cert_expiry.check_up(found, renewals, tls_dir=None, warn_days=warn_days)
        return found
    if tls or tls_dir is not None:
        from gannet.node.cli.cluster import (  # noqa: PLC0415 (module docstring: start time)
            cert_expiry,
            pki,
        )

        directory = tls_dir or data_root / TLS_DIR_NAME
        now = dt.datetime.now(dt.UTC)
        renewals = cert_expiry.renew_members(
            directory, members, warn_days=warn_days, force=renew, now=now
        )
        found = pki.generated(directory, members, host)
        cert_expiry.check_up(found, renewals, tls_dir=directory, warn_days=warn_days)
        return found
    if renew:
        raise click.UsageError("--renew-certs renews the certificates of --tls; add --tls")
    return None
