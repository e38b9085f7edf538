"""A minimal blocking remoting client for the tests: frames over a real socket."""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import struct
from typing import Any

from gannet.node.remoting import codec
from gannet.node.remoting.codec import Command

TIMEOUT_S = 30.0
_opaques = itertools.count(1)


class RawClient:
    def __init__(
        self, endpoint: str, timeout_s: float = TIMEOUT_S, tls: ssl.SSLContext | None = None
    ) -> None:
        """``tls``: speak TLS with this client context."""
        host, _, port = endpoint.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, command: Command) -> int:
        if not command.opaque:
            command.opaque = next(_opaques)
        self.write(codec.encode(command))
        return command.opaque

    def read(self) -> Command:
        """The next frame (responses and broker-initiated requests alike)."""
        length = codec.frame_length(self._exactly(4))
        return codec.decode_frame(self._exactly(length))

    def response(self, opaque: int) -> Command:
        """The response to ``opaque``, skipping other frames."""
        while True:
            got = self.read()
            if got.is_response and got.opaque == opaque:
                return got

    def call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        serialize_type: int = codec.SERIALIZE_JSON,
    ) -> Command:
        request = Command(code, ext=dict(ext or {}), body=body, serialize_type=serialize_type)
        return self.response(self.send(request))

    def closed_by_peer(self) -> bool:
        """True once the broker has closed the connection (reads EOF or a reset)."""
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionError:
            return True

    def _exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            got = self.sock.recv(n - len(chunks))
            if not got:
                raise ConnectionError("closed by the broker")
            chunks += got
        return bytes(chunks)


def json_body(command: Command) -> Any:
    return json.loads(command.body)


def raw_frame(length: int, mark: int, rest: bytes = b"") -> bytes:
    return struct.pack(">iI", length, mark) + rest
