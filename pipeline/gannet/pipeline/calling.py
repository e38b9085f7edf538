"""The RPCs the Spark data source makes to a Gannet broker: v2 QueryRoute, QueryOffset,
PullMessage and SendMessage, over raw gRPC stubs of ``rocketmq.grpc_protocol``, and Gannet's
Admin PullRecords (a queue read in bulk: the stored records in one reply).

A :class:`BrokerConnection` is one gRPC channel to the first reachable endpoint of the
``endpoints`` option (``host:port``, several separated by ``;`` or ``,``: tried in order when
the channel opens). It sends the ``x-mq-client-id`` header every v2 request needs. Business
errors arrive as a ``status`` inside the reply (v2 error model) and are raised here as
:class:`BrokerError` with the code's name and the broker's message; transport errors stay
``grpc.RpcError``.

Made on the driver (planning: routes and offsets) and inside Spark tasks (pulling, sending);
a connection is never pickled — tasks open their own.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

CLIENT_ID_HEADER = "x-mq-client-id"
CONNECT_TIMEOUT_S = 10.0
MESSAGE_BYTES_MAX = 130 * 1024 * 1024  # the broker's receive limit; replies can be as big

RETRYABLE_CODES = frozenset(
    {
        Code.TOO_MANY_REQUESTS,
        Code.INTERNAL_SERVER_ERROR,
        Code.HA_NOT_AVAILABLE,
        Code.PROXY_TIMEOUT,
        Code.MASTER_PERSISTENCE_TIMEOUT,
        Code.SLAVE_PERSISTENCE_TIMEOUT,
    }
)
RETRYABLE_GRPC = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


_REFUSALS = {
    grpc.StatusCode.OUT_OF_RANGE: Code.ILLEGAL_OFFSET,
    grpc.StatusCode.NOT_FOUND: Code.TOPIC_NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED: Code.FORBIDDEN,
    grpc.StatusCode.INVALID_ARGUMENT: Code.BAD_REQUEST,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Code.TOO_MANY_REQUESTS,
}
"""The v2 code a PullRecords refusal stands for (admin errors are gRPC status codes)."""


class BrokerError(Exception):
    """A v2 reply whose status is not OK; ``code`` is the v2 ``Code``."""

    def __init__(self, what: str, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{what}: {code_name(code)} ({code}): {message}")

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES


def code_name(code: int) -> str:
    try:
        return str(Code.Name(code))
    except ValueError:
        return f"code {code}"


def parse_endpoints(text: str) -> tuple[str, ...]:
    """``"h1:p1;h2:p2"`` → ``("h1:p1", "h2:p2")``; ValueError naming the bad part."""
    parts = [p.strip() for p in text.replace(",", ";").split(";") if p.strip()]
    if not parts:
        raise ValueError("option 'endpoints' is empty; give host:port, e.g. 127.0.0.1:8081")
    for part in parts:
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"option 'endpoints': {part!r} is not host:port (e.g. 127.0.0.1:8081)")
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class RoutedQueue:
    """One queue of a topic's route: its broker group, the group's members' client endpoints
    (leader first, as QueryRoute lists them), and whether it may be read and written."""

    group: str
    endpoints: tuple[str, ...]
    queue_id: int
    readable: bool
    writable: bool


@dataclass(frozen=True, slots=True)
class PulledRecords:
    """One Admin PullRecords answer: ``count`` stored records back to back in ``records``."""

    records: bytes
    count: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class Pulled:
    """One PullMessage answer: the messages and the offset to pull from next."""

    messages: list[definition_pb2.Message]
    next_offset: int
    found: bool


def _client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}@spark@{uuid.uuid4().hex[:12]}"


def _duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


class BrokerConnection:
    """One channel to a broker; use as a context manager."""

    def __init__(self, endpoints: Sequence[str], *, timeout_s: float = 30.0) -> None:
        if not endpoints:
            raise ValueError("no endpoints")
        self.timeout_s = timeout_s
        self._metadata = ((CLIENT_ID_HEADER, _client_id()),)
        options = [
            ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
            ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
            ("grpc.enable_retries", 0),
        ]
        failures: list[str] = []
        for endpoint in endpoints:
            channel = grpc.insecure_channel(endpoint, options=options)
            try:
                grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT_S)
            except grpc.FutureTimeoutError:
                channel.close()
                failures.append(endpoint)
                continue
            self.endpoint = endpoint
            self._channel = channel
            self._stub = service_pb2_grpc.MessagingServiceStub(channel)
            self._admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            return
        raise ConnectionError(
            f"no Gannet broker reachable at {', '.join(failures)} within {CONNECT_TIMEOUT_S:.0f} s"
        )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def readable_queue_ids(self, topic: str) -> list[int]:
        """The ids of the topic's readable queues in any group, ascending (QueryRoute)."""
        return sorted({q.queue_id for q in self.route(topic) if q.readable})

    def route(self, topic: str) -> list[RoutedQueue]:
        """The topic's queues in every broker group, in the route's order (QueryRoute)."""
        reply = self._stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=_resource(topic)),
            timeout=self.timeout_s,
            metadata=self._metadata,
        )
        _check("QueryRoute", reply.status)
        readable = (definition_pb2.READ, definition_pb2.READ_WRITE)
        writable = (definition_pb2.WRITE, definition_pb2.READ_WRITE)
        routed: list[RoutedQueue] = []
        for q in reply.message_queues:
            addresses = q.broker.endpoints.addresses
            endpoints = tuple(f"{a.host}:{a.port}" for a in addresses) or (self.endpoint,)
            routed.append(
                RoutedQueue(
                    str(q.broker.name),
                    endpoints,
                    int(q.id),
                    q.permission in readable,
                    q.permission in writable,
                )
            )
        return routed

    def pull_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        messages_max: int,
        expression: str = "*",
        group: str = "",
        polling_ms: int = 0,
    ) -> PulledRecords:
        """One Admin PullRecords (the stored records in bulk); BrokerError on a refusal, with
        ``ILLEGAL_OFFSET`` for an offset outside the queue (see :meth:`pull`)."""
        request = admin_pb2.PullRecordsRequest(
            topic=topic,
            queue_id=queue_id,
            offset=offset,
            messages_max=messages_max,
            group=group,
            tag_expression=expression,
            polling_ms=polling_ms,
        )
        what = f"PullRecords {topic}/{queue_id} at {offset}"
        try:
            reply = self._admin.PullRecords(
                request, timeout=self.timeout_s + polling_ms / 1000, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            code = _REFUSALS.get(exc.code())
            if code is None:
                raise
            raise BrokerError(what, code, str(exc.details())) from None
        return PulledRecords(reply.records, int(reply.count), int(reply.next_offset))

    def query_offset(self, topic: str, queue_id: int, policy: int, at_ms: int = 0) -> int:
        """QueryOffset with ``BEGINNING``, ``END`` or ``TIMESTAMP`` (``at_ms``)."""
        request = service_pb2.QueryOffsetRequest(
            message_queue=_queue(topic, queue_id), query_offset_policy=policy
        )
        if policy == definition_pb2.TIMESTAMP:
            request.timestamp.CopyFrom(
                Timestamp(seconds=at_ms // 1000, nanos=(at_ms % 1000) * 1_000_000)
            )
        reply = self._stub.QueryOffset(request, timeout=self.timeout_s, metadata=self._metadata)
        _check(f"QueryOffset {topic}/{queue_id}", reply.status)
        return int(reply.offset)

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        batch_size: int,
        expression: str = "*",
        group: str = "",
        polling_ms: int = 0,
    ) -> Pulled:
        """One PullMessage; raises BrokerError unless the status is OK or MESSAGE_NOT_FOUND."""
        request = service_pb2.PullMessageRequest(
            group=_resource(group),
            message_queue=_queue(topic, queue_id),
            offset=offset,
            batch_size=batch_size,
            filter_expression=definition_pb2.FilterExpression(
                type=definition_pb2.TAG, expression=expression
            ),
            long_polling_timeout=_duration(polling_ms),
        )
        frames: Iterator[service_pb2.PullMessageResponse] = self._stub.PullMessage(
            request, timeout=self.timeout_s + polling_ms / 1000, metadata=self._metadata
        )
        status: definition_pb2.Status | None = None
        messages: list[definition_pb2.Message] = []
        next_offset = offset
        for frame in frames:
            kind = frame.WhichOneof("content")
            if kind == "status":
                status = frame.status
            elif kind == "message":
                messages.append(frame.message)
            elif kind == "next_offset":
                next_offset = int(frame.next_offset)
        what = f"PullMessage {topic}/{queue_id} at {offset}"
        if status is None:
            raise BrokerError(what, Code.INTERNAL_SERVER_ERROR, "the reply had no status frame")
        if status.code != Code.MESSAGE_NOT_FOUND:
            _check(what, status)
        return Pulled(messages, next_offset, status.code == Code.OK)

    def send(self, messages: Sequence[definition_pb2.Message]) -> list[int]:
        """One SendMessage; the queue offsets of the messages. Raises BrokerError."""
        reply = self._stub.SendMessage(
            service_pb2.SendMessageRequest(messages=messages),
            timeout=self.timeout_s,
            metadata=self._metadata,
        )
        _check("SendMessage", reply.status)
        for entry in reply.entries:
            _check(f"SendMessage of {entry.message_id}", entry.status)
        return [int(e.offset) for e in reply.entries]


def _queue(topic: str, queue_id: int) -> definition_pb2.MessageQueue:
    return definition_pb2.MessageQueue(topic=_resource(topic), id=queue_id)


def _check(what: str, status: definition_pb2.Status) -> None:
    if status.code != Code.OK:
        raise BrokerError(what, int(status.code), str(status.message))
