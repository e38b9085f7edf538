"""``gannet topic|group|pop|message|status``: the admin CLI, a client of a running broker.

Each command talks to ``--endpoint`` (default ``127.0.0.1:8081``) over ``gannet.admin.v1``
(``message send`` uses ``apache.rocketmq.v2`` SendMessage, exactly like a producer). Results
are rich tables; errors print the broker's message. Exit codes (see :mod:`gannet.node.cli`):
1 nothing found, 2 wrong usage (also an unusable --tls-* file), 4 broker unreachable, 5
request refused (also unsigned or not allowed: the message says which option to pass).
``--access-key``/``--secret-key`` (env ``GANNET_ACCESS_KEY``/``GANNET_SECRET_KEY``) sign every
call for a broker with ``--auth-file``; ``--tls``/``--tls-ca`` (and ``--tls-cert``/``--tls-key``
for mutual TLS) reach a TLS-only broker (:func:`channel`).

Registered on the ``gannet`` group by :mod:`gannet.node.cli`.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import grpc
from rich.console import Console
from rich.table import Table

from gannet.node.api import auth, tls
from gannet.node.api.gen import admin_pb2, admin_pb2_grpc

console = Console()
err_console = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_NOT_FOUND = 1
EXIT_UNREACHABLE = 4
EXIT_USAGE = 2
EXIT_REFUSED = 5
DEFAULT_ENDPOINT = "127.0.0.1:8081"
CALL_TIMEOUT_S = 10.0
MESSAGE_BYTES_MAX = 130 * 1024 * 1024
BODY_SHOWN_CHARS = 60
_TYPES = ("normal", "fifo", "delay", "transaction", "mixed")
_PERMS = {"rw": 6, "r": 4, "w": 2, "none": 0}
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

_endpoint = click.option(
    "--endpoint",
    default=DEFAULT_ENDPOINT,
    show_default=True,
    envvar="GANNET_ENDPOINT",
    help="Broker host:port (env GANNET_ENDPOINT).",
)
_SECURITY_META = "gannet.client_security"


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> object:
    """Keep a security option for :func:`channel` (the commands do not take it as argument)."""
    ctx.meta.setdefault(_SECURITY_META, {})[param.name] = value
    return value


_security_options = (
    click.option(
        "--access-key",
        envvar="GANNET_ACCESS_KEY",
        expose_value=False,
        callback=_remember,
        help="Sign requests with this access key (env GANNET_ACCESS_KEY); a broker with "
        "--auth-file requires it.",
    ),
    click.option(
        "--secret-key",
        envvar="GANNET_SECRET_KEY",
        expose_value=False,
        callback=_remember,
        help="Secret of --access-key (env GANNET_SECRET_KEY; prefer the env variable).",
    ),
    click.option(
        "--tls",
        is_flag=True,
        envvar="GANNET_TLS",
        expose_value=False,
        callback=_remember,
        help="Connect with TLS, trusting the system roots (env GANNET_TLS=1).",
    ),
    click.option(
        "--tls-ca",
        type=click.Path(path_type=Path, exists=True, dir_okay=False),
        envvar="GANNET_TLS_CA",
        expose_value=False,
        callback=_remember,
        help="TLS, trusting this PEM CA (env GANNET_TLS_CA).",
    ),
    click.option(
        "--tls-cert",
        type=click.Path(path_type=Path, exists=True, dir_okay=False),
        envvar="GANNET_TLS_CERT",
        expose_value=False,
        callback=_remember,
        help="TLS client certificate (PEM) for a broker with --tls-client-ca "
        "(env GANNET_TLS_CERT).",
    ),
    click.option(
        "--tls-key",
        type=click.Path(path_type=Path, exists=True, dir_okay=False),
        envvar="GANNET_TLS_KEY",
        expose_value=False,
        callback=_remember,
        help="Private key of --tls-cert (env GANNET_TLS_KEY).",
    ),
)


def security_options(command: F) -> F:
    """``--access-key``, ``--secret-key``, ``--tls``, ``--tls-ca``, ``--tls-cert``, ``--tls-key``
    (read by :func:`channel`); for commands with their own endpoint options."""
    for option in reversed(_security_options):
        command = option(command)
    return command


def endpoint_option(command: F) -> F:
    """``--endpoint`` plus the security options every broker command takes."""
    return _endpoint(security_options(command))


def client_security() -> auth.ClientSecurity:
    """The security options of the running command (env variables included)."""
    ctx = click.get_current_context(silent=True)
    given: dict[str, Any] = ctx.meta.get(_SECURITY_META, {}) if ctx is not None else {}
    try:
        return auth.ClientSecurity(
            access_key=given.get("access_key") or None,
            secret_key=given.get("secret_key") or None,
            tls=bool(given.get("tls")),
            tls_ca=given.get("tls_ca"),
            tls_cert=given.get("tls_cert"),
            tls_key=given.get("tls_key"),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def fail(message: str, code: int) -> NoReturn:
    err_console.print(message)
    sys.exit(code)


@contextmanager
def channel(endpoint: str) -> Iterator[grpc.Channel]:
    options = [
        ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
        ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ]
    try:
        opened, raw = auth.client_channel(endpoint, client_security(), options)
    except tls.TlsFileError as exc:
        fail(f"[red]cannot use TLS[/]: {exc}", EXIT_USAGE)
    with raw:
        yield opened


def admin_call(endpoint: str, call: Callable[[admin_pb2_grpc.AdminStub], T]) -> T:
    """Run one admin RPC; exit with the right code on failure."""
    with channel(endpoint) as opened:
        try:
            return call(admin_pb2_grpc.AdminStub(opened))  # type: ignore[no-untyped-call]
        except grpc.RpcError as exc:
            rpc_failed(endpoint, exc)


def rpc_failed(endpoint: str, exc: grpc.RpcError) -> NoReturn:
    code = exc.code()
    if code in _UNREACHABLE:
        fail(
            f"[red]cannot reach a broker at {endpoint}[/] ({code.name}); start one with "
            "`gannet broker run` or pass --endpoint; a broker serving TLS needs --tls (and "
            "--tls-ca for a private CA), a plaintext one no --tls",
            EXIT_UNREACHABLE,
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        fail(
            f"[red]not authenticated[/]: {exc.details()}; the broker requires signed requests: "
            "pass --access-key and --secret-key (or set GANNET_ACCESS_KEY and GANNET_SECRET_KEY)"
            " of a key in its --auth-file",
            EXIT_REFUSED,
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        fail(
            f"[red]not allowed[/]: {exc.details()}; use an access key with the admin right on "
            "it (docs/security.md)",
            EXIT_REFUSED,
        )
    if code == grpc.StatusCode.NOT_FOUND:
        fail(f"[red]not found[/]: {exc.details()}", EXIT_NOT_FOUND)
    fail(f"[red]refused[/] ({code.name}): {exc.details()}", EXIT_REFUSED)


def _type_value(name: str | None) -> admin_pb2.MessageType:
    return admin_pb2.MessageType.Value(name.upper()) if name else admin_pb2.MESSAGE_TYPE_UNSPECIFIED


def _print_topics(topics: list[admin_pb2.Topic]) -> None:
    table = Table(title="topics")
    for col in ("topic", "read queues", "write queues", "perm", "message type"):
        table.add_column(col, justify="left" if col == "topic" else "right")
    for t in topics:
        table.add_row(
            t.name,
            str(t.read_queue_nums),
            str(t.write_queue_nums),
            _perm_text(t.perm),
            admin_pb2.MessageType.Name(t.message_type),
        )
    console.print(table)


def _perm_text(perm: int) -> str:
    return ("r" if perm & 4 else "") + ("w" if perm & 2 else "") or "none"


# ---------------------------------------------------------------------------- topic
@click.group()
def topic() -> None:
    """Create, change, list and inspect topics on a running broker."""


@topic.command("create")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--type", "kind", type=click.Choice(_TYPES), default="normal", show_default=True)
@click.option("--perm", type=click.Choice(list(_PERMS)), default="rw", show_default=True)
@endpoint_option
def topic_create(name: str, queues: int, kind: str, perm: str, endpoint: str) -> None:
    """Create topic NAME (producers get TOPIC_NOT_FOUND until it exists)."""
    request = admin_pb2.CreateTopicRequest(
        name=name, queue_nums=queues, message_type=_type_value(kind), perm=_PERMS[perm]
    )
    reply = admin_call(endpoint, lambda s: s.CreateTopic(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]created[/] topic {name}")
    _print_topics([reply.topic])


@topic.command("update")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), help="New queue count (only grows).")
@click.option("--type", "kind", type=click.Choice(_TYPES))
@click.option("--perm", type=click.Choice(list(_PERMS)))
@endpoint_option
def topic_update(
    name: str, queues: int | None, kind: str | None, perm: str | None, endpoint: str
) -> None:
    """Change queues, message type or permission of topic NAME."""
    request = admin_pb2.UpdateTopicRequest(name=name, message_type=_type_value(kind))
    if queues is not None:
        request.queue_nums = queues
    if perm is not None:
        request.perm = _PERMS[perm]
    reply = admin_call(endpoint, lambda s: s.UpdateTopic(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]updated[/] topic {name}")
    _print_topics([reply.topic])


@topic.command("delete")
@click.argument("name")
@click.confirmation_option(prompt="Delete the topic and its consumer offsets?")
@endpoint_option
def topic_delete(name: str, endpoint: str) -> None:
    """Delete topic NAME's config and offsets (stored messages age out with cleanup)."""
    request = admin_pb2.DeleteTopicRequest(name=name)
    admin_call(endpoint, lambda s: s.DeleteTopic(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]deleted[/] topic {name}")


@topic.command("list")
@click.option("--all", "include_system", is_flag=True, help="Include retry, DLQ, system topics.")
@endpoint_option
def topic_list(include_system: bool, endpoint: str) -> None:
    """List topics."""
    request = admin_pb2.ListTopicsRequest(include_system=include_system)
    reply = admin_call(endpoint, lambda s: s.ListTopics(request, timeout=CALL_TIMEOUT_S))
    _print_topics(list(reply.topics))


@topic.command("describe")
@click.argument("name")
@endpoint_option
def topic_describe(name: str, endpoint: str) -> None:
    """Config, per-queue min/max offsets and consuming groups of topic NAME."""
    request = admin_pb2.DescribeTopicRequest(name=name)
    reply = admin_call(endpoint, lambda s: s.DescribeTopic(request, timeout=CALL_TIMEOUT_S))
    _print_topics([reply.topic])
    table = Table(title=f"queues of {name}")
    for col in ("queue", "min offset", "max offset", "messages", "earliest stored"):
        table.add_column(col, justify="right")
    for q in reply.queues:
        table.add_row(
            str(q.queue_id),
            str(q.min_offset),
            str(q.max_offset),
            str(q.max_offset - q.min_offset),
            _time_text(q.earliest_store_time_ms),
        )
    console.print(table)
    console.print(f"groups with offsets: {', '.join(reply.groups) or '(none)'}")


def _time_text(ms: int) -> str:
    if ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------------------- group
@click.group()
def group() -> None:
    """Create, list and inspect consumer groups; reset their offsets."""


def _print_groups(groups: list[admin_pb2.Group]) -> None:
    table = Table(title="consumer groups")
    for col in ("group", "fifo", "retry max times", "consume enabled", "retry policy"):
        table.add_column(col)
    for g in groups:
        table.add_row(
            g.name, str(g.fifo), str(g.retry_max_times), str(g.consume_enable), g.retry_policy
        )
    console.print(table)


def _print_group_offsets(title: str, rows: list[admin_pb2.GroupQueueOffset]) -> None:
    table = Table(title=title)
    for col in ("topic", "queue", "committed", "max offset", "lag"):
        table.add_column(col, justify="left" if col == "topic" else "right")
    for r in rows:
        table.add_row(
            r.topic, str(r.queue_id), str(r.committed_offset), str(r.max_offset), str(r.lag)
        )
    console.print(table)


@group.command("create")
@click.argument("name")
@click.option("--fifo", is_flag=True, help="Deliver each message group in order.")
@click.option("--retry-max-times", type=click.IntRange(-1, 1000), default=16, show_default=True)
@endpoint_option
def group_create(name: str, fifo: bool, retry_max_times: int, endpoint: str) -> None:
    """Create consumer group NAME."""
    request = admin_pb2.CreateGroupRequest(name=name, fifo=fifo, retry_max_times=retry_max_times)
    reply = admin_call(endpoint, lambda s: s.CreateGroup(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]created[/] group {name}")
    _print_groups([reply.group])


@group.command("delete")
@click.argument("name")
@click.confirmation_option(prompt="Delete the group and its offsets?")
@endpoint_option
def group_delete(name: str, endpoint: str) -> None:
    """Delete consumer group NAME and its committed offsets."""
    request = admin_pb2.DeleteGroupRequest(name=name)
    admin_call(endpoint, lambda s: s.DeleteGroup(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]deleted[/] group {name}")


@group.command("list")
@endpoint_option
def group_list(endpoint: str) -> None:
    """List consumer groups."""
    request = admin_pb2.ListGroupsRequest()
    reply = admin_call(endpoint, lambda s: s.ListGroups(request, timeout=CALL_TIMEOUT_S))
    _print_groups(list(reply.groups))


@group.command("describe")
@click.argument("name")
@endpoint_option
def group_describe(name: str, endpoint: str) -> None:
    """Config, committed offsets and lag per queue of group NAME."""
    request = admin_pb2.DescribeGroupRequest(name=name)
    reply = admin_call(endpoint, lambda s: s.DescribeGroup(request, timeout=CALL_TIMEOUT_S))
    _print_groups([reply.group])
    _print_group_offsets(f"offsets of {name}", list(reply.queues))
    console.print(f"total lag: {reply.total_lag}")


@group.command("reset-offset")
@click.argument("name")
@click.argument("topic_name", metavar="TOPIC")
@click.option("--to-time", help="Epoch ms or ISO-8601: first message stored at or after it.")
@click.option("--to-offset", type=click.IntRange(0), help="A queue offset (clamped per queue).")
@click.option("--queue", "queue_id", type=click.IntRange(0), help="Only this queue.")
@endpoint_option
def group_reset_offset(
    name: str,
    topic_name: str,
    to_time: str | None,
    to_offset: int | None,
    queue_id: int | None,
    endpoint: str,
) -> None:
    """Move group NAME's offsets on TOPIC to a time or an offset."""
    if (to_time is None) == (to_offset is None):
        raise click.UsageError("give exactly one of --to-time, --to-offset")
    request = admin_pb2.ResetOffsetRequest(group=name, topic=topic_name)
    if to_time is not None:
        request.timestamp_ms = parse_time_ms(to_time)
    else:
        assert to_offset is not None
        request.offset = to_offset
    if queue_id is not None:
        request.queue_id = queue_id
    reply = admin_call(endpoint, lambda s: s.ResetOffset(request, timeout=CALL_TIMEOUT_S))
    _print_group_offsets(f"offsets of {name} after reset", list(reply.queues))


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds from digits or an ISO-8601 time (local time when naive)."""
    if text.isdigit():
        return int(text)
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is neither epoch ms nor ISO-8601") from exc


@click.group("pop")
def pop() -> None:
    """Pop consumption settings of a running broker."""


REVIVE_QUEUE_COUNT_MAX = 64


@pop.command("revive-queues")
@click.option(
    "--set",
    "count",
    type=click.IntRange(1, REVIVE_QUEUE_COUNT_MAX),
    help="Spread new checkpoints over this many revive queues; queues beyond it drain first.",
)
@endpoint_option
def pop_revive_queues(count: int | None, endpoint: str) -> None:
    """Show (or change with --set) the revive queues that bring back unacked messages."""
    if count is None:
        reply = admin_call(
            endpoint,
            lambda s: s.GetReviveQueues(admin_pb2.GetReviveQueuesRequest(), timeout=CALL_TIMEOUT_S),
        )
    else:
        request = admin_pb2.SetReviveQueueCountRequest(count=count)
        reply = admin_call(
            endpoint, lambda s: s.SetReviveQueueCount(request, timeout=CALL_TIMEOUT_S)
        )
    table = Table(title=f"revive queues: {reply.active_count} active")
    for col in ("queue", "state", "revive offset", "max offset", "backlog"):
        table.add_column(col, justify="right" if col != "state" else "left")
    for q in reply.queues:
        table.add_row(
            str(q.queue_id),
            "draining" if q.draining else "active",
            str(q.revive_offset),
            str(q.max_offset),
            str(max(q.max_offset - q.revive_offset, 0)),
        )
    console.print(table)


COMMANDS = (topic, group, pop)
