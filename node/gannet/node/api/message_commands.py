"""``gannet message send|query`` and ``gannet status``: messages and broker state over gRPC.

``message send`` is a producer: it sends through ``apache.rocketmq.v2`` SendMessage with a
client-style message id, so it exercises exactly what RocketMQ clients use (receive comes with
Pop consumption). ``message query`` and ``status`` use the admin API. Shared helpers and exit
codes are those of :mod:`commands`; registered by :mod:`gannet.node.cli`.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time

import click
import grpc
from rich.table import Table
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.util.message_id_codec import MessageIdCodec

from gannet.node.api import commands, messaging, statuses
from gannet.node.api.commands import CALL_TIMEOUT_S, console, endpoint_option
from gannet.node.api.gen import admin_pb2

SEND_COUNT_MAX = 100_000


@click.group()
def message() -> None:
    """Send and find messages (receiving comes with Pop consumption)."""


def _build_message(
    topic: str,
    body: bytes,
    tag: str | None,
    keys: tuple[str, ...],
    properties: dict[str, str],
    message_group: str | None,
    deliver_at_ms: int | None,
) -> definition_pb2.Message:
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
    """Send BODY to TOPIC (COUNT times); prints message ids and queue offsets."""
    properties = _parse_properties(props)
    table = Table(title=f"sent to {topic_name}")
    for col in ("message id", "offset"):
        table.add_column(col)
    with commands.channel(endpoint) as channel:
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
                commands.rpc_failed(endpoint, exc)
            _check_status(reply.status)
            for entry in reply.entries:
                table.add_row(entry.message_id, str(entry.offset))
    console.print(table)


def _metadata() -> tuple[tuple[str, str], ...]:
    """The headers RocketMQ clients send; the broker requires a client id."""
    client_id = f"{socket.gethostname()}@{os.getpid()}@gannet-cli"
    return ((messaging.CLIENT_ID_HEADER, client_id), ("x-mq-language", "PYTHON"))


def _check_status(status: definition_pb2.Status) -> None:
    if status.code == statuses.OK:
        return
    name = statuses.code_name(status.code)
    exit_code = commands.EXIT_NOT_FOUND if 40400 <= status.code < 40500 else commands.EXIT_REFUSED
    commands.fail(f"[red]refused[/] ({name}): {status.message}", exit_code)


@message.command("query")
@click.argument("topic_name", metavar="TOPIC")
@click.option("--id", "message_id", help="Message id (client id or offset message id).")
@click.option("--key", help="A message key.")
@click.option("--queue", "queue_id", type=click.IntRange(0), help="With --offset.")
@click.option("--offset", type=click.IntRange(0), help="Queue offset (needs --queue).")
@click.option("--since", help="Stored at or after (epoch ms or ISO-8601).")
@click.option("--until", help="With --since: stored at or before (default now).")
@click.option("--max", "max_count", type=click.IntRange(1, 64), default=32, show_default=True)
@click.option("--show-body", is_flag=True, help="Print whole bodies, not a 60-char preview.")
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
        request.time.begin_ms = commands.parse_time_ms(since)
        now_ms = time.time_ns() // 1_000_000
        request.time.end_ms = commands.parse_time_ms(until) if until else now_ms
    reply = commands.admin_call(endpoint, lambda s: s.QueryMessage(request, timeout=CALL_TIMEOUT_S))
    if not reply.messages:
        commands.fail("no message matches", commands.EXIT_NOT_FOUND)
    _print_messages(list(reply.messages), show_body)


def _print_messages(messages: list[admin_pb2.StoredMessage], show_body: bool) -> None:
    table = Table()
    for col in ("message id", "queue", "offset", "stored", "tag", "keys", "body"):
        table.add_column(col)
    for m in messages:
        body = m.body.decode("utf-8", "replace")
        if not show_body:
            body = body[: commands.BODY_SHOWN_CHARS]
        stored = dt.datetime.fromtimestamp(m.store_timestamp_ms / 1000).isoformat(
            timespec="milliseconds"
        )
        table.add_row(
            m.message_id,
            str(m.queue_id),
            str(m.queue_offset),
            stored,
            m.tag,
            " ".join(m.keys),
            body,
        )
    console.print(table)


@click.command("status")
@endpoint_option
def status(endpoint: str) -> None:
    """Broker identity, topic/group/client counts and store statistics."""
    request = admin_pb2.GetStatusRequest()
    reply = commands.admin_call(endpoint, lambda s: s.GetStatus(request, timeout=CALL_TIMEOUT_S))
    table = Table(title=f"Gannet broker {reply.broker_name} ({reply.cluster_name})")
    table.add_column("item")
    table.add_column("value", justify="right")
    for name in ("endpoint", "version", "data_dir", "flush_mode", "topics", "groups", "clients"):
        table.add_row(name, str(getattr(reply, name)))
    for field in admin_pb2.StoreStatistics.DESCRIPTOR.fields:
        table.add_row(f"store.{field.name}", str(getattr(reply.store, field.name)))
    console.print(table)


COMMANDS = (message, status)
