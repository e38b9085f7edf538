"""The ``gannet`` command: run a broker and work with store directories.

Exit codes scripts can rely on (also in ``gannet --help`` and the README): 0 success; 1 the
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

``broker run`` serves RocketMQ 5 clients and the admin API; the admin commands live in
:mod:`gannet.node.api.commands`.

Every command has ``--help``. Lists are rich tables (``-o json|yaml`` for scripts, never cut
when piped: :mod:`gannet.node.output`); long work shows a progress bar. gRPC's C-core logging
stays quiet unless ``--verbose`` (:mod:`gannet.node.grpc_logging`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import fcntl
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import uvloop
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gannet.node import grpc_logging, output  # grpc_logging first: before grpc loads
from gannet.node.api import auth, commands, group_polling, message_commands, tls
from gannet.node.api.transaction_book import CheckLimits
from gannet.node.broker import serving
from gannet.node.metrics import http_serving
from gannet.node.output import Column, emit, output_option
from gannet.node.replication import commands as replication_commands
from gannet.node.replication import config as replication_config
from gannet.node.replication import peer_auth
from gannet.node.store import msgids, querying
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.errors import MessageIllegal, StoreError, StoreLocked
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore
from gannet.node.store.queues.consume_queues import Boundary
from gannet.node.store.upkeep import cleaning, verifying
from gannet.operator import commands as operator_commands
from gannet.pipeline import cli as pipeline_commands

console = output.console
err_console = output.err_console
_ = grpc_logging  # imported for its effect (GRPC_VERBOSITY before grpc loads)

EXIT_CHECK_FAILED = 1
EXIT_STORE_UNAVAILABLE = 3
DEFAULT_DATA_DIR = Path.home() / ".gannet" / "store"

data_dir_argument = click.argument(
    "data_dir", type=click.Path(path_type=Path, file_okay=False), metavar="DIR"
)


EXIT_CODES = (
    (0, "success"),
    (1, "check failed or nothing found"),
    (2, "wrong usage: unknown option, bad value, malformed endpoint or message id"),
    (3, "store unavailable: not a store directory, held by a running broker, unreadable"),
    (4, "broker unreachable"),
    (5, "broker refused the request: bad or reserved name, exists, not allowed"),
)
EXIT_CODES_HELP = "\b\nExit codes:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES)


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


# ---------------------------------------------------------------------------- broker
@main.group()
def broker() -> None:
    """Run a broker node."""


@broker.command("run")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_DATA_DIR,
    show_default=True,
    help="Store directory (created if missing).",
)
@click.option(
    "--flush",
    type=click.Choice(["async", "sync"]),
    default="async",
    show_default=True,
    help="async: flush every 500 ms; sync: answer writers after fdatasync (group commit).",
)
@click.option("--file-size-mb", type=click.IntRange(1, 4096), default=1024, show_default=True)
@click.option(
    "--listen",
    default="127.0.0.1:8081",
    show_default=True,
    help="host:port for RocketMQ 5 clients (apache.rocketmq.v2) and the admin API.",
)
@click.option("--cluster", "cluster_name", default="DefaultCluster", show_default=True)
@click.option(
    "--broker-name",
    default="broker-a",
    show_default=True,
    help="Name of this broker group (RocketMQ's brokerName); a cluster of several groups "
    "names them broker-0, broker-1, ...",
)
@click.option(
    "--cluster-seeds",
    default="",
    help="Comma-separated client endpoints (host:port) of members of the cluster's OTHER "
    "broker groups: routes then list every group's queues (polled every 2 s) and topic and "
    "consumer-group writes apply to every group. Default: this group is the whole cluster.",
)
@click.option(
    "--auto-create-topics",
    is_flag=True,
    help="Create unknown topics (MIXED type, 8 queues) when clients use them.",
)
@click.option(
    "--auto-create-groups",
    is_flag=True,
    help="Create unknown consumer groups (defaults of `gannet group create`) when clients "
    "use them, as RocketMQ's autoCreateSubscriptionGroup does. `make run` turns it on.",
)
@click.option(
    "--metrics-listen",
    default="127.0.0.1:5557",
    show_default=True,
    help="host:port for /metrics (Prometheus), /healthz and /readyz; '' disables it.",
)
@click.option(
    "--auth-file",
    type=click.Path(path_type=Path, exists=True),
    help="Require signed requests: access keys, secrets and pub/sub/admin rights (JSON/YAML "
    "file, or a directory mounted from a Kubernetes Secret). See docs/security.md.",
)
@click.option(
    "--auth-skew-s",
    type=click.FloatRange(1, 86400),
    default=900,
    show_default=True,
    help="Accepted distance of a request's x-mq-date-time from the broker clock.",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="PEM certificate of the client port (with --tls-key: TLS only).",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="PEM private key of --tls-cert.",
)
@click.option(
    "--tls-client-ca",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Require client certificates signed by this PEM CA (mutual TLS).",
)
@click.option(
    "--node-id",
    type=click.IntRange(1),
    help="This broker's id in its Raft group (with --peers); without it: a single node.",
)
@click.option(
    "--peers",
    help="Every member of the Raft group, this node included: "
    "id=host:peer_port/client_port,... (e.g. 1=10.0.0.1:8091/8081,2=10.0.0.2:8091/8081).",
)
@click.option(
    "--join",
    is_flag=True,
    help="Start a brand-new member of an existing group: empty, never campaigns, waits for "
    "`gannet cluster member add` on the leader. Needs --node-id (never used in the group "
    "before); --peers may name only this node (default: --peer-listen and --listen).",
)
@click.option(
    "--peer-listen",
    help="host:port of the Raft peer service (default: --listen's host, port 8091).",
)
@click.option(
    "--peer-tls-cert",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="PEM certificate of this node on the peer port (mutual TLS between Raft peers; with "
    "--peer-tls-key and --peer-tls-ca).",
)
@click.option(
    "--peer-tls-key",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="PEM private key of --peer-tls-cert.",
)
@click.option(
    "--peer-tls-ca",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Cluster CA (PEM): peers must present a certificate it signed, in both directions.",
)
@click.option(
    "--file-reserved-hours",
    type=click.FloatRange(0, 87600, min_open=True),
    default=72.0,
    show_default=True,
    help="Commit-log files older than this are deleted (at the --delete-when hour, or at once "
    "above --disk-max-used-ratio-percent), consumed or not (fileReservedTime).",
)
@click.option(
    "--delete-when",
    default="04",
    show_default=True,
    help="Local hours (';'-separated, 0-23) at which expired files are deleted (deleteWhen).",
)
@click.option(
    "--disk-max-used-ratio-percent",
    type=click.IntRange(10, 95),
    default=75,
    show_default=True,
    help="Above this disk usage expired files are deleted at any hour (diskMaxUsedSpaceRatio).",
)
@click.option(
    "--disk-clean-forcibly-ratio",
    type=click.FloatRange(0.30, 0.99),
    default=0.85,
    show_default=True,
    help="Above this disk usage unexpired files are deleted too, but only those every consumer "
    "group has consumed; if unconsumed messages remain, new writes are refused instead "
    "(see --delete-unconsumed).",
)
@click.option(
    "--disk-warning-ratio",
    type=click.FloatRange(0.35, 0.99),
    default=0.90,
    show_default=True,
    help="Above this disk usage new writes are refused whatever cleanup does.",
)
@click.option(
    "--delete-unconsumed",
    is_flag=True,
    help="Above --disk-clean-forcibly-ratio delete the oldest files even when a consumer group "
    "has not consumed their messages (RocketMQ's behaviour; each deletion is logged with the "
    "messages lost per group). Without it the broker refuses new writes instead.",
)
@click.option(
    "--force-recover",
    is_flag=True,
    help="Start even when recovery would cut commit-log data that was flushed (damage, not a "
    "torn write): cut at the last valid record, keeping the removed bytes in DIR/quarantine/ "
    "and a corrupt checkpoint as checkpoint.corrupt-<time>. Without it such a start is refused.",
)
@click.option(
    "--peer-secret-file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    envvar="GANNET_PEER_SECRET_FILE",
    help="Shared cluster secret (>= 16 bytes): every peer call carries an HMAC under it. "
    "Required for a group of several members without peer TLS [env GANNET_PEER_SECRET_FILE].",
)
@click.option(
    "--insecure-peers",
    is_flag=True,
    help="Accept unauthenticated peers (no peer TLS, no secret): anyone who reaches the peer "
    "port can steer the group. For a trusted test network only.",
)
@click.option(
    "--dedup-window-s",
    type=click.FloatRange(0, 3600),
    default=120,
    show_default=True,
    help="A send whose client message id was accepted this recently is answered with the "
    "original receipt instead of being stored again (retries across a failover); 0: off.",
)
@click.option(
    "--transaction-timeout-ms",
    type=click.IntRange(0, 86_400_000),
    default=6_000,
    show_default=True,
    help="Ask a producer about an open transaction once its half message is this old "
    "(RocketMQ transactionTimeOut).",
)
@click.option(
    "--transaction-check-interval-ms",
    type=click.IntRange(100, 86_400_000),
    default=60_000,
    show_default=True,
    help="Time between two checks of one open transaction (RocketMQ transactionCheckInterval).",
)
@click.option(
    "--transaction-check-max",
    type=click.IntRange(1, 1000),
    default=15,
    show_default=True,
    help="Checks before an unresolved transaction is discarded to TRANS_CHECK_MAX_TIME_TOPIC "
    "(RocketMQ transactionCheckMax).",
)
@click.option(
    "--event-loop",
    type=click.Choice(["uvloop", "asyncio"]),
    default="uvloop",
    show_default=True,
    help="Event loop of the gRPC server (uvloop: ~10% less CPU per RPC, bench/results/BROKER.md).",
)
def broker_run(
    event_loop: str,
    data_dir: Path,
    flush: str,
    file_size_mb: int,
    listen: str,
    cluster_name: str,
    broker_name: str,
    auto_create_topics: bool,
    auto_create_groups: bool,
    metrics_listen: str,
    auth_file: Path | None,
    auth_skew_s: float,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    node_id: int | None,
    peers: str | None,
    join: bool,
    peer_listen: str | None,
    peer_tls_cert: Path | None,
    peer_tls_key: Path | None,
    peer_tls_ca: Path | None,
    force_recover: bool,
    peer_secret_file: Path | None,
    insecure_peers: bool,
    file_reserved_hours: float,
    delete_when: str,
    disk_max_used_ratio_percent: int,
    disk_clean_forcibly_ratio: float,
    disk_warning_ratio: float,
    delete_unconsumed: bool,
    dedup_window_s: float,
    transaction_timeout_ms: int,
    transaction_check_interval_ms: int,
    transaction_check_max: int,
    cluster_seeds: str,
) -> None:
    """Open (and recover) the store and serve clients until SIGINT/SIGTERM.

    Disk space: expired files (--file-reserved-hours) are deleted as RocketMQ does; above
    --disk-clean-forcibly-ratio only consumed files are deleted early and new writes are refused
    rather than deleting unconsumed messages, unless --delete-unconsumed is given.
    """
    try:
        commands.check_endpoint(listen, port_min=0)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    host, _, port_text = listen.rpartition(":")
    if metrics_listen:
        try:
            http_serving.parse_listen(metrics_listen)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--metrics-listen") from None
    peer_tls = _peer_tls(peer_tls_cert, peer_tls_key, peer_tls_ca)
    try:
        seeds = group_polling.parse_seeds(cluster_seeds)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cluster-seeds") from None
    if disk_clean_forcibly_ratio > disk_warning_ratio:
        raise click.BadParameter(
            f"{disk_clean_forcibly_ratio} is above --disk-warning-ratio {disk_warning_ratio}; "
            "cleanup must start before writes are refused",
            param_hint="--disk-clean-forcibly-ratio",
        )
    policy = cleaning.CleanPolicy(
        file_reserved_hours,
        delete_when,
        disk_max_used_ratio_percent,
        disk_warning_ratio,
        disk_clean_forcibly_ratio,
        delete_unconsumed,
    )
    try:
        policy.validate()
    except StoreError as exc:
        raise click.BadParameter(str(exc), param_hint="--delete-when") from None
    config = StoreConfig(
        root_dir=data_dir,
        flush_mode=FlushMode.SYNC_FLUSH if flush == "sync" else FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=file_size_mb * 1024 * 1024,
        cluster_name=cluster_name,
        broker_name=broker_name,
        store_host=host.strip("[]") if host not in ("0.0.0.0", "::", "[::]") else "127.0.0.1",
        store_port=int(port_text),
        force_recover=force_recover,
        file_reserved_hours=file_reserved_hours,
        delete_when=delete_when,
        disk_max_used_ratio_percent=disk_max_used_ratio_percent,
        disk_warning_ratio=disk_warning_ratio,
        disk_clean_forcibly_ratio=disk_clean_forcibly_ratio,
        delete_unconsumed=delete_unconsumed,
    )
    broker_config = serving.with_listen(
        serving.BrokerConfig(
            store=config,
            auto_create_topics=auto_create_topics,
            auto_create_groups=auto_create_groups,
            metrics_listen=metrics_listen or None,
            auth_file=auth_file,
            auth_skew_s=auth_skew_s,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
            dedup_window_s=dedup_window_s,
            transaction_limits=CheckLimits(
                transaction_timeout_ms, transaction_check_interval_ms, transaction_check_max
            ),
            cluster_seeds=seeds,
            replication=_replication(
                node_id,
                peers,
                peer_listen,
                host,
                peer_tls,
                _peer_secret(peer_secret_file),
                insecure_peers=insecure_peers,
                join=join,
                client_port=int(port_text),
            ),
        ),
        listen,
    )
    try:
        running = serving.Broker(broker_config)
    except (auth.CredentialsError, tls.TlsFileError) as exc:
        raise click.BadParameter(str(exc)) from None
    loop_factory = uvloop.new_event_loop if event_loop == "uvloop" else None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_serve(running))
    except StoreError as exc:
        err_console.print(f"[red]cannot open store[/]: {exc}")
        sys.exit(EXIT_STORE_UNAVAILABLE)
    except OSError as exc:
        err_console.print(f"[red]cannot serve[/]: {exc}")
        sys.exit(EXIT_STORE_UNAVAILABLE)
    if running.phase == "failed":
        err_console.print(f"[red]broker stopped itself[/]: {running.failure}")
        sys.exit(EXIT_STORE_UNAVAILABLE)
    console.print("broker stopped; store closed cleanly")


def _peer_tls(
    cert: Path | None, key: Path | None, ca: Path | None
) -> replication_config.PeerTls | None:
    given = [cert, key, ca]
    if all(p is None for p in given):
        return None
    if cert is None or key is None or ca is None:
        raise click.BadParameter(
            "peer TLS needs all three of --peer-tls-cert, --peer-tls-key, --peer-tls-ca"
        )
    try:
        for path, what in ((cert, "certificate"), (key, "private key"), (ca, "cluster CA")):
            tls.read_pem(path, what)
    except tls.TlsFileError as exc:
        raise click.BadParameter(str(exc)) from None
    return replication_config.PeerTls(cert, key, ca)


def _peer_secret(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return peer_auth.load_secret(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--peer-secret-file") from None


def _replication(
    node_id: int | None,
    peers: str | None,
    peer_listen: str | None,
    host: str,
    peer_tls: replication_config.PeerTls | None = None,
    peer_secret: bytes | None = None,
    *,
    insecure_peers: bool = False,
    join: bool = False,
    client_port: int = 8081,
) -> replication_config.ReplicationConfig | None:
    if join:
        return _joining(
            node_id, peers, peer_listen, host, peer_tls, peer_secret, insecure_peers, client_port
        )
    if node_id is None and peers is None:
        if peer_listen is not None or peer_tls is not None or peer_secret is not None:
            raise click.BadParameter(
                "needs --node-id and --peers", param_hint="--peer-listen/--peer-tls-*"
            )
        return None
    if node_id is None or peers is None:
        raise click.BadParameter("give both --node-id and --peers (or neither)")
    try:
        members = replication_config.parse_peers(peers)
        config = replication_config.ReplicationConfig(
            node_id=node_id,
            peers=members,
            peer_listen=peer_listen or f"{host}:{replication_config.PEER_PORT_DEFAULT}",
            peer_tls=peer_tls,
            peer_secret=peer_secret,
        )
    except replication_config.ReplicationConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--peers") from None
    if len(members) > 1 and peer_tls is None and peer_secret is None and not insecure_peers:
        raise click.BadParameter(
            "a group of several members needs peer authentication: --peer-secret-file (the "
            "same secret on every member) or --peer-tls-*; --insecure-peers only on a trusted "
            "test network",
            param_hint="--peer-secret-file",
        )
    return config


def _joining(
    node_id: int | None,
    peers: str | None,
    peer_listen: str | None,
    host: str,
    peer_tls: replication_config.PeerTls | None,
    peer_secret: bytes | None,
    insecure_peers: bool,
    client_port: int,
) -> replication_config.ReplicationConfig:
    """``--join``: this node alone, with its own addresses; the group comes from the log."""
    if node_id is None:
        raise click.BadParameter("--join needs --node-id (an id never used in the group before)")
    listen = peer_listen or f"{host}:{replication_config.PEER_PORT_DEFAULT}"
    try:
        if peers is None:
            me = replication_config.parse_peer(f"{node_id}={listen}/{client_port}")
        else:
            named = {p.node_id: p for p in replication_config.parse_peers(peers)}
            if node_id not in named:
                raise click.BadParameter(
                    f"--peers does not name --node-id {node_id}; with --join it only needs this "
                    "node's own id=host:peer_port/client_port",
                    param_hint="--peers",
                )
            me = named[node_id]
        config = replication_config.ReplicationConfig(
            node_id=node_id,
            peers=(me,),
            peer_listen=listen,
            peer_tls=peer_tls,
            peer_secret=peer_secret,
            join=True,
        )
    except replication_config.ReplicationConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--peers/--peer-listen") from None
    if peer_tls is None and peer_secret is None and not insecure_peers:
        raise click.BadParameter(
            "a joining member needs the group's peer authentication: --peer-secret-file or "
            "--peer-tls-*; --insecure-peers only on a trusted test network",
            param_hint="--peer-secret-file",
        )
    return config


async def _serve(running: serving.Broker) -> None:
    await running.start()
    _print_state(running.store)
    endpoint = running.endpoint
    console.print(f"[green]broker serving[/] on {endpoint} (RocketMQ 5 gRPC + Gannet admin)")
    console.print(f"  create a topic: gannet topic create TopicTest --endpoint {endpoint}")
    console.print(f"  broker status:  gannet status --endpoint {endpoint}")
    console.print(f'  Python client:  ClientConfiguration("{endpoint}", Credentials())')
    if running.authenticator is not None:
        keys = len(running.authenticator.accounts)
        console.print(f"  authentication: on, {keys} access keys (clients: Credentials(ak, sk))")
    if running.config.tls_cert is not None:
        mutual = " with client certificates" if running.config.tls_client_ca else ""
        console.print(f"  TLS:            on{mutual} (Python client: tls_enable=True)")
    replication = running.config.replication
    if replication is not None and replication.peer_tls is not None:
        console.print("  peer TLS:       on, mutual (cluster CA)")
    if running.metrics_server is not None:
        host = running.config.metrics_listen or ""
        url = f"http://{host.rpartition(':')[0]}:{running.metrics_server.port}"
        console.print(f"  metrics:        {url}/metrics  (health: /healthz, /readyz)")
    console.print("press Ctrl-C to stop")
    await running.run_until_signalled()


def _print_state(store: MessageStore) -> None:
    stats = store.statistics()
    table = Table(title=f"Gannet store {store.config.root_dir}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for f in dataclasses.fields(stats):
        table.add_row(f.name, str(getattr(stats, f.name)))
    if store.recovery is not None:
        table.add_row("recovery", store.recovery.stop_reason)
    console.print(table)


# ---------------------------------------------------------------------------- store
@main.group()
def store() -> None:
    """Inspect, verify and query a store directory."""


@store.command("inspect")
@data_dir_argument
@output_option
def store_inspect(data_dir: Path) -> None:
    """Files, offsets, topics and queues of a store directory (read-only; a running broker may
    hold it: the figures are then a live snapshot)."""
    _require_store(data_dir)
    holder = held_by(data_dir)
    ins = verifying.inspect(data_dir)
    files = [{"name": name, "size": size} for name, size in ins.commitlog_files]
    queues = [
        {
            "topic": q.topic,
            "queue": q.queue_id,
            "files": q.files,
            "min_offset": q.min_offset,
            "max_offset": q.max_offset,
        }
        for q in ins.queues
    ]
    if holder is not None:
        state = f"held by {holder} (open now; figures are a live snapshot)"
    else:
        state = "last shutdown: " + ("clean" if ins.clean_shutdown else "ABNORMAL (abort file)")
    document = {
        "commitlog_files": files,
        "written_end": ins.commitlog_end,
        "held_by_broker": holder is not None,
        "clean_shutdown": None if holder is not None else ins.clean_shutdown,
        "queues": queues,
        "index_files": len(ins.index_files),
        "checkpoint": dict(ins.checkpoint),
    }
    queue_columns = (
        Column("topic", "topic"),
        Column("queue", "queue", numeric=True),
        Column("files", "files", numeric=True),
        Column("min_offset", "min offset", numeric=True),
        Column("max_offset", "max offset", numeric=True),
    )
    file_columns = (
        Column("name", "file"),
        Column("size", "size", numeric=True, show="{:,}".format),
    )
    emit(
        document,
        output.table("commit log", file_columns, files),
        f"written end: {ins.commitlog_end:,}",
        state,
        output.table("consume queues", queue_columns, queues),
        f"index files: {len(ins.index_files)}",
        *(f"checkpoint {name}: {value}" for name, value in ins.checkpoint.items()),
    )


def held_by(data_dir: Path) -> str | None:
    """``"a running broker (pid N)"`` while a process holds the store's lock, else None.

    Tries a shared ``flock`` on the lock file the broker holds exclusively (and lets go at
    once); the pid is the one the broker writes into its abort file.
    """
    try:
        fd = os.open(StoreConfig(root_dir=data_dir).lock_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        try:
            pid = (data_dir / "abort").read_text().strip()
        except OSError:
            pid = ""
        return "a running broker" + (f" (pid {pid})" if pid.isdigit() else "")
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@store.command("verify")
@data_dir_argument
@output_option
def store_verify(data_dir: Path) -> None:
    """Check every record's CRC, every consume-queue entry, and that every dispatched record has
    its entry; exit 1 on damage."""
    _require_store(data_dir)
    total = verifying.total_bytes(data_dir)
    columns = (
        TextColumn("verifying"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("verify", total=total)
        report = verifying.verify(data_dir, progress=lambda n: bar.advance(task, n))
    damage = [
        {"where": d.where, "from": d.start, "to": d.end, "reason": d.reason} for d in report.damage
    ]
    summary = (
        f"{report.records_ok:,} records and {report.cq_units_ok:,} consume-queue entries valid; "
        f"commit log ends at {report.commitlog_end:,}"
    )
    renderables: list[Any] = [summary]
    if report.clean:
        renderables.append("[green]store is clean[/]")
    else:
        damage_columns = (
            Column("where", "where"),
            Column("from", "from", numeric=True),
            Column("to", "to", numeric=True),
            Column("reason", "reason"),
        )
        renderables += [
            output.table("damage", damage_columns, damage),
            "[red]damage found[/]: a broker start recovers by cutting at the last valid record",
        ]
    emit(
        {
            "records_ok": report.records_ok,
            "consume_queue_entries_ok": report.cq_units_ok,
            "commitlog_end": report.commitlog_end,
            "records_without_entry": report.missing_units,
            "clean": report.clean,
            "damage": damage,
        },
        *renderables,
    )
    if not report.clean:
        sys.exit(EXIT_CHECK_FAILED)


@store.command("get")
@data_dir_argument
@click.option("--offset", type=click.IntRange(0), help="Commit-log offset of the record.")
@click.option(
    "--msg-id",
    callback=commands.message_id_callback,
    help="Message id: the client's (34 hex digits, as every table shows; found through the "
    "index) or an offset message id (32 or 56 hex digits).",
)
@click.option("--topic", help="With --queue-offset; narrows a --msg-id lookup.")
@click.option("--queue", "queue_id", type=click.IntRange(0), default=0, show_default=True)
@click.option("--queue-offset", type=click.IntRange(0))
@output_option
def store_get(
    data_dir: Path,
    offset: int | None,
    msg_id: str | None,
    topic: str | None,
    queue_id: int,
    queue_offset: int | None,
) -> None:
    """Print one message, by commit-log offset, message id or queue offset."""
    chosen = [offset is not None, msg_id is not None, queue_offset is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --offset, --msg-id, --topic/--queue-offset")
    if queue_offset is not None and topic is None:
        raise click.UsageError("--queue-offset needs --topic")
    with _opened(_offline_config(data_dir), start_services=False) as st:
        if offset is not None:
            found = _read_at(st, offset)
            msgs = [found] if found is not None else []
        elif msg_id is not None:
            msgs = by_message_id(st, msg_id, topic)
        else:
            assert topic is not None
            assert queue_offset is not None
            found = querying.by_queue_offset(st, topic, queue_id, queue_offset)
            msgs = [found] if found is not None else []
    if not msgs:
        err_console.print("no message there")
        sys.exit(EXIT_CHECK_FAILED)
    _print_messages(msgs)


def _read_at(st: MessageStore, offset: int) -> Message | None:
    """The record at a commit-log offset; None when no valid record starts there."""
    try:
        return st.read_message(offset)
    except (StoreError, ValueError, IndexError):
        return None


def by_message_id(st: MessageStore, msg_id: str, topic: str | None) -> list[Message]:
    """Messages with this id: an offset message id decodes to a commit-log offset; otherwise
    (or when nothing valid is there) the id is looked up as the client's unique key in the
    index, in ``topic`` or in every topic of the store."""
    try:
        decoded = msgids.decode_offset_msg_id(msg_id)
    except MessageIllegal:
        decoded = None
    if decoded is not None:
        found = _read_at(st, decoded.commit_offset)
        if found is not None and topic in (None, found.topic):
            return [found]
    topics = [topic] if topic is not None else sorted(_topics_of(st))
    messages: list[Message] = []
    for name in topics:
        messages += querying.by_key(st, name, msg_id, unique=True).messages
    return messages


def _topics_of(st: MessageStore) -> set[str]:
    names = {q.topic for q in st.queues.queues()}
    names.update(t.topic_name for t in st.topic_configs.list())
    return names


@store.command("query")
@data_dir_argument
@click.option("--topic", required=True)
@click.option("--key", help="A KEYS token.")
@click.option(
    "--uniq-key",
    callback=commands.message_id_callback,
    help="The client message id (UNIQ_KEY, as tables show); an offset message id works too.",
)
@click.option("--time", "time_text", help="Store time: epoch ms or ISO-8601; prints the offset.")
@click.option("--queue", "queue_id", type=click.IntRange(0), default=0, show_default=True)
@click.option("--upper", is_flag=True, help="With --time: last message at or before the time.")
@click.option("--max", "max_num", type=click.IntRange(1, 64), default=64, show_default=True)
@output_option
def store_query(
    data_dir: Path,
    topic: str,
    key: str | None,
    uniq_key: str | None,
    time_text: str | None,
    queue_id: int,
    upper: bool,
    max_num: int,
) -> None:
    """Find messages by key or unique key, or the queue offset for a store time."""
    if sum(x is not None for x in (key, uniq_key, time_text)) != 1:
        raise click.UsageError("give exactly one of --key, --uniq-key, --time")
    ts = _parse_time(time_text) if time_text is not None else None
    with _opened(_offline_config(data_dir), start_services=False) as st:
        if ts is not None:
            boundary = Boundary.UPPER if upper else Boundary.LOWER
            found = querying.offset_by_time(st, topic, queue_id, ts, boundary)
            emit(
                {
                    "topic": topic,
                    "queue": queue_id,
                    "time_ms": ts,
                    "boundary": boundary.name,
                    "offset": found,
                },
                f"{topic}/{queue_id} offset for {ts} ({boundary.name}): {found}",
            )
            return
        if key is not None:
            messages = querying.by_key(st, topic, key, max_num=max_num).messages
        else:
            assert uniq_key is not None
            messages = by_message_id(st, uniq_key, topic)
    if not messages:
        err_console.print("no message matches")
        sys.exit(EXIT_CHECK_FAILED)
    _print_messages(messages)


def _parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
        return int(when.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        raise click.BadParameter(
            f"{text!r} is neither epoch ms nor ISO-8601", param_hint="--time"
        ) from None


STORED_COLUMNS = (
    Column("topic", "topic"),
    Column("queue", "queue", numeric=True),
    Column("queue_offset", "queue offset", numeric=True),
    Column("commit_offset", "commit offset", numeric=True),
    Column("message_id", "message id"),
    Column("store_timestamp_ms", "stored", show=output.time_text),
    Column("keys", "keys"),
    Column("tag", "tag"),
    Column("body", "body"),
)


def _print_messages(msgs: list[Message]) -> None:
    rows = [
        {
            "topic": m.topic,
            "queue": m.queue_id,
            "queue_offset": m.queue_offset,
            "commit_offset": m.physical_offset,
            "message_id": m.uniq_key,
            "store_timestamp_ms": m.store_timestamp_ms,
            "keys": list(m.keys),
            "tag": m.tags,
            **output.body_fields(m.body, commands.BODY_SHOWN_CHARS),
        }
        for m in msgs
    ]
    table_rows = [{**r, "body": output.body_text(r)} for r in rows]
    emit(rows, output.table(None, STORED_COLUMNS, table_rows))


def _require_store(data_dir: Path) -> None:
    if not (data_dir / "commitlog").is_dir():
        err_console.print(f"{data_dir} is not a store directory (no commitlog/ inside)")
        sys.exit(EXIT_STORE_UNAVAILABLE)


def _offline_config(data_dir: Path) -> StoreConfig:
    _require_store(data_dir)
    files = verifying.commitlog_files(data_dir)
    config = StoreConfig(root_dir=data_dir)
    if files:
        config = dataclasses.replace(config, commitlog_file_size_bytes=files[0].stat().st_size)
    for _, _, qdir in verifying.consume_queue_dirs(data_dir):
        cq_files = [p for p in qdir.iterdir() if p.is_file() and p.name.isdigit()]
        if cq_files:
            units = cq_files[0].stat().st_size // verifying.CQ_UNIT_SIZE
            config = dataclasses.replace(config, consume_queue_units_per_file=units)
            break
    index_dir = data_dir / "index"
    index_files = sorted(index_dir.iterdir()) if index_dir.is_dir() else []
    if index_files:  # sizes follow the default ratio: items = 4 × slots
        slots = (index_files[0].stat().st_size - 40) // 84
        config = dataclasses.replace(config, index_hash_slots=slots, index_items_max=4 * slots)
    wheel = data_dir / "timerwheel"
    if wheel.exists():  # 2 × slots of 32 bytes
        config = dataclasses.replace(config, timer_wheel_slots=wheel.stat().st_size // 64)
    return config


@contextmanager
def _opened(config: StoreConfig, *, start_services: bool) -> Iterator[MessageStore]:
    st = MessageStore(config)
    try:
        st.open(start_services=start_services)
    except StoreLocked:
        holder = held_by(config.root_dir) or "another process"
        err_console.print(
            f"[red]cannot open store[/]: {config.root_dir} is held by {holder}; ask the broker "
            "instead (gannet message query, gannet topic describe) or stop it first",
            highlight=False,
        )
        sys.exit(EXIT_STORE_UNAVAILABLE)
    except StoreError as exc:
        err_console.print(f"[red]cannot open store[/]: {exc}")
        sys.exit(EXIT_STORE_UNAVAILABLE)
    try:
        if not start_services:
            st.dispatch.dispatch_available()
        yield st
    finally:
        st.close()


for _command in (*commands.COMMANDS, *message_commands.COMMANDS):
    main.add_command(_command)
main.add_command(pipeline_commands.pipeline)  # PySpark loads only when a job runs
main.add_command(operator_commands.operator)  # kopf loads only when the operator runs
main.add_command(replication_commands.cluster)


if __name__ == "__main__":
    main()
