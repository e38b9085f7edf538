"""Option blocks of the ``gannet`` command, defined once: endpoint, client security (signing
and TLS), store directory, PEM files, message ids and times.

:func:`endpoint_option` gives a broker command ``--endpoint`` (default ``127.0.0.1:8081``, env
``GANNET_ENDPOINT``; host:port, checked before any call) and :func:`security_options`:
``--access-key``/``--secret-key`` (env ``GANNET_ACCESS_KEY``/``GANNET_SECRET_KEY``) sign every
call for a broker with ``--auth-file``; ``--tls``/``--tls-ca`` (and ``--tls-cert``/``--tls-key``
for mutual TLS) reach a TLS-only broker. The security options are kept in the click context and
read by :func:`client_security` when :mod:`gannet.node.cli.calls` opens a channel.

Used by every command module of :mod:`gannet.node.cli`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from gannet.node.protocol import auth

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_ENDPOINT = "127.0.0.1:8081"
PEM_FILE = click.Path(path_type=Path, exists=True, dir_okay=False)
"""The type of every ``--*-tls-*`` and ``--*-ca`` option: an existing PEM file."""

data_dir_argument = click.argument(
    "data_dir", type=click.Path(path_type=Path, file_okay=False), metavar="DIR"
)


PORT_MAX = 65535


def check_endpoint(text: str, *, port_min: int = 1) -> str:
    """``text`` when it is ``host:port`` (``[v6]:port`` for IPv6); ValueError naming the
    problem otherwise (an empty value, a URL scheme or path, a port that is no number in
    ``port_min``-65535; a listen address may take port 0, any free port)."""
    example = f"e.g. {DEFAULT_ENDPOINT}"
    if not text.strip():
        raise ValueError(f"the endpoint is empty; give host:port, {example}")
    if "/" in text:
        raise ValueError(
            f"{text!r} is a URL; give host:port only, without scheme or path, {example}"
        )
    host, sep, port = text.rpartition(":")
    if not sep or not host or any(ch.isspace() for ch in text):
        raise ValueError(f"{text!r} is not host:port, {example}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:8081")
    if not port.isdigit() or not port_min <= int(port) <= PORT_MAX:
        raise ValueError(
            f"{text!r}: the port {port!r} is not a number from {port_min} to {PORT_MAX}"
        )
    return text


Callback = Callable[[click.Context, click.Parameter, str | None], str | None]


def checked_by(check: Callable[[str], str]) -> Callback:
    """A click callback that passes a given value through ``check`` (None stays None) and
    turns its ValueError into a usage error naming the option."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return callback


endpoint_callback = checked_by(check_endpoint)


_endpoint = click.option(
    "--endpoint",
    default=DEFAULT_ENDPOINT,
    show_default=True,
    envvar="GANNET_ENDPOINT",
    callback=endpoint_callback,
    help="Broker host:port (env GANNET_ENDPOINT).",
)
_SECURITY_META = "gannet.client_security"


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> object:
    """Keep a security option for :func:`channel` (the commands do not take it as argument)."""
    ctx.meta.setdefault(_SECURITY_META, {})[param.name] = value
    return value


def _security_option(
    name: str, envvar: str, help_text: str, **kind: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A security option: read from ``envvar`` too, kept for :func:`client_security` (not
    passed to the command)."""
    return click.option(
        name, envvar=envvar, expose_value=False, callback=_remember, help=help_text, **kind
    )


_security_options = (
    _security_option(
        "--access-key",
        "GANNET_ACCESS_KEY",
        "Sign requests with this access key (env GANNET_ACCESS_KEY); a broker with "
        "--auth-file requires it.",
    ),
    _security_option(
        "--secret-key",
        "GANNET_SECRET_KEY",
        "Secret of --access-key (env GANNET_SECRET_KEY; prefer the env variable).",
    ),
    _security_option(
        "--tls",
        "GANNET_TLS",
        "Connect with TLS, trusting the system roots (env GANNET_TLS=1).",
        is_flag=True,
    ),
    _security_option(
        "--tls-ca", "GANNET_TLS_CA", "TLS, trusting this PEM CA (env GANNET_TLS_CA).", type=PEM_FILE
    ),
    _security_option(
        "--tls-cert",
        "GANNET_TLS_CERT",
        "TLS client certificate (PEM) for a broker with --tls-client-ca (env GANNET_TLS_CERT).",
        type=PEM_FILE,
    ),
    _security_option(
        "--tls-key",
        "GANNET_TLS_KEY",
        "Private key of --tls-cert (env GANNET_TLS_KEY).",
        type=PEM_FILE,
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
    # Signing loads the RocketMQ client package: only a command that calls a broker needs it.
    from gannet.node.protocol import auth  # noqa: PLC0415

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


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
MESSAGE_ID_LENGTHS = (32, 34, 56)


def check_message_id(text: str) -> str:
    """``text`` when it can be a message id: the id clients and every ``gannet`` table show
    (34 hex digits; 32 from RocketMQ 4 clients) or an offset message id (32 or 56 hex digits);
    ValueError naming the problem otherwise."""
    if not text or any(ch not in _HEX_DIGITS for ch in text) or len(text) not in MESSAGE_ID_LENGTHS:
        raise ValueError(
            f"{text!r} is not a message id: give the id a client or a gannet table shows (34 hex "
            "digits, e.g. 0102FC0000000136EC0B1878D100000000) or an offset message id (32 or 56 "
            "hex digits)"
        )
    return text.upper()


message_id_callback = checked_by(check_message_id)


def parse_time_ms(text: str, param_hint: str | None = None) -> int:
    """Epoch milliseconds from digits or an ISO-8601 time (local time when naive)."""
    if text.isdigit():
        return int(text)
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        raise click.BadParameter(
            f"{text!r} is neither epoch ms nor ISO-8601", param_hint=param_hint
        ) from None


def positive_seconds(_: click.Context, param: click.Parameter, value: float) -> float:
    """Callback of a ``--*-s`` option that must be above 0."""
    if value <= 0:
        raise click.BadParameter(f"{value} is not a positive number of seconds", param=param)
    return value


def seconds_option(
    name: str, *, default: float, help_text: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``--*-s`` option of a positive number of seconds (default shown)."""
    return click.option(
        name,
        type=float,
        default=default,
        show_default=True,
        callback=positive_seconds,
        help=help_text,
    )
