"""Raft messages over gRPC: the ``gannet.raft.v1.Peer`` server and outbound streams per peer.

Used by :mod:`driver`. The server (its own port, 8091 by default) steps every message that
arrives on a ``Deliver`` stream into the driver's ``on_message`` callback, on the event loop.
For each other member :data:`lanes.LANES` sender tasks (one per lane, each with a channel and
so a TCP connection of its own) keep a ``Deliver`` client stream open each; lane 0 carries
every message to that member in order, the others a copy of what leader liveness and
elections need (:data:`lanes.COPIED_KINDS`: heartbeats and their answers, (pre-)votes and
their answers, TimeoutNow), so one connection stalled by packet loss does not silence the
peer; arriving copies of one message reach ``on_message`` once (:class:`lanes.LaneCopies`).
When a stream fails its lane reconnects after a back-off and the messages queued on it
meanwhile are dropped (Raft re-sends what matters: heartbeats, probes, go-back-N). A stranger
(:meth:`PeerTransport.learn_contact`) gets one lane.

Liveness (a silent link — packets dropped, no connection closed — must not look healthy):
every peer channel and the server run HTTP/2 keepalive (:data:`KEEPALIVE_CLIENT_OPTIONS`,
:data:`KEEPALIVE_SERVER_OPTIONS`: a PING after ``KEEPALIVE_TIME_MS`` of silence, the connection
closed when unanswered for ``KEEPALIVE_TIMEOUT_MS`` — also set as ``grpc.http2.ping_timeout_ms``,
which is what times an unanswered PING out in gRPC 1.75, 1 min by default; the server permits
those PINGs, so it never answers GOAWAY ``too_many_pings``), and each sender cancels its stream
when the peer owes an answer past the silence bound (:mod:`liveness`). Either way the channel is
closed, the peer's resolved address marked stale
(:meth:`peer_resolving.PeerResolver.connection_failed`) and the peer redialed with a back-off
capped at 1 s (:func:`liveness.redial_backoff_s`).
:meth:`PeerTransport.reachable` is true only while a lane's stream is open *and* the peer
answered within the silence bound.

Members named by host name are resolved by :mod:`peer_resolving` before the dial, with a
deadline of their own: ``CONNECT_TIMEOUT_S`` covers only the connection to the address found
(cached, raced between IPv4 and IPv6, looked up again when a connection to it fails).

``Forward`` carries a client request a follower took to the leader: the server hands it to
``forward_handler`` (set by the broker: :mod:`gannet.node.api.forwarding`), and
:meth:`PeerTransport.forward_channel` keeps one channel per member and lane for sending them
(same credentials as the streams; a channel, and so a TCP connection, per lane: a forwarded send
not answered on one is sent again on the next, see :mod:`gannet.node.api.forwarding`). A
``Forward`` from a node outside the configuration is refused ``PERMISSION_DENIED`` with
:data:`REFUSAL_HEADER` ``=`` :data:`NOT_A_MEMBER` in its trailing metadata: the forwarding
member was removed and lets its clients go (:mod:`removal`).

Limits: each outbound queue holds at most ``outbound_messages_max`` messages and
``outbound_bytes_max`` bytes; a message past either is dropped and counted, never blocking the
driver. gRPC messages up to :data:`GRPC_MESSAGE_BYTES_MAX` pass (an AppendEntries carries at most
``append_bytes_max`` of payload).

Authentication (:mod:`peer_auth`): with ``config.peer_secret`` every call carries an HMAC
hello (:meth:`PeerTransport.hello_metadata`) checked before any message is taken
(:meth:`PeerTransport.authenticate`); with peer TLS the caller's certificate must name a member
or the host of the call's contact; in every mode a message must name as its sender another
node the call proved, else it is dropped (:meth:`PeerTransport.admits_sender`). Refusals are
counted in ``refusals``.

Members are the *live* configuration (:meth:`PeerTransport.set_members`, called by the driver
whenever the configuration in the log changes): a member added later is streamed to and named
by certificates like the founders; a removed one is not. Every outbound call names its
sender's own ``id=host:peer/client`` in the :data:`CONTACT_HEADER` metadata. A proven sender
outside the configuration (a *stranger*: this node's configuration is behind, or it was started
with ``--join`` and has none yet) is admitted and answered there, at most
:data:`CONTACTS_MAX` of them (one is forgotten after :data:`CONTACT_FAILED_DIALS_MAX` failed
dials), never as a member (no replication, no reachability row); a node
whose configuration is behind learns the group from the leader's log (issue 34, seed 912).

With ``config.peer_tls`` the server port requires a client certificate signed by the cluster CA
and every outbound stream presents this node's certificate and trusts only that CA
(:mod:`gannet.node.protocol.tls`): a process without a cluster certificate can neither deliver a
message to a member nor receive one; its handshakes fail before any RPC. Rotated files are
picked up: by the server at its next handshakes (:class:`tls.ReloadingServerCredentials`), by
the senders when they reconnect (credentials rebuilt when the files' fingerprint changed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from gannet.node.protocol import tls
from gannet.node.protocol.gen import peer_pb2, peer_pb2_grpc
from gannet.node.raft.messages import Message
from gannet.node.replication import (
    lanes,
    liveness,
    members,
    peer_auth,
    peer_resolving,
    peer_wire,
)
from gannet.node.replication.config import PeerSpec, ReplicationConfig

log = logging.getLogger(__name__)

GRPC_MESSAGE_BYTES_MAX = 64 << 20
CONTACT_HEADER = "x-gannet-peer"
REFUSAL_HEADER = "x-gannet-refusal"
"""Trailing metadata of a refused ``Forward``: why, for the forwarding member to act on."""
NOT_A_MEMBER = "not-a-member"
"""The :data:`REFUSAL_HEADER` value of a ``Forward`` from a node outside the configuration:
the forwarding member was removed (:mod:`removal`)."""
CONTACTS_MAX = 16
CONTACT_FAILED_DIALS_MAX = 2
"""A stranger's contact is forgotten after this many failed dials in a row (it is only ever
answered, so its next call teaches it again)."""
CONNECT_TIMEOUT_S = 2.0
KEEPALIVE_TIME_MS = 1000
"""HTTP/2 PING on every peer connection after this long without a frame from the other side."""
KEEPALIVE_TIMEOUT_MS = 1500
"""A PING unanswered this long closes the connection (its calls fail ``UNAVAILABLE``)."""
PING_INTERVAL_MIN_RECEIVED_MS = 500
"""The server accepts PINGs this often (below ``KEEPALIVE_TIME_MS``: never GOAWAY
``too_many_pings``)."""
STALL_CHECK_INTERVAL_S = 0.25
"""How often a sender checks whether its peer owes an answer past the silence bound."""

KEEPALIVE_CLIENT_OPTIONS: list[tuple[str, str | int]] = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS),
]
"""Peer channels (streams and Forward): a silent link is noticed within
``KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS``, not after TCP's retransmissions give up."""
KEEPALIVE_SERVER_OPTIONS: list[tuple[str, str | int]] = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", PING_INTERVAL_MIN_RECEIVED_MS),
    ("grpc.http2.max_ping_strikes", 0),
]
"""The peer server permits the members' PINGs and pings them back (a dead inbound stream is
freed the same way)."""


class _Outbox:
    """A bounded FIFO of messages for one peer (messages and bytes)."""

    def __init__(self, messages_max: int, bytes_max: int) -> None:
        self._items: collections.deque[tuple[Message, int]] = collections.deque()
        self._bytes = 0
        self._messages_max = messages_max
        self._bytes_max = bytes_max
        self._ready = asyncio.Event()
        self.dropped_total = 0

    def put(self, message: Message) -> None:
        size = peer_wire.size_bytes(message)
        if len(self._items) >= self._messages_max or self._bytes + size > self._bytes_max:
            self.dropped_total += 1
            return
        self._items.append((message, size))
        self._bytes += size
        self._ready.set()

    async def get(self, over: asyncio.Event) -> Message | None:
        """The next message, or None once ``over`` is set (the stream it fed has ended: its
        request iterator must end too, not wait on and take the next stream's messages)."""
        while not over.is_set():
            if self._items:
                break
            self._ready.clear()
            await self._ready.wait()
        else:
            return None
        message, size = self._items.popleft()
        self._bytes -= size
        return message

    def wake(self) -> None:
        """Make a waiting :meth:`get` look again (at its ``over`` event)."""
        self._ready.set()

    def clear(self) -> None:
        self.dropped_total += len(self._items)
        self._items.clear()
        self._bytes = 0


class _PeerServicer(peer_pb2_grpc.PeerServicer):
    def __init__(self, transport: PeerTransport) -> None:
        self._transport = transport

    async def Deliver(self, request_iterator, context):  # type: ignore[no-untyped-def]  # noqa: N802
        transport = self._transport
        received = 0
        contact = _contact(context)
        senders = await transport.authenticate(context, contact)
        async for raw in request_iterator:
            error = transport.refusal(raw)
            if error is not None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, error)
                return peer_pb2.DeliverSummary(messages_received=received)
            if not transport.admits_sender(raw.sender, senders, contact):
                continue  # counted; a stranger's message never reaches the core
            try:
                message = peer_wire.from_proto(raw)
            except peer_wire.PeerWireError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                return peer_pb2.DeliverSummary(messages_received=received)
            transport.deliver(message)
            received += 1
        return peer_pb2.DeliverSummary(messages_received=received)

    async def Forward(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        transport = self._transport
        senders = await transport.authenticate(context, _contact(context))
        handler = transport.forward_handler
        if request.group != transport.config.group:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {request.sender} is in group {request.group!r}, "
                f"this node in {transport.config.group!r}",
            )
            return
        reason = transport.sender_refusal(request.sender, senders)
        if reason is not None:
            transport.refusals.count(reason)
            if reason == "not_a_member":  # removed: the member takes it as no leader for it
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"node {request.sender} is not a member of group {transport.config.group!r} "
                    f"as node {transport.config.node_id} knows it (removed?); it may not forward "
                    "here",
                    ((REFUSAL_HEADER, NOT_A_MEMBER),),
                )
                return
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, f"node {request.sender} may not forward here"
            )
            return
        if handler is None or transport.partitioned:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {transport.config.node_id} does not serve forwarded requests yet",
            )
            return
        async for reply in handler(request, context):
            yield reply


ForwardHandler = Callable[
    [peer_pb2.ForwardRequest, grpc.aio.ServicerContext], AsyncIterator[peer_pb2.ForwardReply]
]
"""Serves ``Peer/Forward`` on the leader (:class:`gannet.node.api.forwarding.Forwarder`)."""


class PeerTransport:
    """Server plus one sender per other member. Start and stop on the driver's event loop."""

    def __init__(self, config: ReplicationConfig, on_message: Callable[[Message], None]) -> None:
        self.config = config
        self._on_message = on_message
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self._peers: dict[int, PeerSpec] = {p.node_id: p for p in config.peers}
        """The live members (this node included), see :meth:`set_members`."""
        self.accept_strangers = False
        """A joining node without configuration: any authenticated sender is admitted."""
        self._contacts: dict[int, PeerSpec] = {}
        """Authenticated senders outside the configuration, answered at their contact (at most
        :data:`CONTACTS_MAX`): never members, never listed as peers, never replicated to."""
        self._outboxes: dict[int, tuple[_Outbox, ...]] = {}
        """One outbox per lane (:mod:`lanes`) of each peer streamed to."""
        self._connected: dict[int, list[bool]] = {}
        """Whether each lane's stream to the peer is open."""
        for p in config.others():
            self._new_lanes(p.node_id, lanes.LANES)
        self._member_ids = frozenset(p.node_id for p in config.peers)
        self._senders: dict[int, list[asyncio.Task[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._server_credentials: grpc.ServerCredentials | None = None
        self._channel_credentials: grpc.ChannelCredentials | None = None
        peer_tls = config.peer_tls
        self._channel_fingerprint: tuple[tuple[int, int, int], ...] = ()
        if peer_tls is not None:
            self._server_credentials = tls.ReloadingServerCredentials(
                peer_tls.cert_file, peer_tls.key_file, peer_tls.ca_file
            ).credentials
            self._channel_credentials = self._peer_channel_credentials()
        self._resends = lanes.AppendResends()
        """AppendEntries that resend bytes go on every lane (:mod:`lanes`)."""
        self._copies = lanes.LaneCopies(config.tick_interval_s / 2)
        """Arriving lane copies of a message taken half a tick before are dropped."""
        self.lane_copies_dropped_total = 0
        self._forward_channels: dict[tuple[int, int], tuple[str, grpc.aio.Channel]] = {}
        """By (member, lane): the address dialed and the channel."""
        self.resolver = peer_resolving.PeerResolver()
        """Members' host names to addresses, apart from the connect deadline."""
        self.forward_handler: ForwardHandler | None = None
        """Set by the broker once its v2 servicer exists; None: Forward is refused."""
        self.refusals = peer_auth.PeerRefusals()
        """Peer calls and messages refused (``gannet_raft_peer_messages_dropped_total``)."""
        self._hellos = (
            peer_auth.HelloChecker(config.peer_secret, config.group, config.node_id)
            if config.peer_secret is not None
            else None
        )
        self.liveness = liveness.PeerLiveness(
            liveness.silence_bound_s(config.tick_interval_s, config.election_timeout_ticks)
        )
        """Who answered lately: :meth:`reachable`, and the stall check of every sender."""
        self.redials_total = 0
        """Streams torn down because their peer stopped answering (a silent link)."""
        self.received_total = 0
        self.partitioned = False
        """Fault injection (tests, drills): while True every message in or out is dropped."""
        self.dropped_while_partitioned: collections.Counter[str] = collections.Counter()
        """Messages that arrived while :attr:`partitioned`, by kind (``ResetLogStart``...): a
        test that heals waits on it to know what a peer sent before the heal has arrived."""

    async def start(self) -> None:
        """Serve peers and connect to them (again, after :meth:`stop`)."""
        self._stopping = asyncio.Event()
        options = [
            ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES_MAX),
            ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES_MAX),
            ("grpc.so_reuseport", 0),
            *KEEPALIVE_SERVER_OPTIONS,
        ]
        server = grpc.aio.server(options=options)
        peer_pb2_grpc.add_PeerServicer_to_server(_PeerServicer(self), server)  # type: ignore[no-untyped-call]
        try:
            if self._server_credentials is not None:
                self.port = server.add_secure_port(
                    self.config.peer_listen, self._server_credentials
                )
            else:
                self.port = server.add_insecure_port(self.config.peer_listen)
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise OSError(
                f"cannot listen for peers on {self.config.peer_listen}: the port is in use or the "
                "host is not local; choose another --peer-listen"
            )
        await server.start()
        self._server = server
        for peer in self._peers.values():
            self._start_sender(peer)

    def _new_lanes(self, node_id: int, count: int) -> None:
        self._outboxes[node_id] = tuple(
            _Outbox(self.config.outbound_messages_max, self.config.outbound_bytes_max)
            for _ in range(count)
        )
        self._connected[node_id] = [False] * count

    def _start_sender(self, peer: PeerSpec) -> None:
        """One sender task per lane; a stranger (:meth:`learn_contact`) gets one lane."""
        if peer.node_id == self.config.node_id or self._server is None:
            return
        if peer.node_id not in self._outboxes:
            member = self._peers.get(peer.node_id) == peer
            self._new_lanes(peer.node_id, lanes.LANES if member else 1)
        self._senders[peer.node_id] = [
            asyncio.create_task(
                self._send_loop(peer, lane), name=f"raft-peer-{peer.node_id}-{lane}"
            )
            for lane in range(len(self._outboxes[peer.node_id]))
        ]

    def set_members(self, peers: tuple[PeerSpec, ...], *, accept_strangers: bool) -> None:
        """The configuration in force changed: admit, stream to and name these members (this
        node included) from now on; stop streaming to the others."""
        self.accept_strangers = accept_strangers
        fresh = {p.node_id: p for p in peers}
        fresh.setdefault(self.config.node_id, self.config.me)
        # a contact that became a member is streamed to as one (its stream restarted once)
        for node_id in [n for n in self._contacts if n in fresh]:
            self._stop_sender(node_id)
            del self._contacts[node_id]
        for node_id in [n for n in self._peers if n not in fresh or fresh[n] != self._peers[n]]:
            self._stop_sender(node_id)
        added = [p for n, p in fresh.items() if self._peers.get(n) != p]
        self._peers = fresh
        self._member_ids = frozenset(fresh)
        for peer in added:
            self._start_sender(peer)

    def _stop_sender(self, node_id: int) -> None:
        for task in self._senders.pop(node_id, []):
            task.cancel()
        self._outboxes.pop(node_id, None)
        self._connected.pop(node_id, None)
        self.liveness.forget(node_id)
        self._resends.forget(node_id)
        for key in [k for k in self._forward_channels if k[0] == node_id]:
            kept = self._forward_channels.pop(key)
            asyncio.get_running_loop().create_task(kept[1].close(None))

    def learn_contact(self, peer: PeerSpec) -> bool:
        """An authenticated sender outside the configuration (a joining node's group, or a
        member added after this node's configuration): answer it at ``peer``. False when
        :data:`CONTACTS_MAX` strangers are already answered."""
        if peer.node_id in self._member_ids or peer.node_id == self.config.node_id:
            return False
        if self._contacts.get(peer.node_id) == peer:
            return True
        if peer.node_id not in self._contacts and len(self._contacts) >= CONTACTS_MAX:
            return False
        self._stop_sender(peer.node_id)  # it moved: answer it at its new contact
        self._contacts[peer.node_id] = peer
        self._start_sender(peer)
        return True

    def _forget_contact(self, node_id: int) -> None:
        """Called by the contact's own sender task, which then ends."""
        log.info("stranger node %d unreachable at its contact: forgotten", node_id)
        del self._contacts[node_id]
        self._senders.pop(node_id, None)
        self._outboxes.pop(node_id, None)
        self._connected.pop(node_id, None)
        self.liveness.forget(node_id)

    def contacts(self) -> frozenset[int]:
        """The strangers this node answers (not members: no metrics, no status rows)."""
        return frozenset(self._contacts)

    async def stop(self) -> None:
        self._stopping.set()
        for outboxes in self._outboxes.values():
            for outbox in outboxes:
                outbox.clear()
        tasks = self._tasks + [task for each in self._senders.values() for task in each]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = []
        self._senders = {}
        for node_id in self._contacts:  # learned again from their next call
            self._outboxes.pop(node_id, None)
            self._connected.pop(node_id, None)
        self._contacts = {}
        channels, self._forward_channels = self._forward_channels, {}
        for _, channel in channels.values():
            await channel.close(None)
        await self.resolver.close()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.5)

    # ------------------------------------------------------------------ in
    async def authenticate(
        self, context: grpc.aio.ServicerContext, contact: str = ""
    ) -> frozenset[int] | None:
        """The nodes a peer call may speak for (None: any, no authentication configured);
        aborts the call ``UNAUTHENTICATED`` (counted) otherwise. ``contact`` is the call's
        :data:`CONTACT_HEADER`: with peer TLS, a sender outside the configuration is proven by
        a certificate naming the host of its contact."""
        allowed: frozenset[int] | None = None
        try:
            if self._hellos is not None:
                value = None
                for key, item in context.invocation_metadata() or ():
                    if key == peer_auth.HEADER:
                        value = str(item)
                allowed = frozenset({self._hellos.check(value)})
            peer_tls = self.config.peer_tls
            if peer_tls is not None:
                hosts = {p.node_id: p.host for p in self._peers.values()}
                stranger = members.parse_contact(contact)
                if stranger is not None and stranger.node_id not in hosts:
                    hosts[stranger.node_id] = stranger.host
                named = peer_auth.members_named(
                    _certificate_names(context), hosts, peer_tls.server_name
                )
                if not named and not self.accept_strangers:
                    raise peer_auth.PeerAuthError(
                        "certificate_names_no_member",
                        "the peer certificate names no member of this group, nor the host of "
                        "the caller's contact",
                    )
                if named:  # else: a joining node; the cluster CA signed it, group unknown yet
                    allowed = named if allowed is None else allowed & named
        except peer_auth.PeerAuthError as exc:
            self.refusals.count(exc.reason)
            log.warning("peer call from %s refused: %s", context.peer(), exc)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            raise AssertionError("abort returned") from None  # pragma: no cover
        return allowed

    def admits_sender(self, sender: int, allowed: frozenset[int] | None, contact: str = "") -> bool:
        """Whether a message naming ``sender`` may be taken on a call that proved
        ``allowed``; counts the refusal otherwise.

        A member is admitted. So is a stranger — a node outside this node's configuration,
        which may be behind: a member added since, or a joining node's group — that the call
        proved (its hello, or a certificate naming its contact's host) and that names itself
        in ``contact`` (the call's :data:`CONTACT_HEADER`): it is answered there
        (:meth:`learn_contact`). Raft's votes and appends are decided by logs, not by the
        receiver's configuration; a removed member that keeps running is kept from disrupting
        a healthy leader by pre-vote and leases (:mod:`gannet.node.raft.election`), not here."""
        reason = self.sender_refusal(sender, allowed, contact)
        if reason is not None:
            self.refusals.count(reason)
        return reason is None

    def sender_refusal(
        self, sender: int, allowed: frozenset[int] | None, contact: str = ""
    ) -> str | None:
        """Why :meth:`admits_sender` refuses ``sender`` (``not_a_member``,
        ``sender_mismatch``), not counted; None: admitted (a stranger's contact learnt)."""
        if sender == self.config.node_id:
            return "not_a_member"
        if allowed is not None and sender not in allowed:
            return "sender_mismatch"
        if sender in self._member_ids:
            return None
        spec = members.parse_contact(contact)
        if spec is None or spec.node_id != sender or not self.learn_contact(spec):
            return "not_a_member"
        return None

    def refusal(self, raw: peer_pb2.RaftMessage) -> str | None:
        if raw.group != self.config.group:
            return (
                f"node {raw.sender} is in group {raw.group!r}, this node in {self.config.group!r}"
            )
        if raw.target != self.config.node_id:
            return f"message for node {raw.target} reached node {self.config.node_id}"
        return None

    def deliver(self, message: Message) -> None:
        if self.partitioned:
            self.dropped_while_partitioned[type(message).__name__] += 1
            return
        self.received_total += 1
        self.liveness.heard(message.sender)
        if self._copies.is_copy(message):
            self.lane_copies_dropped_total += 1
            return
        self._on_message(message)

    # ------------------------------------------------------------------ out
    def send(self, message: Message) -> None:
        outboxes = self._outboxes.get(message.target)
        if outboxes is not None and not self._stopping.is_set() and not self.partitioned:
            resend = self._resends.resend(message)
            for lane in lanes.lanes_for(message, len(outboxes), resend=resend):
                outboxes[lane].put(message)

    def reachable(self, node_id: int) -> bool:
        """Whether a stream to ``node_id`` is open and ``node_id`` answered lately (within
        the silence bound of :mod:`liveness`)."""
        return self.liveness.reachable(node_id, any(self._connected.get(node_id, [])))

    def lanes_open(self, node_id: int) -> int:
        """How many of the lanes (:mod:`lanes`) to ``node_id`` have their stream open."""
        return sum(self._connected.get(node_id, []))

    def dropped_total(self) -> int:
        return sum(o.dropped_total for each in self._outboxes.values() for o in each)

    def _channel_options(
        self, target: peer_resolving.DialTarget | None = None
    ) -> list[tuple[str, str | int]]:
        """Options of a peer channel; dialing a resolved address keeps the host name as the
        authority and, with peer TLS, as the name the certificate must carry."""
        options: list[tuple[str, str | int]] = [
            ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES_MAX),
            ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES_MAX),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            # a channel of its own connections: closing it (a redial) drops the dead one
            # instead of handing the next channel the same connection from gRPC's shared pool
            ("grpc.use_local_subchannel_pool", 1),
            *KEEPALIVE_CLIENT_OPTIONS,
        ]
        peer_tls = self.config.peer_tls
        if target is not None and target.host_name is not None:
            options.append(("grpc.default_authority", target.authority))
        if peer_tls is not None and peer_tls.server_name is not None:
            options.append(("grpc.ssl_target_name_override", peer_tls.server_name))
        elif peer_tls is not None and target is not None and target.host_name is not None:
            options.append(("grpc.ssl_target_name_override", target.host_name))
        return options

    def hello_metadata(self, target: int) -> tuple[tuple[str, str], ...]:
        """The metadata of a call to member ``target``: the shared-secret hello, if any."""
        contact = ((CONTACT_HEADER, str(self.config.me)),)
        secret = self.config.peer_secret
        if secret is None:
            return contact
        hello = peer_auth.hello(secret, self.config.group, self.config.node_id, target)
        return ((peer_auth.HEADER, hello), *contact)

    def forward_channel(self, node_id: int, lane: int = 0) -> grpc.aio.Channel:
        """The channel client requests are forwarded on to member ``node_id`` on ``lane`` (kept
        open, one per member and lane, each its own connection, closed by :meth:`stop`; gRPC
        reconnects it by itself). It dials the member's resolved address once the resolver has
        one (the host name until then, left to gRPC), and is replaced when that address
        changes."""
        peer = self._peers.get(node_id) or self._contacts.get(node_id) or self.config.peer(node_id)
        target = self.resolver.cached_target(peer)
        uri = target.uri if target is not None else peer.peer_endpoint
        kept = self._forward_channels.get((node_id, lane))
        if kept is not None and kept[0] == uri:
            return kept[1]
        if kept is not None:
            asyncio.get_running_loop().create_task(kept[1].close(None))
        channel = self._channel(uri, self._channel_options(target))
        self._forward_channels[(node_id, lane)] = (uri, channel)
        return channel

    async def _send_loop(self, peer: PeerSpec, lane: int) -> None:
        outboxes = self._outboxes.get(peer.node_id)
        if outboxes is None:
            return
        outbox = outboxes[lane]
        connected = self._connected[peer.node_id]
        failed_dials = 0
        while not self._stopping.is_set():
            try:
                target = await self.resolver.target(peer)
            except peer_resolving.ResolveError as exc:
                log.debug("peer %s not resolved: %s", peer, exc)  # the resolver warns
                failed_dials += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._stopping.wait(), liveness.redial_backoff_s(failed_dials)
                    )
                continue
            channel = self._channel(target.uri, self._channel_options(target))
            over = asyncio.Event()  # set when this stream ends (its request iterator ends too)
            try:
                try:
                    await asyncio.wait_for(channel.channel_ready(), CONNECT_TIMEOUT_S)
                except TimeoutError:
                    self.resolver.connection_failed(peer)  # it may have moved: look again
                    raise
                failed_dials = 0
                connected[lane] = True
                self.liveness.restarted(peer.node_id)
                stub = peer_pb2_grpc.PeerStub(channel)  # type: ignore[no-untyped-call]
                call = stub.Deliver(
                    self._stream(peer.node_id, outbox, over),
                    metadata=self.hello_metadata(peer.node_id),
                )
                if await self._until_done_or_stalled(peer.node_id, call):
                    self.redials_total += 1
                    self.resolver.connection_failed(peer)
                    log.warning(
                        "peer %s stopped answering (silent %.1f s with messages unanswered): "
                        "redialing",
                        peer,
                        self.liveness.silent_s(peer.node_id) or 0.0,
                    )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    self.resolver.connection_failed(peer)  # keepalive failed, or it went away
                log.debug("peer %s stream ended: %s", peer, exc)
            except (TimeoutError, ConnectionError) as exc:
                failed_dials += 1
                log.debug("peer %s stream ended: %s", peer, exc)
            finally:
                connected[lane] = False
                over.set()
                outbox.wake()
                await channel.close(None)
            outbox.clear()  # stale after a gap; the core re-sends what matters
            if (
                failed_dials >= CONTACT_FAILED_DIALS_MAX
                and self._contacts.get(peer.node_id) == peer
            ):
                self._forget_contact(peer.node_id)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stopping.wait(), liveness.redial_backoff_s(failed_dials)
                )

    async def _until_done_or_stalled(
        self, node_id: int, call: grpc.aio.StreamUnaryCall[peer_pb2.RaftMessage, object]
    ) -> bool:
        """Wait for the ``Deliver`` call to end (its error raised); True when it was cancelled
        instead because ``node_id`` owed an answer past the silence bound (:mod:`liveness`)."""
        waiter: asyncio.Future[object] = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({waiter}, timeout=STALL_CHECK_INTERVAL_S)
                if done:
                    waiter.result()
                    return False
                if self.liveness.stalled(node_id):
                    call.cancel()
                    await asyncio.wait({waiter})
                    return True
        finally:
            if not waiter.done():
                call.cancel()
                waiter.cancel()

    def _channel(self, endpoint: str, options: list[tuple[str, str | int]]) -> grpc.aio.Channel:
        if self._channel_credentials is not None:
            self._channel_credentials = self._peer_channel_credentials()
            return grpc.aio.secure_channel(endpoint, self._channel_credentials, options=options)
        return grpc.aio.insecure_channel(endpoint, options=options)

    def _peer_channel_credentials(self) -> grpc.ChannelCredentials:
        """This node's client credentials, rebuilt when its PEM files changed (a failed read
        keeps the previous ones)."""
        peer_tls = self.config.peer_tls
        assert peer_tls is not None
        paths = (peer_tls.ca_file, peer_tls.cert_file, peer_tls.key_file)
        seen = tls.fingerprint(paths)
        current = self._channel_credentials
        if current is not None and seen == self._channel_fingerprint:
            return current
        try:
            fresh = tls.channel_credentials(*paths)
        except tls.TlsFileError as exc:
            if current is None:
                raise
            self._channel_fingerprint = seen  # logged once per change, not per reconnect
            log.error("peer TLS files changed but cannot be used: %s; keeping the old ones", exc)
            return current
        self._channel_fingerprint = seen
        return fresh

    async def _stream(
        self, node_id: int, outbox: _Outbox, over: asyncio.Event
    ) -> AsyncIterator[peer_pb2.RaftMessage]:
        group = self.config.group
        while True:
            message = await outbox.get(over)
            if message is None:
                return
            self.liveness.sent(node_id)
            yield peer_wire.to_proto(message, group)


def _contact(context: grpc.aio.ServicerContext) -> str:
    """The call's :data:`CONTACT_HEADER` (empty: none)."""
    contact = ""
    for key, item in context.invocation_metadata() or ():
        if key == CONTACT_HEADER:
            contact = str(item)
    return contact


def _certificate_names(context: grpc.aio.ServicerContext) -> list[str]:
    """Subject alternative names and common name of the caller's certificate."""
    auth = context.auth_context() or {}
    names: list[str] = []
    for key in ("x509_subject_alternative_name", "x509_common_name"):
        names += [v.decode() if isinstance(v, bytes) else str(v) for v in auth.get(key, ())]
    return names
