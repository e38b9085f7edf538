"""The servicer context a remoting request passes to the v2 gRPC servicer's methods."""

from __future__ import annotations

import time
from typing import NoReturn

import grpc

from gannet.node.remoting.server import Connection

REQUEST_TIMEOUT_S = 30.0  # a remoting request carries no deadline; the Java client's default


class Aborted(Exception):
    """The servicer refused the request with ``context.abort`` (the admin API does)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class RemotingContext:
    """What the servicers read of a gRPC context: metadata, peer, deadline, abort."""

    def __init__(
        self,
        conn: Connection,
        metadata: tuple[tuple[str, str], ...] = (),
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self._conn = conn
        self._metadata = (("x-mq-language", "JAVA"), *metadata)
        self._deadline = time.monotonic() + timeout_s

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._conn.peer

    def time_remaining(self) -> float | None:
        return max(0.0, self._deadline - time.monotonic())

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: object) -> NoReturn:
        raise Aborted(code, details)

    def set_code(self, code: object) -> None:
        pass

    def set_details(self, details: str) -> None:
        pass
