"""``gannet broker run``: open (and recover) a store and serve clients until SIGINT/SIGTERM.

Declares the options; :mod:`gannet.node.cli.broker_options` checks them in one place and turns
them into a :class:`gannet.node.broker.serving.BrokerConfig`. This module runs
:class:`~gannet.node.broker.serving.Broker` on uvloop (or asyncio) and prints where it serves.
Exit code 3 when the store cannot be opened or the broker stops itself
(:mod:`gannet.node.cli.exits`); bad options are click errors (2).

Registered on the ``gannet`` group by :mod:`gannet.node.cli.root`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from gannet.node.cli import broker_tier, options, output
from gannet.node.cli.exits import EXIT_STORE_UNAVAILABLE
from gannet.node.store.upkeep import cleaning

if TYPE_CHECKING:
    from gannet.node.broker import serving
    from gannet.node.store.message_store import MessageStore

console = output.console
err_console = output.err_console
DEFAULT_DATA_DIR = Path.home() / ".gannet" / "store"
INDEX_HASH_SLOTS_DEFAULT = 5_000_000  # StoreConfig.index_hash_slots (RocketMQ maxHashSlotNum)
INDEX_HASH_SLOTS_MIN = 16
INDEX_HASH_SLOTS_MAX = 50_000_000


@click.group()
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
@click.option(
    "--file-size-mb",
    type=click.IntRange(1, 4096),
    default=1024,
    show_default=True,
    help="Size of each commit-log file (RocketMQ mappedFileSizeCommitLog); files are "
    "preallocated, so each takes this much disk from its creation.",
)
@click.option(
    "--index-hash-slots",
    type=click.IntRange(INDEX_HASH_SLOTS_MIN, INDEX_HASH_SLOTS_MAX),
    default=INDEX_HASH_SLOTS_DEFAULT,
    show_default=True,
    help="Hash slots of each message-key index file (RocketMQ maxHashSlotNum); a file holds "
    "4 × as many entries (maxIndexNum) and takes 84 bytes per slot: about 420 MB at the "
    "default. Lower it for small test or development stores; reopen a store with the value "
    "it was created with.",
)
@click.option(
    "--listen",
    default="127.0.0.1:8081",
    show_default=True,
    help="host:port for RocketMQ 5 clients (apache.rocketmq.v2) and the admin API.",
)
@click.option(
    "--remoting-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve the RocketMQ remoting protocol (4.x clients, DefaultMQProducer, "
    "DefaultMQPushConsumer) on this port of --listen's host; 10911 by convention, 0 any free "
    "port. Off by default. The name-server requests are answered there too (docs/remoting.md).",
)
@click.option(
    "--nameserver-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also answer the name-server requests (routes, cluster info, topic lists) on this "
    "port, RocketMQ's 9876 by convention: remoting clients set it as their namesrvAddr. "
    "Needs --remoting-port.",
)
@click.option(
    "--external-addresses",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON file naming every member's external addresses by its internal client endpoint "
    "(the operator writes it on Kubernetes): gRPC clients that dialed an external address get "
    "routes naming the leader's external address. Re-read when it changes "
    "(docs/kubernetes.md, 'Access from outside').",
)
@click.option(
    "--external-remoting-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="A remoting listener for clients outside: its name-server answers name the "
    "--external-addresses remoting addresses. Needs --remoting-port and --external-addresses.",
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
    "consumer-group writes apply to every group. Endpoints of this member's own group may be "
    "listed too (one list for every group); they are known as this group. Default: this group "
    "is the whole cluster.",
)
@click.option(
    "--cluster-access-key",
    envvar="GANNET_CLUSTER_ACCESS_KEY",
    help="Access key signing this member's polls of the other broker groups (needs admin in "
    "their --auth-file); with --cluster-secret-key. See docs/security.md, Broker groups.",
)
@click.option(
    "--cluster-secret-key",
    envvar="GANNET_CLUSTER_SECRET_KEY",
    help="Secret of --cluster-access-key (prefer the environment variable).",
)
@click.option(
    "--cluster-tls-ca",
    envvar="GANNET_CLUSTER_TLS_CA",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="PEM CA of the other broker groups' client-port certificates (default: "
    "--tls-client-ca, else the system roots); used when calling them over TLS.",
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
    type=options.PEM_FILE,
    help="PEM certificate of the client port (with --tls-key: TLS only).",
)
@click.option(
    "--tls-key",
    type=options.PEM_FILE,
    help="PEM private key of --tls-cert.",
)
@click.option(
    "--tls-client-ca",
    type=options.PEM_FILE,
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
    "`gannet cluster member add` (through any member). Needs --node-id (never used in the group "
    "before); --peers may name only this node (default: --peer-listen and --listen).",
)
@click.option(
    "--peer-listen",
    help="host:port of the Raft peer service (default: --listen's host, port 8091).",
)
@click.option(
    "--peer-tls-cert",
    type=options.PEM_FILE,
    help="PEM certificate of this node on the peer port (mutual TLS between Raft peers; with "
    "--peer-tls-key and --peer-tls-ca).",
)
@click.option(
    "--peer-tls-key",
    type=options.PEM_FILE,
    help="PEM private key of --peer-tls-cert.",
)
@click.option(
    "--peer-tls-ca",
    type=options.PEM_FILE,
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
    type=click.IntRange(*cleaning.MAX_USED_PERCENT_RANGE),
    default=75,
    show_default=True,
    help="Above this disk usage expired files are deleted at any hour (diskMaxUsedSpaceRatio).",
)
@click.option(
    "--disk-clean-forcibly-ratio",
    type=click.FloatRange(*cleaning.CLEAN_FORCIBLY_RATIO_RANGE),
    default=0.85,
    show_default=True,
    help="Above this disk usage unexpired files are deleted too, but only those every consumer "
    "group has consumed; if unconsumed messages remain, new writes are refused instead "
    "(see --delete-unconsumed).",
)
@click.option(
    "--disk-warning-ratio",
    type=click.FloatRange(*cleaning.WARNING_RATIO_RANGE),
    default=0.90,
    show_default=True,
    help="Above this disk usage new writes are refused whatever cleanup does.",
)
@click.option(
    "--disk-hysteresis-percentage-points",
    type=click.FloatRange(*cleaning.HYSTERESIS_PERCENTAGE_POINTS_RANGE),
    default=2.0,
    show_default=True,
    help="Once the disk rose above one of the ratios, writes are refused (or cleanup forced) "
    "until it falls this many percentage points below it, so writes do not flap. Disk usage is "
    "used / (used + available), as df's Use%.",
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
    type=options.PEM_FILE,
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
@broker_tier.tier_options
def broker_run(event_loop: str, **values: Any) -> None:
    """Open (and recover) the store and serve clients until SIGINT/SIGTERM.

    Disk space: expired files (--file-reserved-hours) are deleted as RocketMQ does; above
    --disk-clean-forcibly-ratio only consumed files are deleted early and new writes are refused
    rather than deleting unconsumed messages, unless --delete-unconsumed is given.

    Tiered storage (--tier-endpoint, --tier-bucket, --tier-prefix, --tier-credentials-file):
    sealed, committed commit-log files are offloaded to an S3-compatible bucket after
    --tier-offload-after-s or above --tier-offload-disk-ratio, recorded in the replicated
    manifest, then deleted locally; the disk rules above then count only files not yet
    offloaded. An unreachable bucket never blocks writes.
    """
    # The broker's modules load only when it runs: other commands start fast (test_cli_imports)
    import uvloop  # noqa: PLC0415

    from gannet.node.broker import serving  # noqa: PLC0415
    from gannet.node.cli import broker_options  # noqa: PLC0415
    from gannet.node.protocol import auth, tls  # noqa: PLC0415
    from gannet.node.store.errors import StoreError  # noqa: PLC0415

    broker_config = broker_options.broker_config(broker_options.BrokerOptions.of(values))
    try:
        running = serving.Broker(broker_config)
    except (auth.CredentialsError, tls.TlsFileError, ValueError) as exc:
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


async def _serve(running: serving.Broker) -> None:
    await running.start()
    _print_state(running.store)
    endpoint = running.endpoint
    console.print(f"[green]broker serving[/] on {endpoint} (RocketMQ 5 gRPC + Gannet admin)")
    console.print(f"  create a topic: gannet topic create TopicTest --endpoint {endpoint}")
    console.print(f"  broker status:  gannet status --endpoint {endpoint}")
    console.print(f'  Python client:  ClientConfiguration("{endpoint}", Credentials())')
    if running.remoting is not None:
        console.print(
            f'  4.x (remoting): setNamesrvAddr("{running.nameserver_endpoint}") '
            f"(remoting port {running.remoting_port}; docs/remoting.md)"
        )
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
