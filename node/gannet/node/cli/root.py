"""The ``gannet`` command: run a broker and work with store directories.

Exit codes scripts can rely on (also in ``gannet --help`` and docs/cli.md): 0 success; 1 the
check failed or nothing was found (damage reported by ``store verify``, no message for ``store
get``/``query``); 2 wrong usage (click: unknown option, bad value, malformed endpoint or message
id); 3 the store could not be opened (not a store directory, held by a running broker,
unreadable, corrupt beyond recovery); 4 the broker could not be reached (``topic``, ``group``,
``message``, ``status``); 5 the broker refused the request (bad or reserved name, already
exists, refused change; also an unsigned call or a key without the right: the message names
``--access-key``/``--secret-key``). Bad input never prints a traceback: one line says what is
wrong (``tests/api/test_cli_bad_input.py`` runs every command with wrong arguments).
The broker commands take ``--access-key/--secret-key`` (env ``GANNET_ACCESS_KEY`` and
``GANNET_SECRET_KEY``) and ``--tls``/``--tls-ca`` for a broker with ``--auth-file`` and TLS.

Each subcommand group has its module: ``broker`` (:mod:`broker`), ``store`` (:mod:`store`),
``topic``/``group``/``pop`` (:mod:`admin`), ``message``/``status`` (:mod:`messages`),
``tier`` (:mod:`tier`), ``cluster`` (the package :mod:`cluster`), ``operator``
(:mod:`kube_operator`) and ``pipeline`` (:mod:`pipeline`); option blocks are defined once in
:mod:`options`, exit codes in :mod:`exits`. Importing them is cheap: the broker, the store
engine, boto3, request signing and the RocketMQ client package load inside the commands that
use them, so ``--help`` and the client commands start fast (``tests/test_cli_imports.py``).

Every command has ``--help``. Lists are rich tables (``-o json|yaml`` for scripts, never cut
when piped: :mod:`gannet.node.cli.output`); long work shows a progress bar. gRPC's C-core logging
stays quiet unless ``--verbose`` (:mod:`gannet.node.grpc_logging`).
"""

from __future__ import annotations

import logging

import click

from gannet.node import grpc_logging  # first: before grpc loads
from gannet.node.cli import admin, broker, kube_operator, messages, output, pipeline, store, tier
from gannet.node.cli.cluster import commands as cluster
from gannet.node.cli.exits import EXIT_CODES_HELP

_ = grpc_logging  # imported for its effect (GRPC_VERBOSITY before grpc loads)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="gannet", prog_name="gannet")
@click.option(
    "-v", "--verbose", is_flag=True, help="Log at INFO level to stderr (and gRPC's own errors)."
)
def main(verbose: bool) -> None:
    """Gannet: a RocketMQ-compatible, Raft-replicated message store."""
    output.fit_to_stdout()
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


for _command in (broker.broker, store.store, tier.tier, *admin.COMMANDS, *messages.COMMANDS):
    main.add_command(_command)
main.add_command(pipeline.pipeline)  # PySpark loads only when a job runs
main.add_command(kube_operator.operator)  # kopf loads only when the operator runs
main.add_command(cluster.cluster)


if __name__ == "__main__":
    main()
