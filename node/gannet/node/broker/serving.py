"""A broker: the store plus a grpc.aio server on the client port (8081 by default).

:meth:`Broker.start` opens (and recovers) the store off the event loop, then serves
``apache.rocketmq.v2.MessagingService`` and ``gannet.admin.v1.Admin`` on one port. The
receive limit is raised to :data:`RECEIVE_MESSAGE_BYTES_MAX` (a 4 MiB body plus its envelope
exceeds gRPC's 4 MiB default; the proxy allows 130 MiB), concurrent RPCs are capped at
``concurrent_rpcs_max`` (beyond it gRPC answers RESOURCE_EXHAUSTED), and client keepalive
pings down to once a minute are allowed (the Java client pings every 5 minutes).

:meth:`Broker.stop` stops accepting, lets in-flight RPCs finish for up to ``shutdown_grace_s``,
then closes the store — final flush, consume queues, index and checkpoint written, abort file
removed. :meth:`Broker.run_until_signalled` does that on SIGTERM or SIGINT. The two steps that
wait on gRPC completions (stopping the group poller's calls, the server's stop after the grace)
are bounded by :data:`STOP_STEP_SLACK_S`: one that does not end is logged and left behind, so a
stop never hangs on a completion that never comes and the store is still closed cleanly.

With ``metrics_listen`` set, the metrics endpoint (:mod:`gannet.node.metrics`) starts before
recovery, so ``/healthz`` answers and ``/readyz`` says 503 while the store recovers; it says
200 only in the ``serving`` phase and closes last, after the store.

Pop consumption (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue) is served by :mod:`gannet.node.api.receiving` on a
:class:`~gannet.node.pop.service.PopBroker` started with the server unless another ``pop``
factory is given; it is closed after the drain and before the store.

Security (``docs/security.md``): with ``auth_file`` every call is authenticated and authorized
(:mod:`gannet.node.protocol.auth`; refusals counted in ``Broker.authenticator.denials_total``); with
``tls_cert``/``tls_key`` the client port serves TLS only, and ``tls_client_ca`` makes it mutual
(:mod:`gannet.node.protocol.tls`). Each v2 client id has at most ``inflight_per_client_max`` calls
in flight (:mod:`gannet.node.api.limits`). Calls to the other broker groups (polls, fan-out) go
out with :func:`cluster_security`: this member's TLS settings and the cluster access key.

Replication (``docs/architecture.md``, Replication): with ``replication`` set the broker is one
member of a Raft group. The store then dispatches only up to the Raft commit offset, a
:class:`~gannet.node.replication.driver.ReplicationNode` serves ``gannet.raft.v1.Peer`` on the
peer port, sends are answered once a majority has them durable, and routes name the leader.
A follower forwards the leader-only v2 requests and admin writes to the leader over the peer
port (:mod:`gannet.node.api.forwarding`, :mod:`gannet.node.api.admin_forwarding`).
It starts after recovery and before the client port, and stops after the drain, before Pop
and the store. Without it (None) the broker is a group of one and commit follows the flush.

Called by ``gannet broker run`` and :mod:`threads`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import service_pb2

from gannet.node.api import (
    admin,
    admin_forwarding,
    cluster_admin,
    dedup,
    external_book_file,
    limits,
    messaging,
    plugs,
    receiving,
    routes,
    tier_status,
    wire,
)
from gannet.node.api.admin_raft import RaftAdmin
from gannet.node.broker import port_gate, tiering
from gannet.node.broker_groups import polling as group_polling
from gannet.node.metrics import (
    broker_metrics,
    failover_collecting,
    http_serving,
    instrumenting,
    offload_collecting,
    remoting_collecting,
    resolver_collecting,
    transaction_collecting,
)
from gannet.node.pop.service import PopBroker
from gannet.node.protocol import auth, credentials, headers, tls
from gannet.node.protocol.gen import admin_pb2
from gannet.node.remoting import acl, admin_requests, broker_requests, nameserver, tls_context
from gannet.node.remoting.server import RemotingServer
from gannet.node.replication.config import ReplicationConfig
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.peer_resolving import ResolveFigures
from gannet.node.store.config import StoreConfig
from gannet.node.store.message_store import MessageStore
from gannet.node.store.tier.offloading import Offloader, OffloadFigures, TierConfig
from gannet.node.transactions.book import CheckLimits

log = logging.getLogger(__name__)

RECEIVE_MESSAGE_BYTES_MAX = 130 * 1024 * 1024  # grpcMaxInboundMessageSize
SEND_MESSAGE_BYTES_MAX = 130 * 1024 * 1024
CONCURRENT_RPCS_MAX = 4096
SHUTDOWN_GRACE_S = 10.0
STOP_STEP_SLACK_S = 5.0  # beyond its own deadline, how long a stop step may take
PING_INTERVAL_MS_MIN = 60_000
PORT_CLOSE_GRACE_S = 0.3
"""Calls in flight when the client port closes get this long to finish (then cancelled)."""
PORT_GATE_RECHECK_S = 1.0
"""The port gate looks again at least this often (a leader change wakes it at once)."""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Where the broker listens and what it calls itself; the store has its own config."""

    store: StoreConfig
    listen_host: str = "127.0.0.1"
    listen_port: int = 8081
    advertised_host: str | None = None
    """The host put in routes when the client's own endpoints are unusable."""
    concurrent_rpcs_max: int = CONCURRENT_RPCS_MAX
    receive_message_bytes_max: int = RECEIVE_MESSAGE_BYTES_MAX
    shutdown_grace_s: float = SHUTDOWN_GRACE_S
    auto_create_topics: bool = False
    """Create unknown topics (MIXED, 8 queues) on first route query or send; off by default."""
    auto_create_groups: bool = False
    """Create unknown consumer groups (defaults of ``group create``) on first use; off by
    default (``make run`` turns it on)."""
    metrics_listen: str | None = None
    """``host:port`` of ``/metrics``, ``/healthz``, ``/readyz`` (``gannet broker run``: 5557);
    None: no endpoint and no metrics (tests running many brokers)."""
    auth_file: Path | None = None
    """Access keys, secrets and rights (a JSON/YAML file or a Secret directory); None: open."""
    auth_skew_s: float = auth.SKEW_S_DEFAULT
    """Largest accepted distance of a request's ``x-mq-date-time`` from the broker clock."""
    auth_reload_interval_s: float = credentials.RELOAD_INTERVAL_S
    """How often (at most) a call checks whether ``auth_file`` changed; a change is reloaded."""
    tls_cert: Path | None = None
    """PEM certificate (chain) of the client port; with ``tls_key`` the port is TLS-only."""
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    """PEM CA that client certificates must chain to (mutual TLS); None: no client certs."""
    tls_reload_interval_s: float = tls.RELOAD_INTERVAL_S
    """How often (at most) a TLS handshake checks whether the PEM files changed (rotation)."""
    inflight_per_client_max: int = limits.INFLIGHT_PER_CLIENT_MAX
    """Calls in flight per v2 client id; more get TOO_MANY_REQUESTS."""
    replication: ReplicationConfig | None = None
    """This node's Raft group (node id, members, peer port); None: a single node."""
    dedup_window_s: float = dedup.WINDOW_S
    """Sends with a client message id seen this recently get the original receipt; 0: off."""
    dedup_entries_max: int = dedup.ENTRIES_MAX
    """Message ids the deduplication window keeps in memory (older ones: index lookups)."""
    transaction_limits: CheckLimits | None = None
    """When open transactions are checked and discarded; None: RocketMQ's defaults."""
    cluster_seeds: tuple[str, ...] = ()
    """Client endpoints of members of the cluster's other broker groups (``--cluster-seeds``);
    empty: this group is the whole cluster (:mod:`gannet.node.broker_groups.polling`)."""
    group_poll_interval_s: float = group_polling.POLL_INTERVAL_S
    cluster_access_key: str | None = None
    """Signs this member's polls of the other groups (``--cluster-access-key``); None: unsigned.
    The key needs ``admin`` on the broker in the other groups' ``auth_file``."""
    cluster_secret_key: str | None = dataclasses.field(default=None, repr=False)
    cluster_tls_ca: Path | None = None
    """CA the other groups' client-port certificates chain to (default ``tls_client_ca``)."""
    remoting_port: int | None = None
    """Port of the RocketMQ remoting protocol (10911 by convention; 0: any free port) on
    ``listen_host``; None: not served (:mod:`gannet.node.remoting`, ``docs/remoting.md``)."""
    nameserver_port: int | None = None
    """Port of the name-server requests (9876 by convention; 0: any free port); None: only on
    the remoting port. Needs ``remoting_port``."""
    external_addresses: Path | None = None
    """The members' external addresses (``--external-addresses``, :mod:`external_routes`):
    gRPC clients that dialed one get routes naming external addresses; None: none."""
    external_remoting_port: int | None = None
    """A remoting listener for clients outside (0: any free port), answered with the book's
    remoting addresses; None: not served. Needs ``remoting_port`` and ``external_addresses``."""
    leaderless_close_after_s: float | None = port_gate.CLOSE_AFTER_S
    """A replicated member that has known no Raft leader this long closes its client port until
    it knows one again (:mod:`port_gate`); None: it never closes it."""
    tier: TierConfig | None = None
    """Tiered storage (``--tier-*``, :mod:`tiering`): sealed commit-log files offloaded to an
    S3-compatible bucket; None: everything stays local."""


def cluster_security(config: BrokerConfig) -> auth.ClientSecurity:
    """How this member calls the other broker groups (``docs/security.md``, Broker groups):
    TLS when its own client port is TLS (or a cluster CA is given), trusting the cluster CA
    (else ``tls_client_ca``, else the system roots) and presenting its own certificate when it
    runs mutual TLS; polls signed with the cluster access key. Raises ValueError for a key
    without its secret."""
    mutual = config.tls_client_ca is not None
    return auth.ClientSecurity(
        access_key=config.cluster_access_key,
        secret_key=config.cluster_secret_key,
        tls=config.tls_cert is not None,
        tls_ca=config.cluster_tls_ca or config.tls_client_ca,
        tls_cert=config.tls_cert if mutual else None,
        tls_key=config.tls_key if mutual else None,
    )


def _server_options(config: BrokerConfig) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", config.receive_message_bytes_max),
        ("grpc.max_send_message_length", SEND_MESSAGE_BYTES_MAX),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", PING_INTERVAL_MS_MIN),
        ("grpc.so_reuseport", 0),
    ]


class Broker:
    """One store, one server. Invariant: ``store`` is open while ``server`` serves.

    ``phase`` goes created → recovering → starting → serving → stopping → stopped.
    """

    def __init__(self, config: BrokerConfig, *, pop: plugs.PopFactory | None = None) -> None:
        self.config = config
        self._pop_factory = pop if pop is not None else receiving.factory()
        self.tier_source = (
            tiering.ManifestSource(config.store.root_dir, config.tier.prefix)
            if config.tier is not None
            else None
        )
        """The manifest the store's tier reader follows (the manifest log once started)."""
        self.store = MessageStore(
            config.store,
            commit_follows_flush=config.replication is None,
            tier=(
                tiering.reader(config.tier, self.tier_source, config.store.root_dir)
                if config.tier is not None and self.tier_source is not None
                else None
            ),
        )
        self.replication: ReplicationNode | None = None
        if config.replication is not None:
            # From the store's opening on (due timers, Pop), only the Raft leader appends on
            # its own; before replication starts this member does not know it leads.
            self.store.write_permit = self._leads
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.messaging: messaging.MessagingServicer | None = None
        self.groups: cluster_admin.BrokerGroups | None = None
        """The other broker groups of the cluster (:mod:`gannet.node.api.cluster_admin`)."""
        self.phase = "created"
        self.remoting: RemotingServer | None = None
        self.remoting_requests: broker_requests.BrokerRequests | None = None
        self.remoting_port = 0
        self.nameserver_port = 0
        if config.nameserver_port is not None and config.remoting_port is None:
            raise ValueError("--nameserver-port needs --remoting-port")
        if config.external_remoting_port is not None and (
            config.remoting_port is None or config.external_addresses is None
        ):
            raise ValueError(
                "--external-remoting-port needs --remoting-port and --external-addresses"
            )
        self.external_book = (
            external_book_file.BookFile(config.external_addresses)
            if config.external_addresses is not None
            else None
        )
        self.external_remoting_port = 0
        self.metrics: broker_metrics.BrokerMetrics | None = None
        self.metrics_server: http_serving.MetricsServer | None = None
        self.authenticator: auth.Authenticator | None = None
        if config.auth_file is not None:
            reloader = credentials.Reloader(
                config.auth_file, interval_s=config.auth_reload_interval_s
            )
            self.authenticator = auth.Authenticator(
                reloader.accounts, skew_s=config.auth_skew_s, reloader=reloader
            )
        self._tls = _tls_credentials(config)
        self.cluster_security = cluster_security(config)
        if config.cluster_seeds and self.cluster_security.uses_tls:
            security = self.cluster_security  # unusable PEM files fail the start, named
            tls.channel_credentials(security.tls_ca, security.tls_cert, security.tls_key)
        if config.cluster_seeds and config.auth_file is not None and not config.cluster_access_key:
            log.warning(
                "--auth-file without --cluster-access-key: polls of other broker groups are "
                "unsigned, so groups that require signatures refuse them"
            )
        self.offloader: Offloader | None = None
        """The tier's offload loop (:mod:`tiering`), running while serving with a tier."""
        self.failure: str | None = None
        """Why the node stopped itself (a failed fsync); None while healthy."""
        self._failing_task: asyncio.Future[None] | None = None
        self._signalled: asyncio.Event | None = None
        self.inflight = limits.InflightPerClient(config.inflight_per_client_max)
        self._services: list[tuple[object, object, wire.Rules]] = []
        """What every server of the client port serves (registered again on a reopen)."""
        self._gating: asyncio.Future[None] | None = None
        self._gate_stopped = False
        self.port_closes_total = 0
        """Times the client port closed because no leader was known, or this member knows it is
        removed (:mod:`port_gate`)."""
        """v2 calls in flight per client id (refusals in ``inflight.refused_total``)."""
        if config.metrics_listen:
            self.metrics = broker_metrics.BrokerMetrics()
            self.metrics.describe_broker(
                broker_name=config.store.broker_name, cluster=config.store.cluster_name
            )
            self.metrics.watch_store(self.store, self._store_open)
            self.metrics.watch_readiness(self.not_ready_reason)
            if self.authenticator is not None:
                self.metrics.registry.register(auth.DenialsCollector(self.authenticator))
            self.metrics.watch_consumers(self.store, self._pop_broker, self._serves_consumers)
            self.metrics.rpc.inflight_max = config.concurrent_rpcs_max

    def _pop_broker(self) -> PopBroker | None:
        """The default Pop layer's broker (None before serving or with another factory)."""
        handler = self.messaging.pop if self.messaging is not None else None
        return handler.pop if isinstance(handler, receiving.PopHandler) else None

    def _serves_consumers(self) -> bool:
        """Consumer and Pop figures come from the node serving Pop — a single node or the
        Raft leader; followers hold the same offsets and would count every backlog again."""
        return self._store_open() and (self.replication is None or self.replication.is_leader())

    def _store_open(self) -> bool:
        return self.phase in ("starting", "serving")

    def not_ready_reason(self) -> str | None:
        """None when clients can be served; otherwise why not (``/readyz`` answers it)."""
        if self.phase == "serving":
            if self.replication is not None and self.replication.knows_removed():
                return "removed from the Raft group (no leader counts this member)"
            if self.replication is not None and self.replication.leader() is None:
                return "no Raft leader known (an election is running or no majority is up)"
            return None
        return {
            "created": "broker not started",
            "recovering": "store recovering",
            "starting": "gRPC server not serving yet",
            "stopping": "stopping",
            "failed": f"stopped after a fatal error: {self.failure}",
        }.get(self.phase, "stopped")

    @property
    def endpoint(self) -> str:
        """``host:port`` clients connect to."""
        host = self.config.advertised_host or self.config.listen_host
        return f"{_bracketed(host)}:{self.port}"

    async def start(self) -> None:
        """Open the store (recovery runs in a worker thread), then start serving."""
        self._start_metrics_server()
        self.phase = "recovering"
        try:
            await asyncio.to_thread(self.store.open)
        except BaseException:
            self.phase = "stopped"
            await self._close_metrics_server()
            raise
        self.phase = "starting"
        try:
            await self._start_replication()
            if self.config.tier is not None:
                self.offloader = await asyncio.to_thread(
                    tiering.start,
                    self.store,
                    self.replication,
                    self.config.tier,
                    self.tier_source,
                )
            await self._serve()
        except BaseException:
            self.phase = "stopped"
            await self._stop_offloader()
            await self._stop_replication()
            await self._close_pop()
            await asyncio.to_thread(self.store.close)
            await self._close_metrics_server()
            raise
        self.phase = "serving"
        self._watch_fatal_flush()

    def _watch_fatal_flush(self) -> None:
        """A failed commit-log fsync stops the node (``durable``: never continue after one).

        The flush thread tells its listeners after the failure; the loop then stops serving
        at once (clients see UNAVAILABLE, Raft peers lose this member and elect another
        leader), closes Pop and the store (the abort file stays, so the next start recovers
        abnormally), and ``phase`` becomes ``failed``; ``gannet broker run`` exits 3."""
        flush = self.store.flush
        if flush is None:
            return
        loop = asyncio.get_running_loop()

        def on_flushed(_offset: int) -> None:
            error = flush.fatal_error
            if error is not None and self.failure is None:
                self.failure = str(error)
                with contextlib.suppress(RuntimeError):  # the loop is closing anyway
                    loop.call_soon_threadsafe(self._begin_failing)

        flush.listeners.append(on_flushed)

    def _begin_failing(self) -> None:
        self._failing_task = asyncio.ensure_future(self._fail())

    async def _fail(self) -> None:
        log.critical("stopping the node: %s", self.failure)
        try:
            if self.phase in ("serving", "starting"):
                await self.stop(grace_s=0)
        except Exception:  # the node is going down; whatever else failed is secondary
            log.exception("while stopping after: %s", self.failure)
        self.phase = "failed"
        if self._signalled is not None:
            self._signalled.set()

    def _start_metrics_server(self) -> None:
        if self.metrics is None or not self.config.metrics_listen:
            return
        self.metrics_server = http_serving.MetricsServer(
            self.config.metrics_listen, self.metrics.exposition, self.not_ready_reason
        )
        log.info("metrics on %s (port %d)", self.config.metrics_listen, self.metrics_server.port)

    async def _close_metrics_server(self) -> None:
        server, self.metrics_server = self.metrics_server, None
        if server is not None:
            await asyncio.to_thread(server.close)

    def _bound_server(self, port: int) -> grpc.aio.Server:
        """A new server bound to ``port`` (0: any), its services not registered yet;
        ``self.port`` is the port bound. OSError when it cannot bind."""
        cfg = self.config
        server = grpc.aio.server(
            options=_server_options(cfg), maximum_concurrent_rpcs=cfg.concurrent_rpcs_max
        )
        address = f"{_bracketed(cfg.listen_host)}:{port}"
        try:
            if self._tls is not None:
                bound = server.add_secure_port(address, self._tls)
            else:
                bound = server.add_insecure_port(address)
        except RuntimeError:  # grpcio raises when bind fails
            bound = 0
        if bound == 0:
            raise OSError(
                f"cannot listen on {address}: the port is in use or the host is not a local "
                "address; stop the other process or choose another --listen"
            )
        self.port = bound
        return server

    def _register(self, server: grpc.aio.Server) -> None:
        for service, servicer, rules in self._services:
            wire.register(server, service, servicer, rules)

    async def _serve(self) -> None:
        cfg = self.config
        server = self._bound_server(cfg.listen_port)
        identity = routes.BrokerIdentity(
            broker_name=cfg.store.broker_name,
            host=cfg.advertised_host or cfg.listen_host,
            port=self.port,
        )
        self.messaging = messaging.MessagingServicer(
            self.store,
            identity,
            pop=self._pop_factory,
            auto_create_topics=cfg.auto_create_topics,
            auto_create_groups=cfg.auto_create_groups,
            on_sent=self.metrics.on_sent if self.metrics is not None else None,
            on_received=self.metrics.on_received if self.metrics is not None else None,
            replication=self.replication,
            dedup_window_s=cfg.dedup_window_s,
            dedup_entries_max=cfg.dedup_entries_max,
            tls_port=self._tls is not None,
            transaction_limits=cfg.transaction_limits,
            external_book=self.external_book.book if self.external_book is not None else None,
        )
        if self.replication is not None and self.messaging.forwarder is not None:
            self.replication.transport.forward_handler = self.messaging.forwarder.serve
        v2_service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
        authenticator = self.authenticator
        v2_rules = wire.Rules(
            v2_status=True,
            client_id_header=headers.CLIENT_ID_HEADER,
            gate=auth.WireGate(authenticator, "v2") if authenticator else None,
            inflight=self.inflight,
        )
        self._services = [(v2_service, self._measured(self.messaging, v2_service, True), v2_rules)]
        admin_servicer = admin.AdminServicer(self.store, identity, self.messaging.clients)
        admin_servicer.raft = RaftAdmin(self.store, identity, self.replication)
        admin_servicer.messaging = self.messaging
        if self.config.tier is not None and self.tier_source is not None:
            admin_servicer.tier = tier_status.TierSide(
                self.config.tier, self.tier_source, lambda: self.offloader
            )
        if self.metrics is not None:
            self.metrics.registry.register(
                failover_collecting.DuplicatesCollector(
                    self._duplicates_dropped, self._dedup_log_lookups
                )
            )
            self.metrics.registry.register(
                transaction_collecting.TransactionCollector(self._transaction_figures)
            )
            self.metrics.registry.register(
                remoting_collecting.RemotingPopCollector(self._remoting_pop_figures)
            )
            self.metrics.registry.register(
                offload_collecting.OffloadCollector(self._offload_figures)
            )
        if self.metrics is not None and self.replication is not None:
            self.metrics.watch_raft(admin_servicer.raft.status)
            self.metrics.registry.register(
                failover_collecting.FailoverCollector(self._failover_figures)
            )
            self.metrics.registry.register(
                resolver_collecting.ResolveCollector(self._resolve_figures)
            )
        poller = group_polling.GroupPoller(
            identity.broker_name,
            cfg.cluster_seeds,
            interval_s=cfg.group_poll_interval_s,
            security=self.cluster_security,
        )
        self.groups = cluster_admin.BrokerGroups(self.store, identity, self.replication, poller)
        self.messaging.groups = self.groups
        cluster_servicer = cluster_admin.ClusterAdminServicer(admin_servicer, self.groups)
        # Outermost: a follower forwards a write before anything else (the leader fans it out).
        forwarding_servicer = admin_forwarding.ForwardingAdminServicer(
            cluster_servicer, self.messaging.forwarder
        )
        admin_service = admin_pb2.DESCRIPTOR.services_by_name["Admin"]
        admin_measured = self._measured(forwarding_servicer, admin_service, False)
        admin_gate = auth.WireGate(authenticator, "admin") if authenticator else None
        admin_rules = wire.Rules(v2_status=False, gate=admin_gate)
        self._services.append((admin_service, admin_measured, admin_rules))
        self._register(server)
        await server.start()
        self.server = server
        poller.start()
        try:
            await self._serve_remoting(forwarding_servicer)
        except BaseException:  # e.g. the remoting port is taken: no half-started broker
            self.messaging.begin_shutdown()
            await self.groups.poller.stop()
            self.server = None
            await server.stop(0)
            await asyncio.sleep(0)  # the transaction checker sees its stop before the loop ends
            raise
        log.info("broker %s serving on %s", identity.broker_name, self.endpoint)
        if self.replication is not None and cfg.leaderless_close_after_s is not None:
            joining = self.replication.config.join
            gate = port_gate.PortGate(cfg.leaderless_close_after_s, joining=joining)
            self._gating = asyncio.ensure_future(self._gate_port(self.replication, gate))

    async def _gate_port(self, repl: ReplicationNode, gate: port_gate.PortGate) -> None:
        """Close the client port while this member knows no leader, reopen it once it knows
        one (:mod:`port_gate`); ends when the broker stops serving."""
        loop = asyncio.get_running_loop()
        while self.phase in ("starting", "serving") and not self._gate_stopped:
            seen = _gate_inputs(repl)
            known, removed = seen
            should_open = gate.open(loop.time(), known, removed)
            if not should_open and self.server is not None:
                await self._close_port(removed)
            elif should_open and self.server is None and self.phase == "serving":
                await self._reopen_port()
            elif should_open and self.phase == "serving":
                await self._reopen_remoting()  # one a busy port kept closed before
            closes_in = gate.closes_in_s(loop.time())
            wait_s = PORT_GATE_RECHECK_S if closes_in is None or closes_in == 0 else closes_in
            with contextlib.suppress(TimeoutError):
                await repl.wait_until(functools.partial(_gate_inputs_differ, repl, seen), wait_s)

    async def _close_port(self, removed: bool = False) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        self.port_closes_total += 1
        if removed:
            log.warning(
                "removed from the Raft group (no leader counts this member): client port %d "
                "closed at once until a leader does (clients move to another member)",
                self.port,
            )
        else:
            log.warning(
                "no Raft leader known for %.1f s: client port %d closed until one is (clients "
                "move to another member)",
                self.config.leaderless_close_after_s or 0.0,
                self.port,
            )
        if self.messaging is not None and self.messaging.forwarder is not None:
            self.messaging.forwarder.release_held()
        await _bounded(server.stop(PORT_CLOSE_GRACE_S), STOP_STEP_SLACK_S, "closing the port")
        if self.remoting is not None:  # the same rule for the remoting and name-server ports
            await _bounded(self.remoting.close_ports(), STOP_STEP_SLACK_S, "closing remoting")

    async def _reopen_port(self) -> None:
        try:
            server = self._bound_server(self.port)
        except OSError as exc:
            log.warning("client port not reopened yet: %s", exc)
            return
        if self.messaging is not None and self.messaging.forwarder is not None:
            self.messaging.forwarder.hold_again()
        self._register(server)
        await server.start()
        self.server = server
        log.warning("a Raft leader is known again: client port %d reopened", self.port)
        await self._reopen_remoting()

    async def _reopen_remoting(self) -> None:
        if self.remoting is None or self.remoting.listening:
            return
        try:
            await self.remoting.reopen()
        except OSError as exc:  # retried on the gate's next look
            log.warning("remoting port not reopened yet: %s", exc)

    async def _serve_remoting(self, admin_servicer: object) -> None:
        """The remoting and name-server ports (``remoting_port``), when configured."""
        cfg = self.config
        if cfg.remoting_port is None or self.messaging is None:
            return
        requests = broker_requests.BrokerRequests(self.messaging, admin_servicer)
        # mqadmin's requests; they wrap the heartbeat handlers to keep the connection lists
        admin_requests.AdminRequests(self.messaging, admin_servicer).install(requests.handlers)
        if self.authenticator is not None:  # ACL signatures, the same accounts and grants
            requests.gate = acl.RemotingGate(
                self.authenticator.current_accounts, self.authenticator.denials_total
            )
        context = None
        if cfg.tls_cert is not None and cfg.tls_key is not None:  # the client port's files
            context = tls_context.ReloadingContext(
                cfg.tls_cert,
                cfg.tls_key,
                cfg.tls_client_ca,
                interval_s=cfg.tls_reload_interval_s,
            ).context
        server = RemotingServer(
            requests.dispatch, on_closed=requests.connection_closed, ssl_context=context
        )
        self.remoting = server
        self.remoting_requests = requests
        try:
            self.remoting_port = await server.listen(cfg.listen_host, cfg.remoting_port)
            if cfg.nameserver_port is not None:
                self.nameserver_port = await server.listen(cfg.listen_host, cfg.nameserver_port)
            if cfg.external_remoting_port is not None:
                self.external_remoting_port = await server.listen(
                    cfg.listen_host, cfg.external_remoting_port
                )
                requests.nameserver.external_ports = frozenset({self.external_remoting_port})
        except OSError:
            await server.stop()
            raise
        requests.nameserver.ports = nameserver.PortMap(self.port, self.remoting_port)
        log.info(
            "remoting protocol on port %d, name server on port %d",
            self.remoting_port,
            self.nameserver_port or self.remoting_port,
        )

    @property
    def nameserver_endpoint(self) -> str:
        """``host:port`` remoting clients use as their name server."""
        host = self.config.advertised_host or self.config.listen_host
        return f"{_bracketed(host)}:{self.nameserver_port or self.remoting_port}"

    def _duplicates_dropped(self) -> int | None:
        return self.messaging.dedup.duplicates_total if self.messaging is not None else None

    def _dedup_log_lookups(self) -> int | None:
        return self.messaging.dedup.log_lookups_total if self.messaging is not None else None

    def _transaction_figures(self) -> transaction_collecting.TransactionFigures | None:
        handler = self.messaging.transactions if self.messaging is not None else None
        if handler is None:
            return None
        service = handler.service
        return transaction_collecting.TransactionFigures(
            pending=service.pending(),
            checks_sent_total=handler.checks_sent_total,
            check_records_total=service.checks_proposed_total,
            resolutions_total={r.value: n for r, n in service.book.ended_total.items()},
        )

    def _remoting_pop_figures(self) -> remoting_collecting.RemotingPopFigures | None:
        requests = self.remoting_requests
        if requests is None:
            return None
        pop = requests.popping
        return remoting_collecting.RemotingPopFigures(
            requests_by_name=dict(pop.requests_total),
            popped_total=pop.popped_total,
            acked_total=pop.acked_total,
            changed_total=pop.changed_total,
        )

    def _failover_figures(self) -> failover_collecting.FailoverFigures | None:
        replication = self.replication
        messaging = self.messaging
        if replication is None or messaging is None or messaging.forwarder is None:
            return None
        stats = messaging.forwarder.stats
        return failover_collecting.FailoverFigures(
            forwarded_by_method=dict(stats.forwarded_total),
            rerouted_total=stats.rerouted_total,
            held_total=stats.held_total,
            unanswered_total=stats.unanswered_total,
            peer_drops_by_reason=dict(replication.transport.refusals.by_reason),
            hedged_total=stats.hedged_total,
        )

    def _resolve_figures(self) -> ResolveFigures | None:
        """None while not replicating or before a first dial (a group of one exports none)."""
        replication = self.replication
        if replication is None:
            return None
        figures = replication.transport.resolver.figures
        return figures if figures.family or figures.seconds else None

    def _offload_figures(self) -> OffloadFigures | None:
        return self.offloader.figures if self.offloader is not None else None

    def _leads(self) -> bool:
        return self.replication is not None and self.replication.is_leader()

    async def _start_replication(self) -> None:
        if self.config.replication is not None:
            self.replication = ReplicationNode(self.store, self.config.replication)
            await self.replication.start()

    async def _stop_offloader(self) -> None:
        offloader, self.offloader = self.offloader, None
        if offloader is not None:
            await asyncio.to_thread(offloader.stop)

    async def _stop_replication(self) -> None:
        if self.replication is not None:
            await self.replication.stop()

    def _measured(self, servicer: object, service: object, timed: bool) -> object:
        """``servicer`` itself, or its instrumented stand-in when metrics are on."""
        if self.metrics is None:
            return servicer
        return instrumenting.instrument(servicer, service, self.metrics.rpc, timed=timed)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting, drain in-flight RPCs, then close the store cleanly."""
        if self.phase in ("stopping", "stopped", "failed"):
            return
        self.phase = "stopping"
        try:
            await self._stop_serving(grace_s)
        finally:
            self.phase = "stopped"
            await self._close_metrics_server()

    async def stop_port_gate(self) -> None:
        """Stop closing and reopening the client port (:meth:`stop`; a test's crash)."""
        gating, self._gating = self._gating, None
        if gating is not None:
            self._gate_stopped = True  # a cancellation lost in wait_for (3.11) ends it too
            gating.cancel()
            await asyncio.gather(gating, return_exceptions=True)

    async def _stop_serving(self, grace_s: float | None) -> None:
        await self.stop_port_gate()
        server, self.server = self.server, None
        if self.messaging is not None:
            self.messaging.begin_shutdown()
        if self.groups is not None:
            await _bounded(self.groups.poller.stop(), STOP_STEP_SLACK_S, "the group poller's stop")
        remoting, self.remoting = self.remoting, None
        if remoting is not None:
            await _bounded(remoting.stop(), STOP_STEP_SLACK_S, "the remoting server's stop")
        if server is not None:
            grace = self.config.shutdown_grace_s if grace_s is None else grace_s
            await _bounded(server.stop(grace), grace + STOP_STEP_SLACK_S, "the gRPC server's stop")
        await self._stop_offloader()
        await self._stop_replication()
        await self._close_pop()
        # After a failed fsync nothing more is synced: the store is dropped as a crash would.
        await asyncio.to_thread(self.store.abandon if self.failure else self.store.close)

    async def _close_pop(self) -> None:
        """Close the Pop layer (stops its thread, writes its checkpoints) before the store."""
        pop = self.messaging.pop if self.messaging is not None else None
        if pop is not None:
            await asyncio.to_thread(pop.close)

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then :meth:`stop`."""
        stopping = asyncio.Event()
        self._signalled = stopping
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        try:
            await stopping.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            await self.stop()


def _gate_inputs(repl: ReplicationNode) -> tuple[bool, bool]:
    """What the port gate decides with: a leader is known, this member knows it is removed."""
    return repl.leader() is not None, repl.knows_removed()


def _gate_inputs_differ(repl: ReplicationNode, seen: tuple[bool, bool]) -> bool:
    return _gate_inputs(repl) != seen


async def _bounded(step: Coroutine[object, object, None], limit_s: float, what: str) -> None:
    """Await ``step`` for at most ``limit_s``; past that, log it and leave it running."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=limit_s)
    if not done:
        log.warning("%s did not end within %.1f s; stopping without it", what, limit_s)
        return
    task.result()


def _tls_credentials(config: BrokerConfig) -> grpc.ServerCredentials | None:
    """Server credentials of the client port, or None for plaintext; raises TlsFileError."""
    if config.tls_cert is None and config.tls_key is None:
        if config.tls_client_ca is not None:
            raise tls.TlsFileError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise tls.TlsFileError("TLS needs both --tls-cert and --tls-key")
    return tls.ReloadingServerCredentials(
        config.tls_cert,
        config.tls_key,
        config.tls_client_ca,
        interval_s=config.tls_reload_interval_s,
    ).credentials


def _bracketed(host: str) -> str:
    """``[::1]`` for an IPv6 literal, the host itself otherwise."""
    return f"[{host}]" if ":" in host else host


def with_listen(config: BrokerConfig, listen: str) -> BrokerConfig:
    """``config`` listening on ``host:port`` (``[::1]:8081`` for IPv6)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen {listen!r} is not host:port")
    return dataclasses.replace(config, listen_host=host.strip("[]"), listen_port=int(port))
