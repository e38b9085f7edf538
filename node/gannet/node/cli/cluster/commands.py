"""``gannet cluster up``: a local cluster of broker groups (each a Raft group of brokers, one
process each), for development; ``gannet cluster status --endpoints a,b,c``: every member's Raft
state in one table.

Registered on the ``gannet`` command by :mod:`gannet.node.cli`. ``--groups G --replicas R``
(default 1 × 3). With one group, node ``i`` (1-based) gets ``--data-root/node<i>``, client port
``base_port + i - 1``, peer port ``base_port + 10 + i - 1`` and metrics port
``metrics_base_port + i - 1`` on ``--host``, broker name ``broker-a``, and the members share
the peer secret ``--data-root/peer-secret`` (created on first use) (127.0.0.1 by default; any
local address such as 127.0.0.2 works on Linux). With several groups, group ``g`` (0-based)
is named ``broker-<g>``, lives in ``--data-root/broker-<g>/`` (its nodes, logs and peer
secret), and its ports are shifted by ``g × GROUP_PORT_STRIDE`` (metrics by ``g × 10``);
every member gets the other groups' client endpoints as ``--cluster-seeds``
(:mod:`gannet.node.broker_groups.polling`). ``--auth-file`` makes every member require signed
requests, and with several groups gives them a cluster key to sign their polls of each other
(:mod:`auth`). ``--tls`` (or ``--tls-dir``, or the user's own ``--tls-cert/--tls-key/
--tls-ca``) gives every member a TLS-only client port and mutual TLS between peers, with a
cluster CA and member certificates it creates once and reuses (:mod:`tls`), warning
about certificates that expire within ``--tls-warn-days`` and re-issuing its own members'
(``gannet cluster certs list|renew``: :mod:`cert_commands`).
``DATA_ROOT/client.env`` (:func:`write_client_env`) holds the environment of the ``gannet``
commands and the official clients for this cluster. The command prints the endpoints, then
waits: on
Ctrl-C or SIGTERM it sends SIGTERM to every broker and waits for clean stops (SIGKILL after
:data:`STOP_TIMEOUT_S`). If a broker exits on its own, the others are stopped and the exit code
is 1.

``cluster member list|add|remove`` changes the members through the log
(:mod:`member_commands`).

``cluster status`` asks each endpoint for ``GetRaftStatus`` and prints one row per member and
the leader's view of its followers (match offset, lag); ``-o json|yaml`` for scripts. Without
``--endpoints`` it asks the member at ``GANNET_ENDPOINT`` (as every other command does;
127.0.0.1:8081 when unset) and then the peers that member names. Exit codes: 0 every member answered
and all name the same leader; 2 the members answered but do not agree on one leader (election
in progress, a split view); 4 some member could not be reached (the others are still shown).
"""

from __future__ import annotations

import functools
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import grpc
from rich.table import Table

from gannet.node.cli import broker, calls, exits, options, output, raft_views
from gannet.node.cli.cluster import auth as cluster_auth
from gannet.node.cli.cluster import cert_commands as cluster_cert_commands
from gannet.node.cli.cluster import member_commands as members
from gannet.node.cli.cluster import tls as cluster_tls
from gannet.node.cli.cluster.certs import ClusterTls
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.replication.config import PeerSpec

STOP_TIMEOUT_S = 30.0
STATUS_TIMEOUT_S = 5.0
NODES_MAX = 9
GROUPS_MAX = 16
GROUP_PORT_STRIDE = 20
SECRET_NAME = "peer-secret"
CLIENT_ENV_NAME = "client.env"
console = output.console


def plan(nodes: int, host: str, base_port: int) -> tuple[PeerSpec, ...]:
    """The members of a local group (pure; ``cluster up`` and tests use it)."""
    return tuple(
        PeerSpec(i, host, base_port + 10 + i - 1, base_port + i - 1) for i in range(1, nodes + 1)
    )


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One broker group of a local cluster: its name, members and folder."""

    index: int
    broker_name: str
    peers: tuple[PeerSpec, ...]
    root: Path
    seeds: tuple[str, ...]
    """Client endpoints of every member of the other groups."""

    def client_endpoints(self) -> list[str]:
        return [p.client_endpoint for p in self.peers]

    def member_names(self) -> list[str]:
        return [cluster_tls.member_name(self.broker_name, p.node_id) for p in self.peers]


def plan_cluster(
    groups: int, replicas: int, host: str, base_port: int, data_root: Path
) -> tuple[GroupPlan, ...]:
    """The groups of a local cluster (pure; module docstring for names, ports, folders)."""
    members = [plan(replicas, host, base_port + g * GROUP_PORT_STRIDE) for g in range(groups)]
    return tuple(
        GroupPlan(
            g,
            "broker-a" if groups == 1 else f"broker-{g}",
            members[g],
            data_root if groups == 1 else data_root / f"broker-{g}",
            tuple(p.client_endpoint for o in range(groups) if o != g for p in members[o]),
        )
        for g in range(groups)
    )


def broker_argv(
    peer: PeerSpec,
    peers: tuple[PeerSpec, ...],
    data_root: Path,
    flush: str,
    metrics_port: int | None,
    *,
    broker_name: str = "broker-a",
    seeds: tuple[str, ...] = (),
    file_size_mb: int | None = None,
    index_hash_slots: int | None = None,
    auth: cluster_auth.ClusterAuth | None = None,
    tls: ClusterTls | None = None,
) -> list[str]:
    """The ``gannet broker run`` command line of one member (the group's shared peer secret
    is ``data_root/peer-secret``: :func:`ensure_secret`). ``file_size_mb`` and
    ``index_hash_slots``: the members' ``--file-size-mb`` and ``--index-hash-slots`` (None:
    the broker's defaults)."""
    member = cluster_tls.member_name(broker_name, peer.node_id)
    size = ["--file-size-mb", str(file_size_mb)] if file_size_mb is not None else []
    if index_hash_slots is not None:
        size += ["--index-hash-slots", str(index_hash_slots)]
    return [
        sys.executable,
        "-m",
        "gannet.node.cli",
        "broker",
        "run",
        "--data-dir",
        str(data_root / f"node{peer.node_id}"),
        "--flush",
        flush,
        "--listen",
        peer.client_endpoint,
        "--broker-name",
        broker_name,
        "--cluster-seeds",
        ",".join(seeds),
        "--metrics-listen",
        f"{peer.host}:{metrics_port}" if metrics_port is not None else "",
        "--node-id",
        str(peer.node_id),
        "--peers",
        ",".join(str(p) for p in peers),
        "--peer-listen",
        peer.peer_endpoint,
        "--peer-secret-file",
        str(data_root / SECRET_NAME),
        *size,
        *(auth.argv() if auth is not None else []),
        *(tls.argv(member) if tls is not None else []),
    ]


def ensure_secret(data_root: Path) -> Path:
    """``data_root/peer-secret``: the local group's shared peer secret, created (random,
    owner-only) on first use and kept for later runs."""
    path = data_root / SECRET_NAME
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32) + "\n")
    return path


@click.group()
def cluster() -> None:
    """Local broker groups (each a Raft group of brokers) for development and tests."""


cluster.add_command(members.member)
cluster.add_command(cluster_cert_commands.certs)


@cluster.command("up")
@click.option(
    "--groups",
    type=click.IntRange(1, GROUPS_MAX),
    default=1,
    show_default=True,
    help="Broker groups (each its own Raft group, named broker-0, broker-1, ...); a topic has "
    "its queues in every group.",
)
@click.option(
    "--replicas",
    "--nodes",
    "replicas",
    type=click.IntRange(1, NODES_MAX),
    default=3,
    show_default=True,
    help="Members of each group (--nodes is the old name).",
)
@click.option(
    "--data-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("gannet-cluster"),
    show_default=True,
    help="Each node's store goes to DATA_ROOT/node<i> "
    "(several groups: DATA_ROOT/broker-<g>/node<i>).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Local address to bind.")
@click.option(
    "--base-port",
    type=click.IntRange(1024, 65000),
    default=8081,
    show_default=True,
    help=f"Client port of node 1; node i: base+i-1; peer ports: base+10+i-1; group g adds "
    f"{GROUP_PORT_STRIDE}*g.",
)
@click.option(
    "--metrics-base-port",
    type=click.IntRange(0, 65000),
    default=5557,
    show_default=True,
    help="Metrics port of node 1 (node i: base+i-1, group g adds 10*g); 0 disables metrics.",
)
@click.option("--flush", type=click.Choice(["async", "sync"]), default="sync", show_default=True)
@click.option(
    "--file-size-mb",
    type=click.IntRange(1, 4096),
    help="Every member's commit-log file size (`broker run --file-size-mb`; default: the "
    "broker's, 1024). Files are preallocated: lower it for small development or test clusters.",
)
@click.option(
    "--index-hash-slots",
    type=click.IntRange(broker.INDEX_HASH_SLOTS_MIN, broker.INDEX_HASH_SLOTS_MAX),
    help="Every member's index-file hash slots (`broker run --index-hash-slots`; default: the "
    "broker's, about 420 MB files).",
)
@click.option(
    "--auth-file",
    type=click.Path(path_type=Path, exists=True),
    help="Require signed requests on every member (credentials file or directory, as "
    "`broker run --auth-file`). With several groups a cluster key (admin) is created in "
    "DATA_ROOT/auth/ for the members' polls of each other. See docs/security.md.",
)
@click.option(
    "--tls",
    "tls_on",
    is_flag=True,
    help="TLS-only client ports and mutual TLS between peers, with a cluster CA and one "
    "certificate per member created in DATA_ROOT/tls/ on the first run and reused later.",
)
@click.option(
    "--tls-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Keep the created CA and certificates here instead of DATA_ROOT/tls/ (implies --tls).",
)
@click.option(
    "--tls-cert",
    type=options.PEM_FILE,
    help="Your own certificate for every member (needs --host in its SANs, serverAuth and "
    "clientAuth); with --tls-key and --tls-ca.",
)
@click.option("--tls-key", type=options.PEM_FILE, help="Private key of --tls-cert.")
@click.option("--tls-ca", type=options.PEM_FILE, help="The CA (PEM) that issued --tls-cert.")
@click.option(
    "--tls-warn-days",
    type=click.IntRange(0, cluster_cert_commands.WARN_DAYS_MAX),
    default=cluster_tls.WARN_DAYS_DEFAULT,
    show_default=True,
    help="Warn about any certificate that expires within this many days; the member "
    "certificates cluster up created are re-issued from its CA instead.",
)
@click.option(
    "--renew-certs",
    is_flag=True,
    help="Re-issue every member certificate cluster up created (from the same CA, new keys) "
    "before starting. See also `gannet cluster certs`.",
)
def cluster_up(
    groups: int,
    replicas: int,
    data_root: Path,
    host: str,
    base_port: int,
    metrics_base_port: int,
    flush: str,
    file_size_mb: int | None,
    index_hash_slots: int | None,
    auth_file: Path | None,
    tls_on: bool,
    tls_dir: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_ca: Path | None,
    tls_warn_days: int,
    renew_certs: bool,
) -> None:
    """Start GROUPS broker groups of REPLICAS brokers each and run until Ctrl-C or SIGTERM."""
    if base_port + (groups - 1) * GROUP_PORT_STRIDE + 10 + replicas > 65535:
        raise click.BadParameter(
            f"{groups} groups need ports up to {base_port + groups * GROUP_PORT_STRIDE}; "
            "choose a lower --base-port",
            param_hint="--base-port",
        )
    plans = plan_cluster(groups, replicas, host, base_port, data_root)
    auth = (
        cluster_auth.prepare(data_root, auth_file, cluster_key=groups > 1)
        if auth_file is not None
        else None
    )
    tls = cluster_tls.prepare(
        data_root,
        [name for g in plans for name in g.member_names()],
        host,
        tls=tls_on,
        tls_dir=tls_dir,
        cert_file=tls_cert,
        key_file=tls_key,
        ca_file=tls_ca,
        warn_days=tls_warn_days,
        renew=renew_certs,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        start_cluster(
            plans,
            flush,
            metrics_base_port,
            processes,
            file_size_mb=file_size_mb,
            index_hash_slots=index_hash_slots,
            auth=auth,
            tls=tls,
        )
        env_file = write_client_env(data_root, plans, tls)
        _print_table(plans, auth, tls, env_file)
        failed = _wait(processes, stop)
    finally:
        _stop_all(processes)
    if failed is not None:
        console.print(f"[red]node {failed} exited[/]; see {failed}.log under {data_root}")
        sys.exit(1)
    console.print("cluster stopped")


def start_cluster(
    plans: tuple[GroupPlan, ...],
    flush: str,
    metrics_base_port: int,
    processes: dict[str, subprocess.Popen[bytes]],
    *,
    file_size_mb: int | None = None,
    index_hash_slots: int | None = None,
    auth: cluster_auth.ClusterAuth | None = None,
    tls: ClusterTls | None = None,
) -> None:
    """Start every member of ``plans`` (``processes`` gets ``<group root>/node<i>`` → its
    process as each starts, so the caller can stop what did start). The library entry point
    of ``cluster up`` (e2e tests and benchmarks). ``auth``: :func:`auth.prepare`'s
    answer, every member's auth options and environment; ``tls``: :func:`tls.prepare`'s
    answer, every member's certificates; ``file_size_mb``, ``index_hash_slots``: as
    :func:`broker_argv`."""
    env = {**os.environ, **auth.env()} if auth is not None else None
    for group in plans:
        group.root.mkdir(parents=True, exist_ok=True)
        ensure_secret(group.root)
        for peer in group.peers:
            metrics = (
                metrics_base_port + 10 * group.index + peer.node_id - 1
                if metrics_base_port
                else None
            )
            argv = broker_argv(
                peer,
                group.peers,
                group.root,
                flush,
                metrics,
                broker_name=group.broker_name,
                seeds=group.seeds,
                file_size_mb=file_size_mb,
                index_hash_slots=index_hash_slots,
                auth=auth,
                tls=tls,
            )
            node = group.root / f"node{peer.node_id}"
            with node.with_suffix(".log").open("ab") as log_file:
                processes[str(node)] = subprocess.Popen(
                    argv,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                )


def write_client_env(data_root: Path, plans: tuple[GroupPlan, ...], tls: ClusterTls | None) -> Path:
    """``DATA_ROOT/client.env``: shell ``export`` lines of ``GANNET_ENDPOINT`` (the first
    member) and, with TLS, ``GANNET_TLS_CA`` and ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (the CA,
    for the official Python client, which trusts gRPC's default roots only). After ``source``
    of it, ``gannet status`` and every other command reach this cluster. Rewritten at each
    ``up``; holds no secret."""
    lines = [
        f"# gannet cluster up ({len(plans)} x {len(plans[0].peers)}): `source` this file, "
        "then `gannet status`, `gannet topic describe T`, ... reach this cluster.",
        "unset GANNET_TLS GANNET_TLS_CA GANNET_TLS_CERT GANNET_TLS_KEY",
        f"export GANNET_ENDPOINT={plans[0].peers[0].client_endpoint}",
    ]
    if tls is not None:
        ca = shlex.quote(str(tls.ca_file.resolve()))
        lines += [
            f"export GANNET_TLS_CA={ca}",
            "# The official Python client (tls_enable=True) trusts gRPC's default roots: this",
            "# CA replaces them for every gRPC program started from this shell.",
            f"export GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca}",
        ]
    lines.append(
        "# signed requests (--auth-file): export GANNET_ACCESS_KEY=<your key> "
        "GANNET_SECRET_KEY=<its secret>"
    )
    path = data_root / CLIENT_ENV_NAME
    path.write_text("\n".join(lines) + "\n")
    return path


def _print_table(
    plans: tuple[GroupPlan, ...],
    auth: cluster_auth.ClusterAuth | None,
    tls: ClusterTls | None,
    env_file: Path,
) -> None:
    members = sum(len(g.peers) for g in plans)
    title = (
        f"Gannet Raft group of {members}"
        if len(plans) == 1
        else f"Gannet cluster: {len(plans)} broker groups x {len(plans[0].peers)} replicas"
    )
    table = Table(title=title)
    for column in ("group", "node", "client endpoint", "peer endpoint", "data dir", "log"):
        table.add_column(column)
    for group in plans:
        for p in group.peers:
            table.add_row(
                group.broker_name,
                str(p.node_id),
                p.client_endpoint,
                p.peer_endpoint,
                str(group.root / f"node{p.node_id}"),
                str(group.root / f"node{p.node_id}.log"),
            )
    console.print(table)
    first = plans[0].peers[0].client_endpoint
    endpoints = ";".join(e for g in plans for e in g.client_endpoints())
    keys = "Credentials()" if auth is None else "Credentials(ak, sk)"
    client = f'ClientConfiguration("{first}", {keys})'
    ca = tls.ca_file.resolve() if tls is not None else None
    if ca is not None:
        client += (
            ", Producer/SimpleConsumer(..., tls_enable=True) with "
            f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca}"
        )
    print_line = functools.partial(console.print, highlight=False, soft_wrap=True)
    print_line(f"clients: {client}")
    if auth is not None:
        print_line(
            f"auth:    a key of {auth.auth_dir} (gannet: GANNET_ACCESS_KEY, GANNET_SECRET_KEY)"
        )
    if ca is not None:
        print_line(
            f"TLS:     client ports TLS only, peers mutual TLS; CA {ca} "
            "(gannet: --tls-ca or GANNET_TLS_CA)"
        )
    print_line(
        f"gannet:  source {env_file.resolve()}  (then: gannet status; all members: {endpoints})"
    )
    print_line("press Ctrl-C to stop")


def _wait(processes: dict[str, subprocess.Popen[bytes]], stop: threading.Event) -> str | None:
    """Until ``stop`` is set (None) or a broker exits (its node folder)."""
    while not stop.wait(0.5):
        for node_id, process in processes.items():
            if process.poll() is not None:
                return node_id
    return None


def _stop_all(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes.values():
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@cluster.command("status")
@click.option(
    "--endpoints",
    envvar="GANNET_ENDPOINTS",
    help="Comma-separated client endpoints (host:port) of the members (env GANNET_ENDPOINTS); "
    "default: the member at GANNET_ENDPOINT (or 127.0.0.1:8081) and the peers it names.",
)
@output.output_option
@options.security_options
def cluster_status(endpoints: str | None) -> None:
    """Role, term, leader and offsets of every member; the leader's followers' match and lag."""
    discover = endpoints is None
    if endpoints is None:
        endpoints = os.environ.get("GANNET_ENDPOINT") or options.DEFAULT_ENDPOINT
        source = "GANNET_ENDPOINT" if os.environ.get("GANNET_ENDPOINT") else "--endpoints"
    else:
        source = "--endpoints"
    wanted = [e.strip() for e in endpoints.split(",") if e.strip()]
    if not wanted:
        raise click.BadParameter("give at least one host:port", param_hint=source)
    for endpoint in wanted:
        try:
            options.check_endpoint(endpoint)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=source) from None
    members = [ask_status(e) for e in wanted]
    if discover:
        members += _peers_not_asked(members)
    leader = raft_views.agreed_leader(members)
    renderables: list[Any] = [raft_views.members_table(members)]
    if leader is not None and leader.peers:
        renderables.append(raft_views.peers_table(leader))
    output.emit(raft_views.members_document(members), *renderables)
    if any(m.status is None for m in members):
        sys.exit(exits.EXIT_UNREACHABLE)
    if leader is None:
        output.err_console.print("[yellow]the members do not agree on one leader[/]")
        sys.exit(exits.EXIT_NO_AGREED_LEADER)


def _peers_not_asked(members: list[raft_views.MemberStatus]) -> list[raft_views.MemberStatus]:
    """The status of every peer the answering members name but nobody asked yet."""
    known = {m.status.node_id for m in members if m.status is not None}
    asked = {m.endpoint for m in members}
    found = []
    for m in members:
        for peer in m.status.peers if m.status is not None else ():
            endpoint = peer.client_endpoint
            if peer.node_id in known or not endpoint or endpoint in asked:
                continue
            asked.add(endpoint)
            member = ask_status(endpoint)
            if member.status is not None:
                known.add(member.status.node_id)
            found.append(member)
    return found


def ask_status(endpoint: str) -> raft_views.MemberStatus:
    """One member's ``GetRaftStatus`` (or the reason it did not answer)."""
    with calls.channel(endpoint) as channel:  # signed and TLS when options ask
        stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
        try:
            reply = stub.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=STATUS_TIMEOUT_S)
        except grpc.RpcError as exc:
            return raft_views.MemberStatus(endpoint, None, exc.code().name)
    return raft_views.MemberStatus(endpoint, reply)
