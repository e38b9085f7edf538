"""TLS for the client port and for Raft peers: gRPC credentials from PEM files.

The client port (8081) serves TLS when the broker has ``--tls-cert`` and ``--tls-key``; with
``--tls-client-ca`` it also requires a client certificate signed by that CA (mutual TLS). A TLS
port refuses plaintext h2c: the official clients must set ``tls_enable=True`` (Python) or keep
SSL on (Java, its default). Unlike the RocketMQ proxy's "permissive" mode, one port does not
serve both.

For the Raft peer port (8091), :func:`server_credentials` with a cluster CA as
``client_ca_file`` and :func:`channel_credentials` with the same CA and the node's own
certificate give mutual TLS: a peer without a certificate from the cluster CA cannot connect,
in either direction. In Kubernetes the files come from a Secret (cert-manager's ``tls.crt``,
``tls.key``, ``ca.crt``).

Errors name the file and what is wrong with it. Called by :mod:`gannet.node.broker.serving`
and the replication layer.

Rotation (:class:`ReloadingServerCredentials`): the server ports use gRPC's dynamic
credentials, whose fetcher runs at each TLS handshake. At most every ``interval_s`` it compares
a fingerprint of the certificate, key and CA files (inode, mtime in ns, size; symlinks
followed, so a Secret mount's ``..data`` swap counts); on a change the new PEMs serve the next
handshakes (open connections keep theirs). Files that cannot be read or are not PEM keep the
old certificate and log one ERROR. Whether client certificates are required is fixed at start.
Outbound channel credentials are built when a channel is opened (peers: at each reconnect).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

PEM_BYTES_MAX = 1024 * 1024
RELOAD_INTERVAL_S = 2.0
_PEM_MARKER = b"-----BEGIN "


class TlsFileError(ValueError):
    """A certificate or key file is missing, unreadable, too large or not PEM."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where a node's certificate, key and (optional) CA for peer certificates are."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    """Require client certificates signed by this CA (mutual TLS); None: any client."""


def read_pem(path: Path, what: str) -> bytes:
    """The PEM bytes of ``path``; raises :class:`TlsFileError` naming ``what`` and the file."""
    try:
        size = path.stat().st_size
        if size > PEM_BYTES_MAX:
            raise TlsFileError(f"{what} {path} is {size} bytes; at most {PEM_BYTES_MAX}")
        data = path.read_bytes()
    except OSError as exc:
        raise TlsFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if _PEM_MARKER not in data:
        raise TlsFileError(f"{what} {path} is not PEM (no '-----BEGIN' line)")
    return data


def server_credentials(
    cert_file: Path, key_file: Path, client_ca_file: Path | None = None
) -> grpc.ServerCredentials:
    """Credentials for ``server.add_secure_port``; mutual TLS when ``client_ca_file`` is set."""
    cert = read_pem(cert_file, "certificate")
    key = read_pem(key_file, "private key")
    ca = read_pem(client_ca_file, "client CA") if client_ca_file is not None else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def server_credentials_for(files: TlsFiles) -> grpc.ServerCredentials:
    return server_credentials(files.cert_file, files.key_file, files.client_ca_file)


def channel_credentials(
    ca_file: Path | None, cert_file: Path | None = None, key_file: Path | None = None
) -> grpc.ChannelCredentials:
    """Credentials for ``grpc.aio.secure_channel``: trust ``ca_file`` (None: system roots) and
    present ``cert_file``/``key_file`` when given (both or neither)."""
    if (cert_file is None) != (key_file is None):
        raise TlsFileError("a client certificate needs both its certificate and its key file")
    ca = read_pem(ca_file, "CA certificate") if ca_file is not None else None
    cert = read_pem(cert_file, "certificate") if cert_file is not None else None
    key = read_pem(key_file, "private key") if key_file is not None else None
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )


def fingerprint(paths: tuple[Path, ...]) -> tuple[tuple[int, int, int], ...]:
    """``(inode, mtime ns, size)`` of each file (symlinks followed); zeros for a missing one."""
    found = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            found.append((0, 0, 0))
            continue
        found.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(found)


class ReloadingServerCredentials:
    """Server credentials that pick up rotated certificate, key and CA files (module docstring).

    Invariant: the configuration served is always one whose three files were all read as PEM.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        client_ca_file: Path | None = None,
        *,
        interval_s: float = RELOAD_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._paths = (cert_file, key_file) + ((client_ca_file,) if client_ca_file else ())
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()  # the fetcher runs on gRPC's handshake threads
        self._fingerprint = fingerprint(self._paths)
        self._checked_at_s = clock()
        self.reloads_total = 0
        self.failures_total = 0
        self.credentials = grpc.dynamic_ssl_server_credentials(
            self._configuration(),
            self.fetch,
            require_client_authentication=client_ca_file is not None,
        )

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        cert = read_pem(self._paths[0], "certificate")
        key = read_pem(self._paths[1], "private key")
        ca = read_pem(self._paths[2], "client CA") if len(self._paths) > 2 else None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration when the files changed, None to keep the old."""
        with self._lock:
            now_s = self._clock()
            if now_s - self._checked_at_s < self.interval_s:
                return None
            self._checked_at_s = now_s
            seen = fingerprint(self._paths)
            if seen == self._fingerprint:
                return None
            self._fingerprint = seen
            try:
                configuration = self._configuration()
            except TlsFileError as exc:
                self.failures_total += 1
                log.error("TLS files changed but cannot be used: %s; keeping the old ones", exc)
                return None
            self.reloads_total += 1
            log.warning("TLS certificate %s reloaded", self._paths[0])
            return configuration
