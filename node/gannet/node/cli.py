"""The ``gannet`` command: run a broker and work with store directories.

Exit codes scripts can rely on: 0 success; 1 the check failed or nothing was found (damage
reported by ``store verify``, no message for ``store get``/``query``); 2 wrong usage (click);
3 the store could not be opened (locked by a running broker, unreadable, corrupt beyond
recovery); 4 the broker could not be reached (``topic``, ``group``, ``message``, ``status``);
5 the broker refused the request (bad name or value, already exists, refused change; also an
unsigned call or a key without the right: the message names ``--access-key``/``--secret-key``).
The broker commands take ``--access-key/--secret-key`` (env ``GANNET_ACCESS_KEY`` and
``GANNET_SECRET_KEY``) and ``--tls``/``--tls-ca`` for a broker with ``--auth-file`` and TLS.

``broker run`` serves RocketMQ 5 clients and the admin API; the admin commands live in
:mod:`gannet.node.api.commands`.

Every command has ``--help``. Lists are rich tables; long work shows a progress bar.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import uvloop
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from gannet.node.api import auth, commands, message_commands, tls
from gannet.node.broker import serving
from gannet.node.metrics import http_serving
from gannet.node.replication import commands as replication_commands
from gannet.node.replication import config as replication_config
from gannet.node.replication import peer_auth
from gannet.node.store import querying, verifying
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.consume_queues import Boundary
from gannet.node.store.errors import StoreError
from gannet.node.store.message_store import MessageStore
from gannet.node.store.records import Message
from gannet.operator import commands as operator_commands
from gannet.pipeline import cli as pipeline_commands

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

EXIT_CHECK_FAILED = 1
EXIT_STORE_UNAVAILABLE = 3
DEFAULT_DATA_DIR = Path.home() / ".gannet" / "store"

data_dir_argument = click.argument(
    "data_dir", type=click.Path(path_type=Path, file_okay=False), metavar="DIR"
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level to stderr.")
def main(verbose: bool) -> None:
    """Gannet: a RocketMQ-compatible, Raft-replicated message store."""
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
@click.option("--broker-name", default="broker-a", show_default=True)
@click.option(
    "--auto-create-topics",
    is_flag=True,
    help="Create unknown topics (MIXED type, 8 queues) when clients use them.",
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
    metrics_listen: str,
    auth_file: Path | None,
    auth_skew_s: float,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    node_id: int | None,
    peers: str | None,
    peer_listen: str | None,
    peer_tls_cert: Path | None,
    peer_tls_key: Path | None,
    peer_tls_ca: Path | None,
    peer_secret_file: Path | None,
    insecure_peers: bool,
    dedup_window_s: float,
) -> None:
    """Open (and recover) the store and serve clients until SIGINT/SIGTERM."""
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit():
        raise click.BadParameter(f"{listen!r} is not host:port", param_hint="--listen")
    if metrics_listen:
        try:
            http_serving.parse_listen(metrics_listen)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--metrics-listen") from None
    peer_tls = _peer_tls(peer_tls_cert, peer_tls_key, peer_tls_ca)
    config = StoreConfig(
        root_dir=data_dir,
        flush_mode=FlushMode.SYNC_FLUSH if flush == "sync" else FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=file_size_mb * 1024 * 1024,
        cluster_name=cluster_name,
        broker_name=broker_name,
        store_host=host.strip("[]") if host not in ("0.0.0.0", "::", "[::]") else "127.0.0.1",
        store_port=int(port_text),
    )
    broker_config = serving.with_listen(
        serving.BrokerConfig(
            store=config,
            auto_create_topics=auto_create_topics,
            metrics_listen=metrics_listen or None,
            auth_file=auth_file,
            auth_skew_s=auth_skew_s,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
            dedup_window_s=dedup_window_s,
            replication=_replication(
                node_id,
                peers,
                peer_listen,
                host,
                peer_tls,
                _peer_secret(peer_secret_file),
                insecure_peers=insecure_peers,
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
) -> replication_config.ReplicationConfig | None:
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
def store_inspect(data_dir: Path) -> None:
    """Files, offsets, topics and queues of a store directory (read-only)."""
    _require_store(data_dir)
    ins = verifying.inspect(data_dir)
    files = Table(title="commit log")
    files.add_column("file")
    files.add_column("size", justify="right")
    for name, size in ins.commitlog_files:
        files.add_row(name, f"{size:,}")
    console.print(files)
    console.print(f"written end: {ins.commitlog_end:,}")
    console.print(f"last shutdown: {'clean' if ins.clean_shutdown else 'ABNORMAL (abort file)'}")
    queues = Table(title="consume queues")
    for col in ("topic", "queue", "files", "min offset", "max offset"):
        queues.add_column(col, justify="right" if col != "topic" else "left")
    for q in ins.queues:
        queues.add_row(q.topic, str(q.queue_id), str(q.files), str(q.min_offset), str(q.max_offset))
    console.print(queues)
    console.print(f"index files: {len(ins.index_files)}")
    for name, value in ins.checkpoint.items():
        console.print(f"checkpoint {name}: {value}")


@store.command("verify")
@data_dir_argument
def store_verify(data_dir: Path) -> None:
    """Check every record's CRC and every consume-queue entry; exit 1 on damage."""
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
    console.print(
        f"{report.records_ok:,} records and {report.cq_units_ok:,} consume-queue entries valid; "
        f"commit log ends at {report.commitlog_end:,}"
    )
    if report.clean:
        console.print("[green]store is clean[/]")
        return
    table = Table(title="damage")
    for col in ("where", "from", "to", "reason"):
        table.add_column(col)
    for d in report.damage:
        table.add_row(d.where, str(d.start), str(d.end), d.reason)
    console.print(table)
    console.print(
        "[red]damage found[/]: a broker start recovers by cutting at the last valid record"
    )
    sys.exit(EXIT_CHECK_FAILED)


@store.command("get")
@data_dir_argument
@click.option("--offset", type=int, help="Commit-log offset of the record.")
@click.option("--msg-id", help="Offset message id (32 or 56 hex digits).")
@click.option("--topic", help="With --queue and --queue-offset.")
@click.option("--queue", "queue_id", type=int, default=0, show_default=True)
@click.option("--queue-offset", type=int)
def store_get(
    data_dir: Path,
    offset: int | None,
    msg_id: str | None,
    topic: str | None,
    queue_id: int,
    queue_offset: int | None,
) -> None:
    """Print one message, by commit-log offset, offset message id or queue offset."""
    chosen = [offset is not None, msg_id is not None, queue_offset is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --offset, --msg-id, --topic/--queue-offset")
    if queue_offset is not None and topic is None:
        raise click.UsageError("--queue-offset needs --topic")
    with _opened(_offline_config(data_dir), start_services=False) as st:
        if offset is not None:
            msg = st.read_message(offset)
        elif msg_id is not None:
            msg = querying.by_offset_msg_id(st, msg_id)
        else:
            assert topic is not None
            assert queue_offset is not None
            msg = querying.by_queue_offset(st, topic, queue_id, queue_offset)
    if msg is None:
        err_console.print("no message there")
        sys.exit(EXIT_CHECK_FAILED)
    _print_messages([msg])


@store.command("query")
@data_dir_argument
@click.option("--topic", required=True)
@click.option("--key", help="A KEYS token.")
@click.option("--uniq-key", help="The client message id (UNIQ_KEY).")
@click.option("--time", "time_text", help="Store time: epoch ms or ISO-8601; prints the offset.")
@click.option("--queue", "queue_id", type=int, default=0, show_default=True)
@click.option("--upper", is_flag=True, help="With --time: last message at or before the time.")
@click.option("--max", "max_num", type=click.IntRange(1, 64), default=64, show_default=True)
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
    with _opened(_offline_config(data_dir), start_services=False) as st:
        if time_text is not None:
            ts = _parse_time(time_text)
            boundary = Boundary.UPPER if upper else Boundary.LOWER
            found = querying.offset_by_time(st, topic, queue_id, ts, boundary)
            console.print(f"{topic}/{queue_id} offset for {ts} ({boundary.name}): {found}")
            return
        if key is not None:
            result = querying.by_key(st, topic, key, max_num=max_num)
        else:
            assert uniq_key is not None
            result = querying.by_key(st, topic, uniq_key, unique=True)
    if not result.messages:
        err_console.print("no message matches")
        sys.exit(EXIT_CHECK_FAILED)
    _print_messages(result.messages)


def _parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is neither epoch ms nor ISO-8601") from exc
    return int(when.timestamp() * 1000)


def _print_messages(msgs: list[Message]) -> None:
    table = Table()
    for col in ("topic", "queue", "queue offset", "commit offset", "stored", "keys", "tag", "body"):
        table.add_column(col)
    for m in msgs:
        body = m.body[:60].decode("utf-8", "replace")
        stored = dt.datetime.fromtimestamp(m.store_timestamp_ms / 1000).isoformat(
            timespec="milliseconds"
        )
        table.add_row(
            m.topic,
            str(m.queue_id),
            str(m.queue_offset),
            str(m.physical_offset),
            stored,
            " ".join(m.keys),
            m.tags or "",
            body,
        )
    console.print(table)


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
