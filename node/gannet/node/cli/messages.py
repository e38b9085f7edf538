"""``gannet message send|receive|query`` and ``gannet status``: messages and broker state over gRPC.

``message send`` is a producer: it sends through ``apache.rocketmq.v2`` SendMessage with a
client-style message id, so it exercises exactly what RocketMQ clients use. ``message receive``
is a simple consumer: ReceiveMessage (Pop with long polling) then one batched AckMessage, unless
``--no-ack`` leaves the messages invisible for ``--invisible``. ``message query`` and ``status``
use the admin API. ``send`` prints each message's id, queue and queue offset (the v2 reply
names no queue, so the CLI looks the sent ids up through the admin API, for at most
:data:`SEND_QUEUE_LOOKUP_MAX` messages). Every command takes ``-o json|yaml``.
Shared helpers and exit codes are those of :mod:`commands`; registered by
:mod:`gannet.node.cli`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

import click
import grpc

from gannet.node.cli import calls, exits, options, output, raft_views
from gannet.node.cli.calls import CALL_TIMEOUT_S
from gannet.node.cli.cluster import views as cluster_views
from gannet.node.cli.options import endpoint_option
from gannet.node.cli.output import Column, emit, output_option
from gannet.node.protocol import headers
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc

# The RocketMQ client package (protobufs, message ids, status codes) loads in the functions
# that send or receive, not with every gannet command (tests/test_cli_imports.py).
if TYPE_CHECKING:
    from rocketmq.grpc_protocol import definition_pb2, service_pb2_grpc

SEND_COUNT_MAX = 100_000
SEND_QUEUE_LOOKUP_MAX = 64  # sent messages whose queue the CLI looks up
SEND_QUEUE_LOOKUP_S = 5.0  # until the broker has indexed them
SEND_QUEUE_LOOKUP_PAUSE_S = 0.02


RECEIVE_COUNT_MAX = 10_000
RECEIVE_BATCH_MAX = 32  # messages per ReceiveMessage (the broker caps batch_size at 32)
LONG_POLL_S_MAX = 20.0  # the broker clamps long polling to 5 s - 20 s
LONG_POLL_S_MIN = 5.0
DEADLINE_SLACK_S = 3.0  # client deadline beyond the long poll


@click.group()
def message() -> None:
    """Send, receive and find messages."""


_UNITS_S = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def parse_duration_s(text: str) -> float:
    """Seconds in ``30s``, ``500ms``, ``2m``, ``1h`` or bare seconds (``1.5``); ValueError."""
    cleaned = text.strip().lower()
    number, scale = cleaned, 1.0
    for unit, unit_s in _UNITS_S:
        if cleaned.endswith(unit):
            number, scale = cleaned[: -len(unit)], unit_s
            break
    try:
        seconds = float(number) * scale
    except ValueError:
        raise ValueError(f"{text!r} is not a duration like 30s, 500ms, 2m or 1h") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{text!r} is not a finite duration of 0 or more")
    return seconds


def _duration_option(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        return parse_duration_s(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _build_message(
    topic: str,
    body: bytes,
    tag: str | None,
    keys: tuple[str, ...],
    properties: dict[str, str],
    message_group: str | None,
    deliver_at_ms: int | None,
) -> definition_pb2.Message:
    from rocketmq.grpc_protocol import definition_pb2  # noqa: PLC0415
    from rocketmq.v5.util.message_id_codec import MessageIdCodec  # noqa: PLC0415

    msg = definition_pb2.Message(body=body, user_properties=properties)
    msg.topic.name = topic
    sp = msg.system_properties
    sp.message_id = MessageIdCodec().next_message_id()
    sp.keys.extend(keys)
    sp.body_encoding = definition_pb2.IDENTITY
    sp.born_timestamp.FromMilliseconds(time.time_ns() // 1_000_000)
    sp.message_type = definition_pb2.NORMAL
    if tag is not None:
        sp.tag = tag
    if message_group is not None:
        sp.message_group = message_group
        sp.message_type = definition_pb2.FIFO
    if deliver_at_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(deliver_at_ms)
        sp.message_type = definition_pb2.DELAY
    return msg


def _parse_properties(pairs: tuple[str, ...]) -> dict[str, str]:
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--property")
        result[key] = value
    return result


@message.command("send")
@click.argument("topic_name", metavar="TOPIC")
@click.argument("body")
@click.option("--tag")
@click.option("--key", "keys", multiple=True, help="A message key (repeatable).")
@click.option("--property", "props", multiple=True, help="KEY=VALUE user property (repeatable).")
@click.option("--message-group", help="FIFO message group (the topic must be FIFO).")
@click.option("--delay-ms", type=click.IntRange(1), help="Deliver this many ms from now.")
@click.option("--count", type=click.IntRange(1, SEND_COUNT_MAX), default=1, show_default=True)
@output_option
@endpoint_option
def message_send(
    topic_name: str,
    body: str,
    tag: str | None,
    keys: tuple[str, ...],
    props: tuple[str, ...],
    message_group: str | None,
    delay_ms: int | None,
    count: int,
    endpoint: str,
) -> None:
    """Send BODY to TOPIC (COUNT times); prints message ids, queues and queue offsets."""
    from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc  # noqa: PLC0415

    properties = _parse_properties(props)
    rows: list[dict[str, Any]] = []
    with calls.channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for _ in range(count):
            deliver_at = time.time_ns() // 1_000_000 + delay_ms if delay_ms else None
            msg = _build_message(
                topic_name, body.encode(), tag, keys, properties, message_group, deliver_at
            )
            request = service_pb2.SendMessageRequest(messages=[msg])
            try:
                reply = stub.SendMessage(request, timeout=CALL_TIMEOUT_S, metadata=_metadata())
            except grpc.RpcError as exc:
                calls.rpc_failed(endpoint, exc)
            _check_status(reply.status)
            for entry in reply.entries:
                rows.append({"message_id": entry.message_id, "queue": None, "offset": entry.offset})
        if len(rows) <= SEND_QUEUE_LOOKUP_MAX and delay_ms is None:  # delayed: no queue yet
            _look_up_queues(channel, topic_name, rows)
    emit(rows, output.table(f"sent to {topic_name}", SEND_COLUMNS, rows))


SEND_COLUMNS = (
    Column("message_id", "message id"),
    Column("queue", "queue", numeric=True),
    Column("offset", "queue offset", numeric=True),
)


def _look_up_queues(channel: grpc.Channel, topic_name: str, rows: list[dict[str, Any]]) -> None:
    """Fill each row's queue from the broker's index (QueryMessage by id); rows the broker has
    not indexed within :data:`SEND_QUEUE_LOOKUP_S`, or all when the lookup is refused (the
    access key may publish without the admin right), keep None: the send itself succeeded."""
    stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + SEND_QUEUE_LOOKUP_S
    for row in rows:
        request = admin_pb2.QueryMessageRequest(
            topic=topic_name, message_id=row["message_id"], max_count=1
        )
        while True:
            try:
                reply = stub.QueryMessage(request, timeout=CALL_TIMEOUT_S)
            except grpc.RpcError:  # e.g. a key with the pub right but not admin: queue unknown
                return
            if reply.messages:
                row["queue"] = reply.messages[0].queue_id
                break
            if time.monotonic() >= deadline:
                return
            time.sleep(SEND_QUEUE_LOOKUP_PAUSE_S)


def _metadata() -> tuple[tuple[str, str], ...]:
    """The headers RocketMQ clients send; the broker requires a client id."""
    client_id = f"{socket.gethostname()}@{os.getpid()}@gannet-cli"
    return ((headers.CLIENT_ID_HEADER, client_id), ("x-mq-language", "PYTHON"))


def _check_status(status: definition_pb2.Status) -> None:
    from gannet.node.protocol import statuses  # noqa: PLC0415

    if status.code == statuses.OK:
        return
    name = statuses.code_name(status.code)
    exit_code = exits.EXIT_NOT_FOUND if 40400 <= status.code < 40500 else exits.EXIT_REFUSED
    exits.fail(f"[red]refused[/] ({name}): {status.message}", exit_code)


@message.command("receive")
@click.option("--group", "group_name", required=True, help="Consumer group (must exist).")
@click.option("--topic", "topic_name", required=True, help="Topic to receive from.")
@click.option(
    "--count",
    type=click.IntRange(1, RECEIVE_COUNT_MAX),
    default=1,
    show_default=True,
    help="Receive at most this many messages.",
)
@click.option("--tag", "tag_expression", default="*", show_default=True, help="Tag filter: a||b.")
@click.option(
    "--ack/--no-ack",
    default=True,
    show_default=True,
    help="Acknowledge what was received, or leave it invisible for --invisible.",
)
@click.option(
    "--invisible",
    "invisible_s",
    callback=_duration_option,
    default="30s",
    show_default=True,
    help="Invisible time of received messages (10s - 12h).",
)
@click.option(
    "--wait",
    "wait_s",
    callback=_duration_option,
    default="20s",
    show_default=True,
    help="Give up when no message came for this long (the broker long-polls 5s - 20s).",
)
@click.option("--show-body", is_flag=True, help="Print whole bodies, not a 60-char preview.")
@output_option
@endpoint_option
def message_receive(
    group_name: str,
    topic_name: str,
    count: int,
    tag_expression: str,
    ack: bool,
    invisible_s: float,
    wait_s: float,
    show_body: bool,
    endpoint: str,
) -> None:
    """Receive up to COUNT messages of TOPIC as GROUP (Pop), print them, then ack them.

    Exit 0 when something came; 1 when nothing came within --wait or the group or topic does
    not exist; 4 broker unreachable; 5 refused (bad filter or invisible time, ack refused).
    """
    from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: PLC0415

    received: list[definition_pb2.Message] = []
    acked: dict[str, str] = {}
    with calls.channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + wait_s
        while len(received) < count:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0 and received:
                break
            batch = _receive_batch(
                stub,
                endpoint,
                group_name,
                topic_name,
                tag_expression,
                min(count - len(received), RECEIVE_BATCH_MAX),
                invisible_s,
                max(remaining_s, 0.0),
            )
            received.extend(batch)
            if not batch and time.monotonic() >= deadline:
                break
        if ack and received:
            acked = _ack_all(stub, endpoint, group_name, topic_name, received)
    if not received:
        exits.fail(f"no message within {wait_s:g} s", exits.EXIT_NOT_FOUND)
    _print_received(received, acked if ack else None, invisible_s, show_body)
    failed = [code for code in acked.values() if code != "OK"]
    if failed:
        exits.fail(
            f"[red]{len(failed)} of {len(received)} acks refused[/] ({', '.join(set(failed))})",
            exits.EXIT_REFUSED,
        )


def _receive_batch(
    stub: service_pb2_grpc.MessagingServiceStub,
    endpoint: str,
    group_name: str,
    topic_name: str,
    tag_expression: str,
    batch_size: int,
    invisible_s: float,
    wait_s: float,
) -> list[definition_pb2.Message]:
    """One ReceiveMessage call: the messages it delivered (exits on a refusal)."""
    from rocketmq.grpc_protocol import definition_pb2, service_pb2  # noqa: PLC0415

    from gannet.node.protocol import statuses  # noqa: PLC0415

    request = service_pb2.ReceiveMessageRequest(batch_size=batch_size, auto_renew=False)
    request.group.name = group_name
    request.message_queue.topic.name = topic_name
    request.message_queue.id = -1
    request.filter_expression.type = definition_pb2.TAG
    request.filter_expression.expression = tag_expression
    request.invisible_duration.FromMilliseconds(round(invisible_s * 1000))
    long_poll_s = min(max(wait_s, 0.0), LONG_POLL_S_MAX)
    request.long_polling_timeout.FromMilliseconds(round(long_poll_s * 1000))
    timeout_s = max(long_poll_s, LONG_POLL_S_MIN) + DEADLINE_SLACK_S
    messages: list[definition_pb2.Message] = []
    try:
        for frame in stub.ReceiveMessage(request, timeout=timeout_s, metadata=_metadata()):
            kind = frame.WhichOneof("content")
            if kind == "status" and frame.status.code not in (
                statuses.OK,
                statuses.MESSAGE_NOT_FOUND,
            ):
                _check_status(frame.status)
            elif kind == "message":
                messages.append(frame.message)
    except grpc.RpcError as exc:
        calls.rpc_failed(endpoint, exc)
    return messages


def _ack_all(
    stub: service_pb2_grpc.MessagingServiceStub,
    endpoint: str,
    group_name: str,
    topic_name: str,
    messages: list[definition_pb2.Message],
) -> dict[str, str]:
    """Ack ``messages`` in batches; the code name per receipt handle."""
    from rocketmq.grpc_protocol import service_pb2  # noqa: PLC0415

    from gannet.node.protocol import statuses  # noqa: PLC0415

    result: dict[str, str] = {}
    for start in range(0, len(messages), RECEIVE_BATCH_MAX):
        chunk = messages[start : start + RECEIVE_BATCH_MAX]
        request = service_pb2.AckMessageRequest(
            entries=[
                service_pb2.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=m.system_properties.receipt_handle,
                )
                for m in chunk
            ]
        )
        request.group.name = group_name
        request.topic.name = topic_name
        try:
            reply = stub.AckMessage(request, timeout=CALL_TIMEOUT_S, metadata=_metadata())
        except grpc.RpcError as exc:
            calls.rpc_failed(endpoint, exc)
        if not reply.entries:
            _check_status(reply.status)
        for entry in reply.entries:
            result[entry.receipt_handle] = statuses.code_name(entry.status.code)
    return result


RECEIVED_COLUMNS = (
    Column("message_id", "message id"),
    Column("queue", "queue", numeric=True),
    Column("offset", "offset", numeric=True),
    Column("attempt", "attempt", numeric=True),
    Column("tag", "tag"),
    Column("keys", "keys"),
    Column("body", "body"),
    Column("state", "state"),
)


def _print_received(
    messages: list[definition_pb2.Message],
    acked: dict[str, str] | None,
    invisible_s: float,
    show_body: bool,
) -> None:
    rows = []
    for m in messages:
        sp = m.system_properties
        if acked is None:
            state = f"invisible {invisible_s:g} s"
        else:
            state = "acked" if acked.get(sp.receipt_handle) == "OK" else "ack refused"
        row: dict[str, Any] = {
            "message_id": sp.message_id,
            "queue": sp.queue_id,
            "offset": sp.queue_offset,
            "attempt": sp.delivery_attempt,
            "tag": sp.tag if sp.HasField("tag") else None,
            "keys": list(sp.keys),
            **output.body_fields(m.body, None if show_body else output.BODY_SHOWN_CHARS),
            "state": state,
        }
        rows.append(row)
    table_rows = [{**r, "body": output.body_text(r)} for r in rows]
    emit(rows, output.table(f"received {len(messages)}", RECEIVED_COLUMNS, table_rows))


@message.command("query")
@click.argument("topic_name", metavar="TOPIC")
@click.option(
    "--id",
    "message_id",
    callback=options.message_id_callback,
    help="Message id: the client's (34 hex digits, as tables show) or an offset message id.",
)
@click.option("--key", help="A message key.")
@click.option("--queue", "queue_id", type=click.IntRange(0), help="With --offset.")
@click.option("--offset", type=click.IntRange(0), help="Queue offset (needs --queue).")
@click.option("--since", help="Stored at or after (epoch ms or ISO-8601).")
@click.option("--until", help="With --since: stored at or before (default now).")
@click.option("--max", "max_count", type=click.IntRange(1, 64), default=32, show_default=True)
@click.option("--show-body", is_flag=True, help="Print whole bodies, not a 60-char preview.")
@output_option
@endpoint_option
def message_query(
    topic_name: str,
    message_id: str | None,
    key: str | None,
    queue_id: int | None,
    offset: int | None,
    since: str | None,
    until: str | None,
    max_count: int,
    show_body: bool,
    endpoint: str,
) -> None:
    """Find messages of TOPIC by id, key, queue offset or store time; exit 1 if none."""
    request = admin_pb2.QueryMessageRequest(topic=topic_name, max_count=max_count)
    chosen = [message_id is not None, key is not None, offset is not None, since is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --id, --key, --queue/--offset, --since")
    if message_id is not None:
        request.message_id = message_id
    elif key is not None:
        request.key = key
    elif offset is not None:
        if queue_id is None:
            raise click.UsageError("--offset needs --queue")
        request.queue_offset.queue_id = queue_id
        request.queue_offset.offset = offset
    else:
        assert since is not None
        request.time.begin_ms = options.parse_time_ms(since)
        now_ms = time.time_ns() // 1_000_000
        request.time.end_ms = options.parse_time_ms(until) if until else now_ms
    reply = calls.admin_call(endpoint, lambda s: s.QueryMessage(request, timeout=CALL_TIMEOUT_S))
    if not reply.messages:
        exits.fail("no message matches", exits.EXIT_NOT_FOUND)
    _print_messages(list(reply.messages), show_body)


MESSAGE_COLUMNS = (
    Column("message_id", "message id"),
    Column("queue", "queue", numeric=True),
    Column("offset", "offset", numeric=True),
    Column("store_timestamp_ms", "stored", show=output.time_text),
    Column("tag", "tag"),
    Column("keys", "keys"),
    Column("body", "body"),
)


def _print_messages(messages: list[admin_pb2.StoredMessage], show_body: bool) -> None:
    rows = [
        {
            "message_id": m.message_id,
            "topic": m.topic,
            "queue": m.queue_id,
            "offset": m.queue_offset,
            "commit_offset": m.commit_offset,
            "store_timestamp_ms": m.store_timestamp_ms,
            "tag": m.tag or None,
            "keys": list(m.keys),
            **output.body_fields(m.body, None if show_body else output.BODY_SHOWN_CHARS),
        }
        for m in messages
    ]
    table_rows = [{**r, "body": output.body_text(r)} for r in rows]
    emit(rows, output.table(None, MESSAGE_COLUMNS, table_rows))


@click.command("status")
@output_option
@endpoint_option
def status(endpoint: str) -> None:
    """Broker identity, topic/group/client counts, store statistics and Raft state."""
    request = admin_pb2.GetStatusRequest()
    reply = calls.admin_call(endpoint, lambda s: s.GetStatus(request, timeout=CALL_TIMEOUT_S))
    raft_request = admin_pb2.GetRaftStatusRequest()
    raft = calls.admin_call(
        endpoint, lambda s: s.GetRaftStatus(raft_request, timeout=CALL_TIMEOUT_S)
    )
    broker: dict[str, Any] = {
        name: getattr(reply, name)
        for name in (
            "broker_name",
            "cluster_name",
            "endpoint",
            "version",
            "data_dir",
            "flush_mode",
            "topics",
            "groups",
            "clients",
        )
    }
    store = {
        f.name: getattr(reply.store, f.name) for f in admin_pb2.StoreStatistics.DESCRIPTOR.fields
    }
    items = {k: v for k, v in broker.items() if k not in ("broker_name", "cluster_name")}
    items.update({f"store.{k}": v for k, v in store.items()})
    renderables: list[Any] = [
        output.items_table(f"Gannet broker {reply.broker_name} ({reply.cluster_name})", items),
        raft_views.node_table(raft),
    ]
    if raft.peers:
        renderables.append(raft_views.peers_table(raft))
    document: dict[str, Any] = {
        "broker": broker,
        "store": store,
        "raft": raft_views.raft_document(raft),
    }
    view = cluster_views.cluster_view(calls.channel, endpoint)
    if view is not None and len(view.groups) > 1:  # a cluster of several broker groups
        document["broker_groups"] = cluster_views.group_rows(view)
        renderables.append(cluster_views.groups_table(view))
    emit(document, *renderables)


COMMANDS = (message, status)
