"""What the ``gannet`` command prints: rich tables for people, JSON or YAML for scripts.

Every list, describe, query and status command takes ``-o/--output table|json|yaml``
(:func:`output_option`, kubectl's habit) and prints through :func:`emit`:

* ``table`` (default) prints rich tables on :data:`console`. On a terminal they fit its width;
  when stdout is a file or a pipe (``> out.txt``, ``| cat``) :func:`fit_to_stdout` makes the
  console as wide as any table needs, so no id or time is ever cut to ``0102FC0000…``;
* ``json`` and ``yaml`` print one document with the same fields as the tables, raw values
  (integers, epoch milliseconds, true/false), for ``jq`` and friends.

Tables are built from rows of plain values and :class:`Column` descriptions (:func:`table`):
numbers are right-aligned, booleans print as yes/no, cell text is never read as rich markup
(a message body ``[red]x`` prints as written). Errors go to :data:`err_console` (stderr, never
wrapped, one line each).

Used by :mod:`gannet.node.cli`, :mod:`gannet.node.cli.admin`,
:mod:`gannet.node.cli.messages` and :mod:`gannet.node.cli.cluster.commands`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import yaml
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

FORMATS = ("table", "json", "yaml")
PIPE_WIDTH = 100_000
BODY_SHOWN_CHARS = 60
"""Characters of a message body a table shows (``--show-body`` shows all)."""
"""Console width when stdout is not a terminal: wider than any row, so nothing is cut."""
_FORMAT_META = "gannet.output_format"
F = TypeVar("F", bound=Callable[..., Any])


def fit_to_stdout() -> None:
    """Never truncate output that goes to a file or a pipe (called by each command group)."""
    if not console.is_terminal:
        console.width = PIPE_WIDTH


def _remember(ctx: click.Context, _: click.Parameter, value: str) -> str:
    ctx.meta[_FORMAT_META] = value
    return value


def output_option(command: F) -> F:
    """``-o/--output table|json|yaml`` (read by :func:`emit`)."""
    option = click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        expose_value=False,
        callback=_remember,
        is_eager=True,
        help="table for people; json or yaml for scripts (same fields, raw values).",
    )
    return option(command)


def current_format() -> str:
    ctx = click.get_current_context(silent=True)
    return str(ctx.meta.get(_FORMAT_META, "table")) if ctx is not None else "table"


def wants_table() -> bool:
    return current_format() == "table"


def emit(document: object, *renderables: RenderableType) -> None:
    """``document`` as JSON/YAML when ``-o`` asks for it, else the tables/lines given."""
    fmt = current_format()
    if fmt == "json":
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)
    else:
        for renderable in renderables:
            console.print(renderable)


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: the row key it shows, its header, alignment and formatting."""

    key: str
    header: str
    numeric: bool = False
    show: Callable[[Any], str] | None = None


def cell(value: object) -> str:
    """A value as table text: yes/no for booleans, '-' for None, words joined by spaces."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def table(title: str | None, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]]) -> Table:
    out = Table(title=title)
    for c in columns:
        out.add_column(c.header, justify="right" if c.numeric else "left")
    for row in rows:
        out.add_row(*(Text(c.show(row[c.key]) if c.show else cell(row[c.key])) for c in columns))
    return out


def items_table(title: str, items: Mapping[str, Any]) -> Table:
    """An item/value table (status pages)."""
    out = Table(title=title)
    out.add_column("item")
    out.add_column("value", justify="right")
    for name, value in items.items():
        out.add_row(Text(name), Text(cell(value)))
    return out


def time_text(ms: int) -> str:
    """Epoch ms as local ISO-8601 with milliseconds; '-' for a negative (unknown) time."""
    if ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")


def body_fields(body: bytes, shown_chars: int | None) -> dict[str, str]:
    """A message body for a row: text (cut to ``shown_chars`` in tables), base64 if binary."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}
    if shown_chars is not None and wants_table():
        text = text[:shown_chars]
    return {"body": text}


def body_text(row: Mapping[str, Any]) -> str:
    if "body" in row:
        return str(row["body"])
    return f"(binary, base64) {row['body_base64']}"
