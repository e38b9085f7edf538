"""``gannet operator ...``: run the Kubernetes operator.

Registered on the ``gannet`` command in :mod:`gannet.node.cli.root` (named ``kube_operator``:
a module ``operator`` would shadow the standard library's when this folder is a script's). kopf and
the rest of the operator load only when ``run`` starts, so ``gannet --help`` stays quick. Exit
codes: 0 stopped by a signal, 2 wrong usage, 1 the operator failed (the error is printed).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from gannet.node.cli.options import PEM_FILE, seconds_option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def operator() -> None:
    """Kubernetes operator for GannetCluster, Topic and ConsumerGroup resources."""


def log_at(level: int) -> None:
    """Log at ``level`` from now on. The ``gannet`` group has already configured logging (at
    WARNING unless ``gannet -v``), which makes a second ``logging.basicConfig`` a no-op: so set
    the root logger's level itself, and add the stderr handler only when none is there yet."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root.setLevel(level)


@operator.command("run")
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch only this namespace (repeatable); default: every namespace.",
)
@click.option(
    "--metrics-listen",
    default="0.0.0.0:8080",
    show_default=True,
    help="host:port for /metrics and /healthz (liveness); '' disables them.",
)
@seconds_option(
    "--refresh-interval-s",
    default=30.0,
    help_text="How often each resource is re-reconciled and its status figures refreshed.",
)
@seconds_option(
    "--broker-timeout-s",
    default=5.0,
    help_text="Deadline of each admin API call to a broker.",
)
@seconds_option(
    "--stall-timeout-s",
    default=300.0,
    help_text="/healthz fails once the watches lag the API this long.",
)
@click.option(
    "--server",
    default=None,
    help="Kubernetes API URL used without credentials (e.g. kubectl proxy); default: the "
    "pod's service account, else KUBECONFIG or ~/.kube/config.",
)
@click.option(
    "--broker-endpoint",
    default=None,
    metavar="HOST:PORT",
    help="Send every admin call to this broker instead of the clusters' Services "
    "(development: brokers running outside Kubernetes).",
)
@click.option(
    "--group-endpoint",
    "group_endpoints",
    multiple=True,
    metavar="NAME=HOST:PORT",
    help="With --broker-endpoint: send the admin calls of the broker group whose objects are "
    "named NAME (the cluster's name for group 0, <cluster>-g<g> for the others) to HOST:PORT "
    "instead; repeatable.",
)
@click.option(
    "--access-key",
    envvar="GANNET_ACCESS_KEY",
    help="Admin access key the operator signs broker calls with (env GANNET_ACCESS_KEY; the "
    "chart sets it from its admin credentials Secret). A GannetCluster's "
    "security.auth.operatorCredentialsSecret overrides it for that cluster.",
)
@click.option(
    "--secret-key",
    envvar="GANNET_SECRET_KEY",
    help="Secret of --access-key (env GANNET_SECRET_KEY).",
)
@click.option(
    "--broker-tls",
    is_flag=True,
    envvar="GANNET_BROKER_TLS",
    help="Reach brokers over TLS (clusters with security.tls enabled use TLS anyway).",
)
@click.option(
    "--broker-tls-ca",
    type=PEM_FILE,
    envvar="GANNET_BROKER_TLS_CA",
    help="PEM CA trusted for brokers' TLS certificates (implies --broker-tls); default: the "
    "ca.crt of the cluster's TLS Secret, else the system roots.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG level.")
def run(
    namespaces: tuple[str, ...],
    metrics_listen: str,
    refresh_interval_s: float,
    broker_timeout_s: float,
    stall_timeout_s: float,
    server: str | None,
    broker_endpoint: str | None,
    group_endpoints: tuple[str, ...],
    access_key: str | None,
    secret_key: str | None,
    broker_tls: bool,
    broker_tls_ca: Path | None,
    verbose: bool,
) -> None:
    """Run the operator until SIGINT/SIGTERM."""
    from gannet.operator import contexts, running  # noqa: PLC0415 - kopf loads only now
    from gannet.operator.brokers import Security  # noqa: PLC0415

    try:
        ca_pem = broker_tls_ca.read_bytes() if broker_tls_ca is not None else None
        security = Security(
            access_key=access_key or None,
            secret_key=secret_key or None,
            tls=broker_tls or ca_pem is not None,
            ca_pem=ca_pem,
        )
    except (OSError, ValueError) as exc:
        raise click.BadParameter(
            str(exc), param_hint="--access-key/--secret-key/--broker-tls-ca"
        ) from None

    if metrics_listen:
        try:
            running.parse_listen(metrics_listen)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--metrics-listen") from None
    if broker_endpoint:
        try:
            running.parse_listen(broker_endpoint)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--broker-endpoint") from None
    overrides: dict[str, str] = {}
    for item in group_endpoints:
        base, _, endpoint = item.partition("=")
        try:
            if not base or not broker_endpoint:
                raise ValueError(f"{item!r}: use NAME=HOST:PORT, with --broker-endpoint")
            running.parse_listen(endpoint)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--group-endpoint") from None
        overrides[base] = endpoint
    log_at(logging.DEBUG if verbose else logging.INFO)
    options = running.Options(
        namespaces=namespaces,
        metrics_listen=metrics_listen or None,
        refresh_interval_s=refresh_interval_s,
        broker_timeout_s=broker_timeout_s,
        stall_timeout_s=stall_timeout_s,
        server=server,
        broker_security=security,
    )
    try:
        endpoints = contexts.FixedEndpoints(broker_endpoint, overrides) if broker_endpoint else None
        asyncio.run(running.run(options, endpoints=endpoints))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # report any failure and exit non-zero
        click.echo(f"operator failed: {exc}", err=True)
        sys.exit(1)
