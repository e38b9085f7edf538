"""``gannet topic|group|pop``: topics, consumer groups and Pop settings of a running broker.

Each command talks to ``--endpoint`` over ``gannet.admin.v1`` (:mod:`gannet.node.cli.calls`).
Results are rich tables, or JSON/YAML with ``-o`` (:mod:`gannet.node.cli.output`); errors
print the broker's message on one line, with the exit codes of :mod:`gannet.node.cli.exits`.
``group reset-offset`` shows its plan and changes offsets only with ``--execute``.

Registered on the ``gannet`` group by :mod:`gannet.node.cli.root`.
"""

from __future__ import annotations

from typing import Any

import click

from gannet.node.cli import output
from gannet.node.cli.calls import CALL_TIMEOUT_S, admin_call, channel
from gannet.node.cli.cluster import views as cluster_views
from gannet.node.cli.options import endpoint_option, parse_time_ms
from gannet.node.cli.output import Column, console, emit, output_option
from gannet.node.protocol.gen import admin_pb2

_TYPES = ("normal", "fifo", "delay", "transaction", "mixed", "lite", "priority")
_PERMS = {"rw": 6, "r": 4, "w": 2, "none": 0}


def _type_value(name: str | None) -> admin_pb2.MessageType:
    return admin_pb2.MessageType.Value(name.upper()) if name else admin_pb2.MESSAGE_TYPE_UNSPECIFIED


TOPIC_COLUMNS = (
    Column("name", "topic"),
    Column("read_queues", "read queues", numeric=True),
    Column("write_queues", "write queues", numeric=True),
    Column("perm", "perm", numeric=True),
    Column("message_type", "message type", numeric=True),
)


def topic_row(t: admin_pb2.Topic) -> dict[str, Any]:
    return {
        "name": t.name,
        "read_queues": t.read_queue_nums,
        "write_queues": t.write_queue_nums,
        "perm": _perm_text(t.perm),
        "message_type": admin_pb2.MessageType.Name(t.message_type),
    }


def _perm_text(perm: int) -> str:
    return ("r" if perm & 4 else "") + ("w" if perm & 2 else "") or "none"


def _topic_summary(t: admin_pb2.Topic) -> str:
    row = topic_row(t)
    own = {k: v for k, v in sorted(t.attributes.items()) if k != "message.type"}
    return (
        f"topic {t.name}: {row['write_queues']} queues, {row['message_type']}, perm {row['perm']}"
        + "".join(f", {k}={v}" for k, v in own.items())
    )


_ATTRIBUTE_HELP = (
    "Topic attribute; settable: gannet.tier.remote.retention.s (whole seconds, 0 or more: how"
    " long the topic's messages are served from the tier, 0 never). Repeatable."
)


def _attributes(values: tuple[str, ...]) -> dict[str, str]:
    """``NAME=VALUE`` options as a map; a value without ``=`` is a usage error naming it."""
    parsed: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{value!r} is not NAME=VALUE", param_hint="--attribute")
        parsed[name] = text
    return parsed


def _attribute_changes(values: tuple[str, ...]) -> dict[str, str]:
    """``+NAME=VALUE`` (set) and ``-NAME`` (remove) options as the admin API's changes."""
    changes: dict[str, str] = {}
    for value in values:
        if value.startswith("-") and len(value) > 1 and "=" not in value:
            changes[value] = ""
        elif value.startswith("+"):
            changes.update({f"+{k.removeprefix('+')}": v for k, v in _attributes((value,)).items()})
        else:
            raise click.BadParameter(
                f"{value!r}: use +NAME=VALUE to set or -NAME to remove",
                param_hint="--attribute",
            )
    return changes


# ---------------------------------------------------------------------------- topic
@click.group()
def topic() -> None:
    """Create, change, list and inspect topics on a running broker."""


@topic.command("create")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--type", "kind", type=click.Choice(_TYPES), default="normal", show_default=True)
@click.option("--perm", type=click.Choice(list(_PERMS)), default="rw", show_default=True)
@click.option(
    "--attribute", "attributes", multiple=True, metavar="NAME=VALUE", help=_ATTRIBUTE_HELP
)
@endpoint_option
def topic_create(
    name: str, queues: int, kind: str, perm: str, attributes: tuple[str, ...], endpoint: str
) -> None:
    """Create topic NAME (producers get TOPIC_NOT_FOUND until it exists).

    Reserved names are refused: system topics, the %RETRY% and %DLQ% prefixes, the cluster and
    broker names.
    """
    request = admin_pb2.CreateTopicRequest(
        name=name,
        queue_nums=queues,
        message_type=_type_value(kind),
        perm=_PERMS[perm],
        attributes=_attributes(attributes),
    )
    reply = admin_call(endpoint, lambda s: s.CreateTopic(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]created[/] {_topic_summary(reply.topic)}", highlight=False)


@topic.command("update")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), help="New queue count (only grows).")
@click.option("--type", "kind", type=click.Choice(_TYPES))
@click.option("--perm", type=click.Choice(list(_PERMS)))
@click.option(
    "--attribute",
    "attributes",
    multiple=True,
    metavar="+NAME=VALUE|-NAME",
    help=_ATTRIBUTE_HELP + " +NAME=VALUE sets, -NAME removes (write --attribute=-NAME).",
)
@endpoint_option
def topic_update(
    name: str,
    queues: int | None,
    kind: str | None,
    perm: str | None,
    attributes: tuple[str, ...],
    endpoint: str,
) -> None:
    """Change queues, message type, permission or attributes of topic NAME."""
    request = admin_pb2.UpdateTopicRequest(
        name=name, message_type=_type_value(kind), attribute_changes=_attribute_changes(attributes)
    )
    if queues is not None:
        request.queue_nums = queues
    if perm is not None:
        request.perm = _PERMS[perm]
    reply = admin_call(endpoint, lambda s: s.UpdateTopic(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]updated[/] {_topic_summary(reply.topic)}", highlight=False)


@topic.command("delete")
@click.argument("name")
@click.confirmation_option(prompt="Delete the topic and its consumer offsets?")
@endpoint_option
def topic_delete(name: str, endpoint: str) -> None:
    """Delete topic NAME's config and offsets (stored messages age out with cleanup)."""
    request = admin_pb2.DeleteTopicRequest(name=name)
    admin_call(endpoint, lambda s: s.DeleteTopic(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]deleted[/] topic {name}", highlight=False)


@topic.command("list")
@click.option("--all", "include_system", is_flag=True, help="Include retry, DLQ, system topics.")
@output_option
@endpoint_option
def topic_list(include_system: bool, endpoint: str) -> None:
    """List topics."""
    request = admin_pb2.ListTopicsRequest(include_system=include_system)
    reply = admin_call(endpoint, lambda s: s.ListTopics(request, timeout=CALL_TIMEOUT_S))
    rows = [topic_row(t) for t in reply.topics]
    emit(rows, output.table("topics", TOPIC_COLUMNS, rows))


QUEUE_COLUMNS = (
    Column("queue", "queue", numeric=True),
    Column("min_offset", "min offset", numeric=True),
    Column("max_offset", "max offset", numeric=True),
    Column("messages", "messages", numeric=True),
    Column("earliest_store_time_ms", "earliest stored", numeric=True, show=output.time_text),
)


@topic.command("describe")
@click.argument("name")
@output_option
@endpoint_option
def topic_describe(name: str, endpoint: str) -> None:
    """Config, per-queue min/max offsets and consuming groups of topic NAME."""
    request = admin_pb2.DescribeTopicRequest(name=name)
    reply = admin_call(endpoint, lambda s: s.DescribeTopic(request, timeout=CALL_TIMEOUT_S))
    queues = [_queue_row(q) for q in reply.queues]
    groups = list(reply.groups)
    document: dict[str, Any] = {"topic": topic_row(reply.topic), "queues": queues, "groups": groups}
    document["not_delivered"] = _not_delivered_row(reply)
    renderables: list[Any] = [
        output.table("topic", TOPIC_COLUMNS, [topic_row(reply.topic)]),
        output.table(f"queues of {name}", QUEUE_COLUMNS, queues),
        f"groups with offsets: {', '.join(groups) or '(none)'}",
        _not_delivered_text(reply),
    ]
    view = cluster_views.cluster_view(channel, endpoint)
    if view is not None and len(view.groups) > 1:  # several broker groups: each one's queues
        elsewhere: dict[str, dict[str, Any]] = {}
        document["broker_groups"] = elsewhere
        for broker, found, why in cluster_views.describe_in_groups(channel, view, name):
            rows = [_queue_row(q) for q in found.queues] if found is not None else []
            elsewhere[broker] = {"queues": rows, "error": why or None, "not_delivered": None}
            title = f"queues of {name} in broker group {broker}" + (f": {why}" if why else "")
            renderables.append(output.table(title, QUEUE_COLUMNS, rows))
            if found is not None:
                elsewhere[broker]["not_delivered"] = _not_delivered_row(found)
                renderables.append(f"{broker}: {_not_delivered_text(found)}")
    emit(document, *renderables)


def _not_delivered_row(reply: admin_pb2.DescribeTopicResponse) -> dict[str, Any]:
    """Messages of the topic held outside its queues: delayed (timer wheel) and prepared
    transactional ones (``delayed_messages`` None where the answering member does not run
    the timer wheel)."""
    return {
        "delayed_messages": reply.delayed_messages if reply.delayed_counted else None,
        "delayed_last_due_ms": reply.delayed_last_due_ms or None,
        "prepared_transactions": reply.prepared_transactions,
    }


def _not_delivered_text(reply: admin_pb2.DescribeTopicResponse) -> str:
    if not reply.delayed_counted:
        delayed = "delayed messages not counted here (ask the group's leader)"
    elif reply.delayed_messages:
        due = output.time_text(reply.delayed_last_due_ms)
        delayed = f"{reply.delayed_messages} delayed messages (the last due {due})"
    else:
        delayed = "0 delayed messages"
    return f"not delivered yet: {delayed}, {reply.prepared_transactions} prepared transactions"


def _queue_row(q: admin_pb2.QueueOffsets) -> dict[str, Any]:
    return {
        "queue": q.queue_id,
        "min_offset": q.min_offset,
        "max_offset": q.max_offset,
        "messages": q.max_offset - q.min_offset,
        "earliest_store_time_ms": q.earliest_store_time_ms,
    }


# ---------------------------------------------------------------------------- group
@click.group()
def group() -> None:
    """Create, list and inspect consumer groups; reset their offsets."""


GROUP_COLUMNS = (
    Column("name", "group"),
    Column("fifo", "fifo"),
    Column("retry_max_times", "retry max times", numeric=True),
    Column("consume_enabled", "consume enabled"),
    Column("retry_policy", "retry policy"),
)


def group_row(g: admin_pb2.Group) -> dict[str, Any]:
    return {
        "name": g.name,
        "fifo": g.fifo,
        "retry_max_times": g.retry_max_times,
        "consume_enabled": g.consume_enable,
        "retry_policy": g.retry_policy,
    }


OFFSET_COLUMNS = (
    Column("topic", "topic"),
    Column("queue", "queue", numeric=True),
    Column("committed", "committed", numeric=True),
    Column("max_offset", "max offset", numeric=True),
    Column("lag", "lag", numeric=True),
)


def offset_row(r: admin_pb2.GroupQueueOffset) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "queue": r.queue_id,
        "committed": r.committed_offset,
        "max_offset": r.max_offset,
        "lag": r.lag,
    }


@group.command("create")
@click.argument("name")
@click.option("--fifo", is_flag=True, help="Deliver each message group in order.")
@click.option("--retry-max-times", type=click.IntRange(-1, 1000), default=16, show_default=True)
@endpoint_option
def group_create(name: str, fifo: bool, retry_max_times: int, endpoint: str) -> None:
    """Create consumer group NAME."""
    request = admin_pb2.CreateGroupRequest(name=name, fifo=fifo, retry_max_times=retry_max_times)
    reply = admin_call(endpoint, lambda s: s.CreateGroup(request, timeout=CALL_TIMEOUT_S))
    g = reply.group
    console.print(
        f"[green]created[/] group {g.name}: fifo {output.cell(g.fifo)}, "
        f"retry max times {g.retry_max_times}",
        highlight=False,
    )


@group.command("delete")
@click.argument("name")
@click.confirmation_option(prompt="Delete the group and its offsets?")
@endpoint_option
def group_delete(name: str, endpoint: str) -> None:
    """Delete consumer group NAME and its committed offsets."""
    request = admin_pb2.DeleteGroupRequest(name=name)
    admin_call(endpoint, lambda s: s.DeleteGroup(request, timeout=CALL_TIMEOUT_S))
    console.print(f"[green]deleted[/] group {name}", highlight=False)


@group.command("list")
@output_option
@endpoint_option
def group_list(endpoint: str) -> None:
    """List consumer groups."""
    request = admin_pb2.ListGroupsRequest()
    reply = admin_call(endpoint, lambda s: s.ListGroups(request, timeout=CALL_TIMEOUT_S))
    rows = [group_row(g) for g in reply.groups]
    emit(rows, output.table("consumer groups", GROUP_COLUMNS, rows))


@group.command("describe")
@click.argument("name")
@output_option
@endpoint_option
def group_describe(name: str, endpoint: str) -> None:
    """Config, committed offsets and lag per queue of group NAME."""
    request = admin_pb2.DescribeGroupRequest(name=name)
    reply = admin_call(endpoint, lambda s: s.DescribeGroup(request, timeout=CALL_TIMEOUT_S))
    rows = [offset_row(r) for r in reply.queues]
    emit(
        {"group": group_row(reply.group), "queues": rows, "total_lag": reply.total_lag},
        output.table("consumer group", GROUP_COLUMNS, [group_row(reply.group)]),
        output.table(f"offsets of {name}", OFFSET_COLUMNS, rows),
        f"total lag: {reply.total_lag}",
    )


RESET_COLUMNS = (
    Column("topic", "topic"),
    Column("broker", "broker"),
    Column("queue", "queue", numeric=True),
    Column("committed_before", "committed now", numeric=True),
    Column("committed", "new committed", numeric=True),
    Column("max_offset", "max offset", numeric=True),
    Column("lag_before", "lag now", numeric=True),
    Column("lag", "new lag", numeric=True),
)


@group.command("reset-offset")
@click.argument("name")
@click.argument("topic_name", metavar="TOPIC")
@click.option("--to-time", help="Epoch ms or ISO-8601: first message stored at or after it.")
@click.option("--to-offset", type=click.IntRange(0), help="A queue offset (clamped per queue).")
@click.option("--queue", "queue_id", type=click.IntRange(0), help="Only this queue.")
@click.option(
    "--dry-run/--execute",
    default=True,
    show_default=True,
    help="Show the plan (committed offsets now and after) without changing anything, or apply it.",
)
@output_option
@endpoint_option
def group_reset_offset(
    name: str,
    topic_name: str,
    to_time: str | None,
    to_offset: int | None,
    queue_id: int | None,
    dry_run: bool,
    endpoint: str,
) -> None:
    """Move group NAME's offsets on TOPIC to a time or an offset.

    Shows the plan first (as kafka-consumer-groups does); --execute applies it.
    """
    if (to_time is None) == (to_offset is None):
        raise click.UsageError("give exactly one of --to-time, --to-offset")
    request = admin_pb2.ResetOffsetRequest(group=name, topic=topic_name, dry_run=dry_run)
    if to_time is not None:
        request.timestamp_ms = parse_time_ms(to_time)
    else:
        assert to_offset is not None
        request.offset = to_offset
    if queue_id is not None:
        request.queue_id = queue_id
    reply = admin_call(endpoint, lambda s: s.ResetOffset(request, timeout=CALL_TIMEOUT_S))
    rows = []
    for after, before in zip(reply.queues, reply.before, strict=True):
        row = {"broker": after.broker, **offset_row(after)}  # broker: "" with one group
        row["committed_before"] = before.committed_offset
        row["lag_before"] = before.lag
        rows.append(row)
    title = f"reset plan for {name} on {topic_name}" if dry_run else f"offsets of {name} reset"
    note = (
        "[yellow]dry run[/]: nothing changed; add --execute to apply this plan"
        if dry_run
        else f"[green]reset[/] {len(rows)} queues"
    )
    emit(
        {"group": name, "topic": topic_name, "executed": not dry_run, "queues": rows},
        output.table(title, _reset_columns(rows), rows),
        note,
    )


def _reset_columns(rows: list[dict[str, Any]]) -> tuple[Column, ...]:
    """The plan's columns: ``broker`` (the queue's group; queue ids repeat across groups) only
    when the answer names groups, i.e. on a cluster of several broker groups."""
    if any(row["broker"] for row in rows):
        return RESET_COLUMNS
    return tuple(c for c in RESET_COLUMNS if c.key != "broker")


@click.group("pop")
def pop() -> None:
    """Pop consumption settings of a running broker."""


REVIVE_QUEUE_COUNT_MAX = 64
REVIVE_COLUMNS = (
    Column("queue", "queue", numeric=True),
    Column("state", "state"),
    Column("revive_offset", "revive offset", numeric=True),
    Column("max_offset", "max offset", numeric=True),
    Column("backlog", "backlog", numeric=True),
)


@pop.command("revive-queues")
@click.option(
    "--set",
    "count",
    type=click.IntRange(1, REVIVE_QUEUE_COUNT_MAX),
    help="Spread new checkpoints over this many revive queues; queues beyond it drain first.",
)
@output_option
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
    rows = [
        {
            "queue": q.queue_id,
            "state": "draining" if q.draining else "active",
            "revive_offset": q.revive_offset,
            "max_offset": q.max_offset,
            "backlog": max(q.max_offset - q.revive_offset, 0),
        }
        for q in reply.queues
    ]
    parked = reply.parked_messages if reply.parked_counted else None
    title = f"revive queues: {reply.active_count} active"
    if parked is not None:
        title += f", {parked} parked"  # checkpoints and acks waiting in the timer wheel
    emit(
        {"active_count": reply.active_count, "parked": parked, "queues": rows},
        output.table(title, REVIVE_COLUMNS, rows),
    )


COMMANDS = (topic, group, pop)
