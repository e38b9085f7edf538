"""TLS on the remoting and name-server ports: the broker's client-port certificate, reloaded as
the client port's is (:mod:`gannet.node.protocol.tls`).

With ``--tls-cert``/``--tls-key`` the remoting ports speak TLS only, with the same certificate
as the gRPC client port, and with ``--tls-client-ca`` they require a client certificate from
that CA. The 4.x client turns TLS on with ``-Dtls.enable=true`` (or ``setUseTLS(true)``) and
trusts the broker's CA through ``TlsSystemConfig``'s ``tls.test.mode.enable=false`` and
``tls.client.trustCertPath``. Rotation: at most every ``interval_s`` a handshake compares the
files' fingerprint and, on a change, serves the new certificate from then on (open connections
keep theirs); files that cannot be loaded keep the old certificate and log one ERROR.
"""

from __future__ import annotations

import logging
import ssl
import time
from pathlib import Path

from gannet.node.protocol import tls

log = logging.getLogger(__name__)


def _context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    tls.read_pem(cert, "remoting TLS certificate")  # named errors for missing or non-PEM files
    tls.read_pem(key, "remoting TLS key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.load_verify_locations(cafile=str(client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
    except ssl.SSLError as exc:
        raise tls.TlsFileError(
            f"the TLS certificate {cert} and key {key} cannot be used: {exc}"
        ) from exc
    return context


class ReloadingContext:
    """The server context of the remoting ports; swaps in a new one when the files change."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        client_ca: Path | None = None,
        *,
        interval_s: float = tls.RELOAD_INTERVAL_S,
    ) -> None:
        self._files: tuple[Path, Path, Path | None] = (cert, key, client_ca)
        self._paths = tuple(p for p in (cert, key, client_ca) if p is not None)
        self.interval_s = interval_s
        self._current = _context(cert, key, client_ca)
        self._seen = tls.fingerprint(self._paths)
        self._checked_s = time.monotonic()
        self.context = _context(cert, key, client_ca)
        """What the listeners are given: its SNI callback hands each handshake the current
        context."""
        self.context.sni_callback = self._handshake
        self.reloads_total = 0

    def _handshake(self, sock: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
        now = time.monotonic()
        if now - self._checked_s >= self.interval_s:
            self._checked_s = now
            self._reload()
        sock.context = self._current

    def _reload(self) -> None:
        seen = tls.fingerprint(self._paths)
        if seen == self._seen:
            return
        self._seen = seen
        cert, key, client_ca = self._files
        try:
            self._current = _context(cert, key, client_ca)
        except (tls.TlsFileError, OSError) as exc:
            log.error("remoting TLS: keeping the old certificate: %s", exc)
            return
        self.reloads_total += 1
        log.info("remoting TLS: certificate reloaded from %s", cert)
