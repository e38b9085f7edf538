"""Who may call the broker: the wiring of signatures, rights and credentials into the server,
and request signing for Gannet's own clients.

The parts live in focused modules; this one joins them and keeps the names other modules
import (``auth.Authenticator``, ``auth.load``, ``auth.Denied``, …):

* :mod:`gannet.node.protocol.signing` — the pure ``MQv2-HMAC-SHA1`` check and the replay guard;
* :mod:`gannet.node.protocol.grants` — actions, name patterns, accounts, what each RPC needs;
* :mod:`gannet.node.protocol.credentials` — credentials files and Secret directories.

:class:`Authenticator` verifies a call's signature against the accounts and each request's
rights, counting refusals by reason (plain ints for the metrics registry, exported by
:class:`DenialsCollector` as ``gannet_auth_denials_total{reason}``). :mod:`gannet.node.api.wire`
calls :class:`WireGate` for every request when the broker runs with ``--auth-file``.
:class:`SigningInterceptor` signs every call of a synchronous channel as the official clients
do, and :func:`client_channel` opens the channel of Gannet's own clients (the admin CLI's
``commands.channel``) with the :class:`ClientSecurity` it is given: TLS and signing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from gannet.node.protocol import credentials, signing, statuses, tls
from gannet.node.protocol.credentials import (
    ACCOUNTS_MAX,
    PATTERNS_MAX,
    CredentialsError,
    load,
    parse_accounts,
)
from gannet.node.protocol.grants import Account, Action, Grant, Kind, Need, missing, needs
from gannet.node.protocol.signing import (
    AUTHORIZATION_BYTES_MAX,
    AUTHORIZATION_HEADER,
    DATE_TIME_FORMAT,
    DATE_TIME_HEADER,
    DENIAL_REASONS,
    REPLAY_ENTRIES_MAX,
    REQUEST_ID_HEADER,
    SCHEME,
    SKEW_S_DEFAULT,
    UNAUTHORIZED,
    Authorization,
    Denied,
    ReplayGuard,
    parse_authorization,
    sign,
    signed_metadata,
)

__all__ = [
    "ACCOUNTS_MAX",
    "AUTHORIZATION_BYTES_MAX",
    "AUTHORIZATION_HEADER",
    "DATE_TIME_FORMAT",
    "DATE_TIME_HEADER",
    "PATTERNS_MAX",
    "REPLAY_ENTRIES_MAX",
    "REQUEST_ID_HEADER",
    "SCHEME",
    "SKEW_S_DEFAULT",
    "UNAUTHORIZED",
    "Account",
    "Action",
    "Authenticator",
    "Authorization",
    "ClientSecurity",
    "CredentialsError",
    "DenialsCollector",
    "Denied",
    "Grant",
    "Kind",
    "Need",
    "ReplayGuard",
    "SigningInterceptor",
    "WireGate",
    "client_channel",
    "load",
    "needs",
    "parse_accounts",
    "parse_authorization",
    "sign",
    "signed_metadata",
]


class Authenticator:
    """Verifies signatures and rights against ``accounts``; counts refusals by reason."""

    def __init__(
        self,
        accounts: Mapping[str, Account],
        *,
        skew_s: float = SKEW_S_DEFAULT,
        replay_entries_max: int = REPLAY_ENTRIES_MAX,
        clock: Callable[[], float] = time.time,
        reloader: credentials.Reloader | None = None,
    ) -> None:
        """``reloader``: polled before each call; its accounts replace ``accounts`` when the
        credentials files change (:class:`gannet.node.protocol.credentials.Reloader`)."""
        self.accounts = dict(accounts)
        self.reloader = reloader
        self.skew_s = skew_s
        self._clock = clock
        self._replays = ReplayGuard(2 * skew_s, replay_entries_max)
        self.denials_total: dict[str, int] = dict.fromkeys((*DENIAL_REASONS, "forbidden"), 0)
        """Refusals by reason (``bad_signature``, ``forbidden``, …) since start; every known
        reason is there at 0 from the start, so ``increase()`` sees the first denial."""

    def current_accounts(self) -> Mapping[str, Account]:
        """The accounts now: reloaded first when the credentials files changed."""
        if self.reloader is not None and self.reloader.poll():
            self.accounts = self.reloader.accounts
        return self.accounts

    def authenticate(self, metadata: Iterable[tuple[str, str]]) -> Account:
        """The caller's account; raises :class:`Denied` (``UNAUTHORIZED``)."""
        accounts = self.current_accounts()  # one snapshot for the whole check

        def secret_of(access_key: str) -> str | None:
            account = accounts.get(access_key)
            return account.secret_key if account is not None else None

        try:
            access_key = signing.check(
                dict(metadata),
                secret_of,
                now_s=self._clock(),
                skew_s=self.skew_s,
                replays=self._replays,
            )
        except Denied as denied:
            self._count(denied.reason)
            raise
        return accounts[access_key]

    def authorize(self, account: Account, required: Sequence[Need]) -> None:
        """Raises :class:`Denied` (``FORBIDDEN``) naming the first right ``account`` lacks."""
        need = missing(account, required)
        if need is not None:
            self._count("forbidden")
            raise Denied(
                statuses.FORBIDDEN,
                "forbidden",
                f"access key {account.access_key!r} may not {need.text()}",
            )

    def _count(self, reason: str) -> None:
        self.denials_total[reason] = self.denials_total.get(reason, 0) + 1


class WireGate:
    """What :mod:`gannet.node.api.wire` calls: authenticate once per call, authorize each
    request (each Telemetry command on a stream). ``service`` is "v2" or "admin"."""

    def __init__(self, authenticator: Authenticator, service: str) -> None:
        self.authenticator = authenticator
        self.service = service

    def authenticate(self, metadata: Iterable[tuple[str, str]]) -> Account:
        return self.authenticator.authenticate(metadata)

    def authorize(self, account: object, method: str, request: object) -> None:
        if not isinstance(account, Account):
            raise TypeError(f"wire passed back {type(account).__name__}, not an Account")
        self.authenticator.authorize(account, needs(self.service, method, request))


class DenialsCollector:
    """``gannet_auth_denials_total{reason}``: refusals of an :class:`Authenticator` by reason,
    and ``gannet_auth_credentials_reloads_total{result}`` when it reloads its credentials;
    read at scrape time; the broker registers it on its metrics registry when auth is on."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "gannet_auth_denials",
            "Requests refused by authentication or authorization, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self._authenticator.denials_total.items()):
            family.add_metric([reason], count)
        reloader = self._authenticator.reloader
        if reloader is None:
            return [family]
        reloads = CounterMetricFamily(
            "gannet_auth_credentials_reloads",
            "Changes of the credentials files seen, by result (ok: applied; failed: the old "
            "credentials were kept).",
            labels=["result"],
        )
        reloads.add_metric(["ok"], reloader.reloads_total)
        reloads.add_metric(["failed"], reloader.failures_total)
        return [family, reloads]


class SigningInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Signs every call of a synchronous gRPC channel as the official clients do (fresh
    ``x-mq-date-time``, signature and ``x-mq-request-id`` per call), for Gannet's own admin
    clients: ``grpc.intercept_channel(channel, SigningInterceptor(ak, sk))``."""

    def __init__(
        self, access_key: str, secret_key: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.access_key = access_key
        self._secret_key = secret_key
        self._clock = clock

    def metadata(self) -> list[tuple[str, str]]:
        return [
            *signed_metadata(self.access_key, self._secret_key, self._clock()),
            (REQUEST_ID_HEADER, str(uuid.uuid4())),
        ]

    def _signed(self, details: Any) -> Any:
        return details._replace(metadata=[*(details.metadata or ()), *self.metadata()])

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._signed(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._signed(details), request)


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How one of Gannet's own clients reaches a broker: signing key, TLS trust, client cert.

    ``tls_ca`` (trust this PEM CA instead of the system roots) and ``tls_cert``/``tls_key``
    (present a client certificate to a broker with ``--tls-client-ca``) imply ``tls``.
    """

    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError(
                "give both --access-key and --secret-key (or GANNET_ACCESS_KEY and "
                "GANNET_SECRET_KEY), or neither"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("a client certificate needs both --tls-cert and --tls-key")

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.tls_ca is not None or self.tls_cert is not None


def client_channel(
    endpoint: str, security: ClientSecurity, options: Sequence[tuple[str, Any]] = ()
) -> tuple[grpc.Channel, grpc.Channel]:
    """``(channel to use, channel to close)``: TLS when ``security`` asks for it, every call
    signed when it has an access key. Raises :class:`tls.TlsFileError` for unusable PEM files."""
    if security.uses_tls:
        credentials = tls.channel_credentials(security.tls_ca, security.tls_cert, security.tls_key)
        raw = grpc.secure_channel(endpoint, credentials, options=list(options))
    else:
        raw = grpc.insecure_channel(endpoint, options=list(options))
    if security.access_key and security.secret_key:
        signer = SigningInterceptor(security.access_key, security.secret_key)
        return grpc.intercept_channel(raw, signer), raw
    return raw, raw
