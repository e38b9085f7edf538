"""Any member of a Raft group serves any client request: followers forward to the leader.

Only the leader may do what writes the log: ``SendMessage``, ``AckMessage``,
``ChangeInvisibleDuration``, ``ForwardMessageToDeadLetterQueue``, ``UpdateOffset`` and Pop's
``ReceiveMessage`` (it writes checkpoints), and the admin API's writes (topics, groups, offset
resets, membership: :mod:`admin_forwarding`). :class:`Forwarder` gates those methods of the
services registered with it (:meth:`Forwarder.register`: the v2 servicer of :mod:`messaging`,
the admin servicer); a forwarded request names its service and method:

- this node leads and has applied the previous terms' log: the request is served here;
- another member leads: the request goes to it over the peer port
  (``gannet.raft.v1.Peer/Forward``, one extra hop on a gRPC channel kept open per member), with
  the client's own deadline, its metadata (client id, ...) and its address; the leader serves it
  as if the client had called it and the answer comes back unchanged. A send the leader
  answers once however often it arrives (:func:`hedgeable`: one message with a message id, not
  transactional, deduplication on) is *hedged*: each member keeps :data:`FORWARD_LANES`
  channels (connections) to the leader, and a copy goes out on the next one after
  :data:`HEDGE_AFTER_S` without an answer, or at once when a connection is down; the first
  answer counts and the other copies are cancelled. A link losing packets at random stalls one
  TCP connection for seconds while it retransmits (issue 34: at 30 % loss, 69 % of a forwarded
  send's time was its ``Forward`` call on one connection, docs/architecture.md); the leader's
  deduplication (:mod:`gannet.node.api.dedup`) makes the copy that arrives second wait for the
  first one's outcome, or answers it with the first one's receipt;
- no leader is known (an election is running), or this node was just elected and still applies
  the log: the request is *held* until one is, at most until shortly before the caller's
  deadline (:data:`HOLD_MAX_S` without one), then answered ``HA_NOT_AVAILABLE`` — a code every
  official client retries (the Python client retries every failure but ``TOO_MANY_REQUESTS``,
  immediately, up to its attempt count). Once the member has known no leader for longer than
  an ordinary election, the broker closes its client port (``broker.port_gate``) and the held
  requests are answered at once (:meth:`Forwarder.release_held`): a retry on the same
  connection would only reach the same member, a closed connection moves the client;
- the leader refuses this member as not a member (``PERMISSION_DENIED``, marked
  ``NOT_A_MEMBER``: it was removed): the member takes it as no leader for it
  (:mod:`gannet.node.replication.removal`), the request is held, and the broker closes the
  client port at once (``broker.port_gate``), answering it;
- the leader it forwarded to refuses (it lost leadership: ``FAILED_PRECONDITION``) or cannot be
  reached (``UNAVAILABLE``: killed), or the leader changes while the forwarded call is still
  running (the old leader stopped, not dead: its call would only time out): the request is
  routed again to whoever leads now. A send re-forwarded this way may have committed on the old
  leader; the client's own retries have the same risk. A method whose purpose is to change the
  leader (``TransferLeadership``) is not routed again when the leader changes: its leader
  answers once the change is done;
- this node served it itself, but its handler found that it no longer leads before doing
  anything (:class:`NotLeading`): the request is routed again as well.

A service that refuses with gRPC statuses (the admin API, ``context.abort``) gets those
refusals back in the reply (``refusal_code``): the forwarding member raises :class:`Refused`
and its caller gets the same status; a failure of the ``Forward`` call itself is always the
forwarding's own (above). Authentication and authorization stay with the member the client
called (its gate admitted the call before the servicer forwarded it); the leader trusts the
forwarding member, which proved its membership on the peer port (:mod:`peer_auth`).

A forwarded call that is not answered before the caller's deadline is ``PROXY_TIMEOUT`` (the
RocketMQ proxy's code for the same case; retried by the clients). At most
``inflight_max`` forwarded calls run at once per member; a request that finds no slot before
its deadline is ``TOO_MANY_REQUESTS`` (overload: the client should slow down). A forwarded
request is never forwarded again: a member that receives one without leading fails it with
``FAILED_PRECONDITION`` and the forwarding member routes it again.

The leader side is :meth:`Forwarder.serve`, plugged into the peer transport as its
``forward_handler`` by the broker (:mod:`gannet.node.broker.serving`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from gannet.node.protocol.gen import peer_pb2, peer_pb2_grpc
from gannet.node.protocol.statuses import ApiError
from gannet.node.replication.config import PeerSpec
from gannet.node.replication.driver import ReplicationNode
from gannet.node.replication.transport import NOT_A_MEMBER, REFUSAL_HEADER

log = logging.getLogger(__name__)

HOLD_MAX_S = 10.0
"""How long a request without a deadline waits for a leader."""
DEADLINE_MARGIN_S = 0.2
"""Answer this long before the caller's deadline, so that the answer reaches it."""
INFLIGHT_MAX = 1024
RETRY_PAUSE_S = 0.05
"""Pause before routing again after the leader refused or could not be reached."""
HEDGE_AFTER_S = 0.3
"""A forwarded one-message send not answered this long after its last copy went out is sent
again on the member's next forward lane (:data:`FORWARD_LANES`)."""
FORWARD_LANES = 5
"""Forward channels (connections) per member: a hedged send goes out on at most this many."""
WATCH_SLICE_S = 1.0
"""A leader watcher with no forwarded call left ends within this long."""

R = TypeVar("R", bound=ProtoMessage)

V2_SERVICE = "apache.rocketmq.v2.MessagingService"
"""The service of a forwarded request that names none (members before admin forwarding)."""

REQUESTS: dict[str, tuple[type[ProtoMessage], type[ProtoMessage]]] = {
    "SendMessage": (service_pb2.SendMessageRequest, service_pb2.SendMessageResponse),
    "AckMessage": (service_pb2.AckMessageRequest, service_pb2.AckMessageResponse),
    "ChangeInvisibleDuration": (
        service_pb2.ChangeInvisibleDurationRequest,
        service_pb2.ChangeInvisibleDurationResponse,
    ),
    "ForwardMessageToDeadLetterQueue": (
        service_pb2.ForwardMessageToDeadLetterQueueRequest,
        service_pb2.ForwardMessageToDeadLetterQueueResponse,
    ),
    "UpdateOffset": (service_pb2.UpdateOffsetRequest, service_pb2.UpdateOffsetResponse),
    "ReceiveMessage": (service_pb2.ReceiveMessageRequest, service_pb2.ReceiveMessageResponse),
    "EndTransaction": (service_pb2.EndTransactionRequest, service_pb2.EndTransactionResponse),
    "SyncLiteSubscription": (
        service_pb2.SyncLiteSubscriptionRequest,
        service_pb2.SyncLiteSubscriptionResponse,
    ),
    "QueryRoute": (service_pb2.QueryRouteRequest, service_pb2.QueryRouteResponse),
    "QueryAssignment": (service_pb2.QueryAssignmentRequest, service_pb2.QueryAssignmentResponse),
}
"""The v2 methods a member forwards to the leader: request and response types
(``ReceiveMessage`` streams). The leader-only ones, and ``QueryRoute`` / ``QueryAssignment``,
which a follower asks of the leader only for a topic or group it does not know (it may lag the
leader's log: ``messaging._here_or_leader``)."""
STREAMING = frozenset({"ReceiveMessage"})


class _Retry(Exception):
    """The forwarded call did nothing (or its leader is gone): route the request again."""


class NotLeading(Exception):
    """Raised by a handler that finds, before doing anything, that this node does not lead (or
    does not serve yet): the forwarder routes the request again (to the leader), and a leader
    serving a forwarded request fails the ``Forward`` call with ``FAILED_PRECONDITION``."""


class Refused(Exception):
    """The leader's servicer refused a forwarded request with a gRPC status (services with
    ``refusals_in_band``); the forwarding member answers its caller with the same."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _status_code(number: int) -> grpc.StatusCode:
    return _STATUS_CODES.get(number, grpc.StatusCode.UNKNOWN)


async def _collect(call: Any) -> list[peer_pb2.ForwardReply]:
    return [reply async for reply in call]


def hedgeable(method: str, request: ProtoMessage) -> bool:
    """Whether a forwarded request may reach the leader twice: a send of one message with a
    message id, not transactional. The leader answers a second copy with the first one's
    outcome (:mod:`gannet.node.api.dedup`: while the first is in flight it waits for it, after
    that it answers its receipt), so it is appended once; a transactional half message is
    left out (its book does not absorb a second copy in every order)."""
    if method != "SendMessage" or not isinstance(request, service_pb2.SendMessageRequest):
        return False
    if len(request.messages) != 1:
        return False
    properties = request.messages[0].system_properties
    return bool(properties.message_id) and properties.message_type != definition_pb2.TRANSACTION


def _not_a_member(exc: grpc.aio.AioRpcError) -> bool:
    """Whether a refused ``Forward`` says this member is not a member of the group there."""
    trailing = exc.trailing_metadata() or ()
    return any(key == REFUSAL_HEADER and value == NOT_A_MEMBER for key, value in trailing)


@dataclass(frozen=True, slots=True)
class ForwardedService:
    """A service whose leader-only methods followers forward (:meth:`Forwarder.register`)."""

    servicer: Any
    """What the leader calls for a forwarded request, by method name; it must not forward
    again (the servicer behind the forwarding, not the one that forwards)."""
    requests: Mapping[str, tuple[type[ProtoMessage], type[ProtoMessage]]]
    """The forwarded methods: request and response types."""
    streaming: frozenset[str] = frozenset()
    """Methods that answer a stream of responses."""
    refusals_in_band: bool = False
    """The servicer refuses with ``context.abort`` (gRPC statuses: the admin API); the leader
    sends such a refusal back in the reply. False: refusals are inside the response (v2)."""


class ForwardedContext:
    """The servicer context of a forwarded request on the leader: the client's metadata and
    address as the forwarding member saw them; the deadline is the peer call's. ``abort`` ends
    the peer call, or with ``refusals_in_band`` raises :class:`Refused` for :meth:`serve` to
    send back."""

    forwarded = True

    def __init__(
        self,
        inner: grpc.aio.ServicerContext,
        metadata: tuple[tuple[str, str], ...],
        peer: str,
        *,
        refusals_in_band: bool = False,
    ) -> None:
        self._inner = inner
        self._metadata = metadata
        self._peer = peer
        self._refusals_in_band = refusals_in_band

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        remaining: float | None = self._inner.time_remaining()
        return remaining

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: object) -> NoReturn:
        if self._refusals_in_band:
            raise Refused(code, details)
        await self._inner.abort(code, details)
        raise AssertionError("context.abort returned")


class Servicer(Protocol):
    """The v2 servicer's methods, looked up by name (:data:`REQUESTS`)."""

    def __getattr__(self, name: str) -> Any: ...


def v2_service(servicer: Servicer) -> ForwardedService:
    """The v2 servicer's leader-only methods (:data:`REQUESTS`)."""
    return ForwardedService(servicer, REQUESTS, STREAMING)


@dataclass
class ForwardStats:
    """Counters for metrics and tests."""

    forwarded_total: dict[str, int] = field(default_factory=dict)
    """Requests sent to the leader, by method."""
    rerouted_total: int = 0
    """Forwarded calls given up and routed again (leader refused, gone or changed)."""
    held_total: int = 0
    """Requests that waited for a leader (none known, or this one not ready yet)."""
    unanswered_total: int = 0
    """Requests answered with a retryable refusal because no leader served them in time."""
    refused_not_member_total: int = 0
    """Forwarded calls the member forwarded to refused as from a non-member (removed)."""
    hedged_total: int = 0
    """Copies of a forwarded send sent on another forward lane (:data:`HEDGE_AFTER_S`)."""


class Forwarder:
    """One per broker of a Raft group; created with the v2 servicer, on the server's loop."""

    def __init__(
        self,
        replication: ReplicationNode,
        *,
        inflight_max: int = INFLIGHT_MAX,
        hold_max_s: float = HOLD_MAX_S,
        hedge_after_s: float | None = HEDGE_AFTER_S,
    ) -> None:
        """``hedge_after_s``: None sends every forwarded request once (the leader would append
        a second copy of a send: deduplication off)."""
        if inflight_max <= 0:
            raise ValueError("inflight_max must be positive")
        if hedge_after_s is not None and hedge_after_s <= 0:
            raise ValueError("hedge_after_s must be positive (or None)")
        self.replication = replication
        self.hold_max_s = hold_max_s
        self.hedge_after_s = hedge_after_s
        self._slots = asyncio.Semaphore(inflight_max)
        self.stats = ForwardStats()
        self.services: dict[str, ForwardedService] = {}
        """By full service name (:meth:`register`); :meth:`serve` calls their servicers."""
        self._moved: dict[int, asyncio.Future[None]] = {}
        """Per member: resolved once it no longer leads (:meth:`_leader_moved`)."""
        self._watching: dict[int, int] = {}
        """Per member: forwarded calls in flight that wait on its ``_moved`` future."""
        self._watchers: set[asyncio.Future[None]] = set()
        self._released = False
        """Set while this member's client port is closed for want of a leader
        (:meth:`release_held`): requests are answered at once instead of held."""

    def release_held(self) -> None:
        """Answer every request held for a leader now, and hold none until
        :meth:`hold_again` (the broker closes its client port: ``broker.port_gate``)."""
        self._released = True
        self.replication.wake_waiters()

    def hold_again(self) -> None:
        self._released = False

    def register(self, name: str, service: ForwardedService) -> None:
        """Serve forwarded requests of service ``name`` (a full gRPC service name)."""
        self.services[name] = service

    # ------------------------------------------------------------------ origin side
    def _deadline(self, context: Any) -> float:
        now = asyncio.get_running_loop().time()
        remaining = context.time_remaining()
        if remaining is None:
            return now + self.hold_max_s
        return now + max(0.0, float(remaining) - DEADLINE_MARGIN_S)

    async def _where(self, deadline: float, forwarded: bool) -> PeerSpec | None:
        """None: serve here. Another member: forward there. Holds while no leader is known or
        this leader is not ready; raises ``HA_NOT_AVAILABLE`` once ``deadline`` passes."""
        repl = self.replication
        me = repl.config.node_id
        loop = asyncio.get_running_loop()
        held = False

        def settled() -> bool:
            if repl.is_serving_leader():
                return True
            leader = repl.leader()
            return not forwarded and leader is not None and leader.node_id != me

        while not settled():
            remaining = deadline - loop.time()
            if forwarded or remaining <= 0 or self._released:
                self.stats.unanswered_total += 1
                raise ApiError(Code.HA_NOT_AVAILABLE, self._no_leader_message())
            if not held:
                held = True
                self.stats.held_total += 1
            with contextlib.suppress(TimeoutError):
                await repl.wait_until(lambda: settled() or self._released, remaining)
        if repl.is_serving_leader():
            return None
        return repl.leader()

    def _no_leader_message(self) -> str:
        repl = self.replication
        leader = repl.leader()
        if leader is None and repl.knows_removed():
            return (
                f"node {repl.config.node_id} was removed from the Raft group (its leader no "
                "longer counts it); retry on another member"
            )
        if leader is None:
            return (
                f"node {repl.config.node_id}: no Raft leader is known (an election is running "
                "or no majority is up); retry"
            )
        if leader.node_id == repl.config.node_id:
            return (
                f"node {repl.config.node_id} was just elected and still applies the log of "
                "the previous terms; retry"
            )
        return (
            f"node {repl.config.node_id} is not the Raft leader and could not reach the "
            f"leader, node {leader.node_id} at {leader.client_endpoint}, in time; retry"
        )

    def _request(
        self, service: str, method: str, request: ProtoMessage, context: Any
    ) -> peer_pb2.ForwardRequest:
        metadata = [
            peer_pb2.MetadataEntry(key=str(key), value=str(value))
            for key, value in (context.invocation_metadata() or ())
            if not str(key).endswith("-bin") and not str(key).startswith(":")
        ]
        return peer_pb2.ForwardRequest(
            group=self.replication.config.group,
            sender=self.replication.config.node_id,
            method=method,
            request=request.SerializeToString(),
            metadata=metadata,
            client_peer=str(context.peer() or ""),
            service="" if service == V2_SERVICE else service,
        )

    async def unary(
        self,
        method: str,
        request: ProtoMessage,
        context: Any,
        local: Callable[[], Awaitable[R]],
        response_type: type[R],
        *,
        service: str = V2_SERVICE,
        follows_leader: bool = True,
    ) -> R:
        """Serve ``request`` here (``local()``) or at the leader; raises :class:`ApiError`
        with a retryable code when no leader served it in time, :class:`Refused` when the
        leader's servicer refused it (``refusals_in_band`` services). ``follows_leader``
        False: a leader change does not route a forwarded call again (the method changes the
        leader itself)."""
        deadline = self._deadline(context)
        forwarded = bool(getattr(context, "forwarded", False))
        loop = asyncio.get_running_loop()
        while True:
            target = await self._where(deadline, forwarded)
            if target is None:
                try:
                    return await local()
                except NotLeading as exc:
                    if forwarded:
                        raise
                    if loop.time() >= deadline:
                        self.stats.unanswered_total += 1
                        raise ApiError(Code.HA_NOT_AVAILABLE, f"{exc}; retry") from None
                    self.stats.rerouted_total += 1
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
            forward = self._request(service, method, request, context)
            try:
                replies = await self._forward_once(
                    target, forward, deadline, follows_leader, hedgeable(method, request)
                )
            except _Retry:
                self._unless_past(deadline, target, method)
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if len(replies) != 1:
                raise ApiError(
                    Code.PROXY_TIMEOUT,
                    f"the leader, node {target.node_id}, answered {method} with "
                    f"{len(replies)} replies",
                )
            reply = replies[0]
            if reply.refusal_code:
                raise Refused(_status_code(reply.refusal_code), reply.refusal_details)
            answer: R = response_type.FromString(reply.response)
            return answer

    async def stream(
        self,
        method: str,
        request: ProtoMessage,
        context: Any,
        local: Callable[[], AsyncIterator[R]],
        response_type: type[R],
    ) -> AsyncIterator[R]:
        """The streaming form of :meth:`unary` (``ReceiveMessage``): once the leader answered
        anything, a broken stream simply ends (the client polls again)."""
        deadline = self._deadline(context)
        forwarded = bool(getattr(context, "forwarded", False))
        while True:
            target = await self._where(deadline, forwarded)
            if target is None:
                async for response in local():
                    yield response
                return
            answered = False
            try:
                async with self._slot(deadline):
                    forward = self._request(V2_SERVICE, method, request, context)
                    call, _ = self._start_forward(target, forward, deadline)
                    async for reply in call:
                        answered = True
                        yield response_type.FromString(reply.response)
                return
            except grpc.aio.AioRpcError as exc:
                if answered:
                    log.info("forwarded %s to node %d broke: %s", method, target.node_id, exc)
                    return
                self._raise_unless_retry(target, method, exc)
            except _Retry:
                pass
            self.stats.rerouted_total += 1
            self._unless_past(deadline, target, method)
            await asyncio.sleep(RETRY_PAUSE_S)

    def _count(self, method: str) -> None:
        self.stats.forwarded_total[method] = self.stats.forwarded_total.get(method, 0) + 1

    @contextlib.asynccontextmanager
    async def _slot(self, deadline: float) -> AsyncIterator[None]:
        """One of the ``inflight_max`` forwarding slots, waited for until ``deadline``:
        ``TOO_MANY_REQUESTS`` only when every slot stayed taken (a free slot is taken at once,
        even at the deadline: the caller decides what a passed deadline means)."""
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            if self._slots.locked():
                await asyncio.wait_for(self._slots.acquire(), max(0.0, remaining))
            else:
                await self._slots.acquire()
        except TimeoutError:
            raise ApiError(
                Code.TOO_MANY_REQUESTS,
                f"node {self.replication.config.node_id}: too many requests forwarded to the "
                "leader at once; slow down",
            ) from None
        try:
            yield
        finally:
            self._slots.release()

    def _channel(self, target: PeerSpec, lane: int = 0) -> grpc.aio.Channel:
        transport = self.replication.transport
        if transport.partitioned:  # fault injection: nothing leaves this node
            raise _Retry
        return transport.forward_channel(target.node_id, lane)

    def _start_forward(
        self, target: PeerSpec, forward: peer_pb2.ForwardRequest, deadline: float, lane: int = 0
    ) -> tuple[Any, float]:
        """Count the method and start the leader's ``Forward`` stream of ``forward`` on
        ``lane``'s channel (the caller holds a slot); the call and its timeout in seconds (the
        deadline plus a margin)."""
        loop = asyncio.get_running_loop()
        if lane == 0:  # a request, however many copies
            self._count(forward.method)
        timeout = max(0.001, deadline - loop.time() + DEADLINE_MARGIN_S)
        stub = peer_pb2_grpc.PeerStub(self._channel(target, lane))  # type: ignore[no-untyped-call]
        call = stub.Forward(
            forward,
            timeout=timeout,
            metadata=self.replication.transport.hello_metadata(target.node_id),
        )
        return call, timeout

    async def _forward_once(
        self,
        target: PeerSpec,
        forward: peer_pb2.ForwardRequest,
        deadline: float,
        follows_leader: bool = True,
        hedged: bool = False,
    ) -> list[peer_pb2.ForwardReply]:
        """The leader's replies, or :class:`_Retry` when the request must be routed again;
        races the call against a leader change (a stopped leader never answers) unless
        ``follows_leader`` is False. ``hedged``: the request may reach the leader more than
        once (:func:`hedgeable`); a copy goes out on the next forward lane each time
        :attr:`hedge_after_s` passes without an answer, or at once when a lane's connection is
        down (``UNAVAILABLE``), and the first answer counts."""
        loop = asyncio.get_running_loop()
        method = forward.method
        lanes = FORWARD_LANES if hedged and self.hedge_after_s is not None else 1
        async with self._slot(deadline):
            calls: list[Any] = []
            answers: list[asyncio.Future[list[peer_pb2.ForwardReply]]] = []

            def start(lane: int) -> float:
                call, timeout = self._start_forward(target, forward, deadline, lane)
                calls.append(call)
                answers.append(asyncio.ensure_future(_collect(call)))
                return timeout

            timeout_at = loop.time() + start(0)
            copied_at = loop.time()
            moved = self._leader_moved(target.node_id) if follows_leader else None
            if follows_leader:
                self._watching[target.node_id] = self._watching.get(target.node_id, 0) + 1
            failure: grpc.aio.AioRpcError | None = None
            try:
                while True:
                    pending = {a for a in answers if not a.done()}
                    hedge_at = copied_at + (self.hedge_after_s or 0.0)
                    wait_until = min(timeout_at, hedge_at) if len(answers) < lanes else timeout_at
                    if pending and wait_until > loop.time():
                        waited: set[asyncio.Future[Any]] = set(pending)
                        if moved is not None:
                            waited.add(moved)
                        await asyncio.wait(
                            waited,
                            timeout=wait_until - loop.time(),
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    done = [a for a in answers if a.done() and not a.cancelled()]
                    for answer in done:
                        if answer.exception() is None:
                            return answer.result()
                    for answer in done:
                        error = answer.exception()
                        if not isinstance(error, grpc.aio.AioRpcError):
                            raise error  # type: ignore[misc]
                        failure = error
                    lost = failure is not None and failure.code() != grpc.StatusCode.UNAVAILABLE
                    pending = {a for a in answers if not a.done()}
                    if (moved is not None and moved.done()) or loop.time() >= timeout_at or lost:
                        break
                    if len(answers) < lanes and (not pending or loop.time() >= hedge_at):
                        self.stats.hedged_total += 1
                        start(len(answers))
                        copied_at = loop.time()
                    elif not pending:
                        break
            finally:
                if follows_leader:
                    self._watching[target.node_id] -= 1
                for call, answer in zip(calls, answers, strict=True):
                    if not answer.done():
                        call.cancel()
                        answer.cancel()
            if failure is not None and not pending:  # every copy failed: the last failure
                self._raise_unless_retry(target, method, failure)
                self.stats.rerouted_total += 1
                raise _Retry
            self.stats.rerouted_total += 1
            if loop.time() >= deadline:
                raise ApiError(Code.PROXY_TIMEOUT, self._timeout_message(target, method))
            raise _Retry

    def _leader_moved(self, node_id: int) -> asyncio.Future[None]:
        """Resolved once ``node_id`` no longer leads (as this member knows): one watcher per
        target shared by every forwarded call in flight to it (a watcher per call woke on every
        Raft step, each: CPU grew with the calls in flight)."""
        moved = self._moved.get(node_id)
        if moved is None or moved.done():
            moved = asyncio.get_running_loop().create_future()
            self._moved[node_id] = moved
            task = asyncio.ensure_future(self._watch_leader(node_id, moved))
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)
        return moved

    async def _watch_leader(self, node_id: int, moved: asyncio.Future[None]) -> None:
        repl = self.replication

        def gone() -> bool:
            leader = repl.leader()
            return leader is None or leader.node_id != node_id

        try:
            while not moved.done():
                try:
                    await repl.wait_until(gone, WATCH_SLICE_S)
                except TimeoutError:
                    if self._watching.get(node_id, 0) <= 0:  # no call waits on it any more
                        return
                    continue
                moved.set_result(None)
        finally:
            if self._moved.get(node_id) is moved:
                del self._moved[node_id]
            if not moved.done():
                moved.cancel()

    def _unless_past(self, deadline: float, target: PeerSpec, method: str) -> None:
        """Before routing a request again: ``PROXY_TIMEOUT`` once its deadline passed (a
        forwarded call that may have reached the leader; retried by the official clients)."""
        if asyncio.get_running_loop().time() >= deadline:
            self.stats.unanswered_total += 1
            raise ApiError(Code.PROXY_TIMEOUT, self._timeout_message(target, method))

    def _timeout_message(self, target: PeerSpec, method: str) -> str:
        return (
            f"{method} was forwarded to the Raft leader, node {target.node_id}, and not answered "
            "before the deadline; it may or may not have taken effect"
        )

    def _raise_unless_retry(self, target: PeerSpec, method: str, exc: grpc.aio.AioRpcError) -> None:
        """Return when the request can be routed again; raise its refusal otherwise."""
        code = exc.code()
        if code == grpc.StatusCode.PERMISSION_DENIED and _not_a_member(exc):
            # The leader no longer counts this member (removed): no leader for it; routed
            # again, the request is held and answered when the port gate lets clients go.
            self.stats.refused_not_member_total += 1
            self.replication.leader_refused_me(target.node_id)
            return
        if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE):
            log.debug("forward of %s to node %d: %s; routing again", method, target.node_id, exc)
            return
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            raise ApiError(Code.PROXY_TIMEOUT, self._timeout_message(target, method))
        log.warning("forward of %s to node %d failed: %s", method, target.node_id, exc)
        raise ApiError(
            Code.HA_NOT_AVAILABLE,
            f"{method} could not be forwarded to the Raft leader, node {target.node_id}: "
            f"{code.name} {exc.details()}",
        )

    # ------------------------------------------------------------------ leader side
    async def serve(
        self, request: peer_pb2.ForwardRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[peer_pb2.ForwardReply]:
        """``Peer/Forward``: serve a forwarded request as the client's own call."""
        name = request.service or V2_SERVICE
        service = self.services.get(name)
        types = service.requests.get(request.method) if service is not None else None
        if service is not None and types is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"{name}/{request.method} is not forwarded"
            )
            return
        repl = self.replication
        if service is None or types is None or not repl.is_leader():
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {repl.config.node_id} does not lead (or does not serve yet)",
            )
            return
        remaining = context.time_remaining()
        with contextlib.suppress(TimeoutError):
            await repl.wait_until(
                lambda: repl.is_serving_leader() or not repl.is_leader(),
                self.hold_max_s if remaining is None else remaining,
            )
        if not repl.is_serving_leader():
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {repl.config.node_id} no longer leads (or is not ready yet)",
            )
            return
        try:
            message = types[0].FromString(request.request)
        except DecodeError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad {request.method}: {exc}")
            return
        metadata = tuple((m.key, m.value) for m in request.metadata)
        forwarded = ForwardedContext(
            context, metadata, request.client_peer, refusals_in_band=service.refusals_in_band
        )
        handler = getattr(service.servicer, request.method)
        if request.method in service.streaming:
            async for response in handler(message, forwarded):
                yield peer_pb2.ForwardReply(response=response.SerializeToString())
            return
        try:
            response = await handler(message, forwarded)
        except Refused as refused:
            yield peer_pb2.ForwardReply(
                refusal_code=refused.code.value[0], refusal_details=refused.details
            )
            return
        except NotLeading as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            return
        yield peer_pb2.ForwardReply(response=response.SerializeToString())
