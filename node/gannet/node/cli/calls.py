"""Calls of the ``gannet`` command to a running broker: the channel and admin RPC failures.

:func:`channel` opens a gRPC channel to ``--endpoint`` with the running command's security
options (:func:`gannet.node.cli.options.client_security`: signing and TLS, through
:func:`gannet.node.protocol.auth.client_channel`); :func:`admin_call` runs one
``gannet.admin.v1`` RPC and :func:`rpc_failed` turns a failure into one line and the exit code
(:mod:`gannet.node.cli.exits`): 1 not found, 2 an unusable ``--tls-*`` file, 4 unreachable
(or the broker's group has no leader in time: its message says so), 5 refused (also unsigned
or not allowed: the message says which option to pass). Any member of a Raft group takes
admin writes (a follower forwards them to the leader): ``--endpoint`` may name any of them.

Used by the broker client commands (``topic``, ``group``, ``pop``, ``message``, ``status``,
``cluster``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn, TypeVar

import grpc
from rich.markup import escape

from gannet.node.cli.exits import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    fail,
)
from gannet.node.cli.options import client_security
from gannet.node.protocol.gen import admin_pb2_grpc

T = TypeVar("T")

CALL_TIMEOUT_S = 10.0
MESSAGE_BYTES_MAX = 130 * 1024 * 1024
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_TRANSPORT_DETAILS = (
    "failed to connect",
    "DNS resolution failed",
    "Deadline Exceeded",
    "Socket closed",
    "Connection reset",
    "Broken pipe",
)
"""Texts of gRPC's own UNAVAILABLE / DEADLINE_EXCEEDED: the broker was not reached (or did
not answer); any other text is the broker's own answer (no Raft leader in time, say)."""


@contextmanager
def channel(endpoint: str) -> Iterator[grpc.Channel]:
    options = [
        ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
        ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ]
    from gannet.node.protocol import auth, tls  # noqa: PLC0415 - only a call loads the signing

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
    details = escape(exc.details() or "")
    if code in _UNREACHABLE and details and not any(t in details for t in _TRANSPORT_DETAILS):
        # The broker answered: e.g. its Raft group has no leader, or a write it forwarded to the
        # leader was not answered in time (it may or may not have taken effect).
        fail(f"[red]unavailable[/] ({code.name}) at {endpoint}: {details}", EXIT_UNREACHABLE)
    if code in _UNREACHABLE:
        fail(
            f"[red]cannot reach a broker at {endpoint}[/] ({code.name}); start one with "
            "`gannet broker run` or pass --endpoint; a broker serving TLS needs --tls (and "
            "--tls-ca for a private CA), a plaintext one no --tls",
            EXIT_UNREACHABLE,
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        fail(
            f"[red]not authenticated[/]: {details}; the broker requires signed requests: "
            "pass --access-key and --secret-key (or set GANNET_ACCESS_KEY and GANNET_SECRET_KEY)"
            " of a key in its --auth-file",
            EXIT_REFUSED,
        )
    if code == grpc.StatusCode.PERMISSION_DENIED:
        fail(
            f"[red]not allowed[/]: {details}; use an access key with the admin right on "
            "it (docs/security.md)",
            EXIT_REFUSED,
        )
    if code == grpc.StatusCode.NOT_FOUND:
        fail(f"[red]not found[/]: {details}", EXIT_NOT_FOUND)
    fail(f"[red]refused[/] ({code.name}): {details}", EXIT_REFUSED)
