"""Typed views of the three custom resources' ``spec`` (pure; no IO).

Handlers call :func:`topic_spec`, :func:`group_spec` and :func:`cluster_spec` on the raw spec
that Kubernetes stored. The API server already validated it against the CRD schema and filled in
defaults; the same defaults and limits are applied here so that a spec that reached the operator
some other way (an older CRD, a test) still gets a clear :class:`SpecError` naming the field.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any

from croniter import croniter


class SpecError(ValueError):
    """A spec field has a value the operator cannot use; the message names the field."""


class Permission(enum.Enum):
    """Topic permission, with RocketMQ's perm bits (READ=4, WRITE=2)."""

    ReadWrite = 6
    ReadOnly = 4
    WriteOnly = 2
    Deny = 0

    @classmethod
    def of_perm(cls, perm: int) -> Permission:
        return cls(perm & 6)


MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
RETRY_POLICIES = ("EXPONENTIAL", "CUSTOMIZED")
QUEUES_MAX = 1024
REPLICAS_MAX = 9


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSpec:
    cluster: str
    topic_name: str
    queues: int
    permission: Permission
    message_type: str


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSpec:
    cluster: str
    group_name: str
    fifo: bool
    max_delivery_attempts: int
    retry_policy: str | None
    consume_enabled: bool

    @property
    def retry_max_times(self) -> int:
        """RocketMQ 5 counts the first delivery: attempts = retry_max_times + 1."""
        return self.max_delivery_attempts - 1


@dataclasses.dataclass(frozen=True, slots=True)
class CleanupSpec:
    schedule: str | None
    file_reserved_hours: float
    disk_max_used_ratio_percent: int
    disk_warning_ratio: float
    disk_clean_forcibly_ratio: float


@dataclasses.dataclass(frozen=True, slots=True)
class StorageSpec:
    type: str
    size: str
    storage_class: str | None
    delete_claim: bool


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceMonitorSpec:
    enabled: bool
    interval: str
    labels: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class IssuerRef:
    """A cert-manager issuer: ``name``, ``kind`` (Issuer or ClusterIssuer) and API ``group``."""

    name: str
    kind: str
    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class TlsSpec:
    """TLS of one port: off, certificates from an existing Secret (``tls.crt``, ``tls.key``,
    ``ca.crt``), or a Secret that cert-manager fills from ``issuer``."""

    enabled: bool
    secret_name: str | None
    issuer: IssuerRef | None


@dataclasses.dataclass(frozen=True, slots=True)
class AuthSpec:
    """Signed requests: ``credentials_secret`` holds the brokers' credentials file (or one file
    per key, the directory form); ``operator_credentials_secret`` the operator's own admin key
    (``accessKey``/``secretKey``), None: the operator's default key."""

    enabled: bool
    credentials_secret: str | None
    operator_credentials_secret: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SecuritySpec:
    auth: AuthSpec
    tls: TlsSpec
    peer_tls: TlsSpec


NO_TLS = TlsSpec(enabled=False, secret_name=None, issuer=None)
NO_SECURITY = SecuritySpec(AuthSpec(False, None, None), NO_TLS, NO_TLS)
ISSUER_KINDS = ("Issuer", "ClusterIssuer")
# A Kubernetes object name (DNS-1123 subdomain), as the CRD schema's pattern.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterSpec:
    replicas: int
    image: str
    image_pull_policy: str
    flush_mode: str
    commitlog_file_size_mb: int
    auto_create_topics: bool
    auto_create_groups: bool
    storage: StorageSpec
    resources: Mapping[str, Mapping[str, str]]
    revive_queue_count: int
    cleanup: CleanupSpec
    metrics_enabled: bool
    service_monitor: ServiceMonitorSpec
    security: SecuritySpec = NO_SECURITY


def _get(spec: Mapping[str, Any], path: str, kind: type, default: Any) -> Any:
    value = spec.get(path.rpartition(".")[2], default)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SpecError(f"spec.{path} is {value!r}; expected {kind.__name__}")
    return value


def _in_range(path: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise SpecError(f"spec.{path} is {value}; use {low} to {high}")


def _one_of(path: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SpecError(f"spec.{path} is {value!r}; use one of {', '.join(allowed)}")
    return value


def _section(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = spec.get(name) or {}
    if not isinstance(value, Mapping):
        raise SpecError(f"spec.{name} is {value!r}; expected an object")
    return value


def _cluster_ref(spec: Mapping[str, Any]) -> str:
    cluster = _get(spec, "cluster", str, "")
    if not cluster:
        raise SpecError("spec.cluster is missing; name the GannetCluster")
    return str(cluster)


def topic_spec(name: str, spec: Mapping[str, Any]) -> TopicSpec:
    """The Topic resource ``name``'s spec; the topic name defaults to the resource name."""
    queues = _get(spec, "queues", int, 8)
    _in_range("queues", queues, 1, QUEUES_MAX)
    permission_name = _one_of(
        "permission",
        _get(spec, "permission", str, "ReadWrite"),
        tuple(p.name for p in Permission),
    )
    return TopicSpec(
        cluster=_cluster_ref(spec),
        topic_name=_get(spec, "topicName", str, "") or name,
        queues=queues,
        permission=Permission[permission_name],
        message_type=_one_of(
            "messageType", _get(spec, "messageType", str, "NORMAL"), MESSAGE_TYPES
        ),
    )


def group_spec(name: str, spec: Mapping[str, Any]) -> GroupSpec:
    """The ConsumerGroup resource ``name``'s spec; the group name defaults to the resource name."""
    attempts = _get(spec, "maxDeliveryAttempts", int, 17)
    _in_range("maxDeliveryAttempts", attempts, 1, 1000)
    policy = spec.get("retryPolicy")
    return GroupSpec(
        cluster=_cluster_ref(spec),
        group_name=_get(spec, "groupName", str, "") or name,
        fifo=_get(spec, "fifo", bool, False),
        max_delivery_attempts=attempts,
        retry_policy=None if policy is None else _one_of("retryPolicy", policy, RETRY_POLICIES),
        consume_enabled=_get(spec, "consumeEnabled", bool, True),
    )


def _cleanup(spec: Mapping[str, Any]) -> CleanupSpec:
    section = _section(spec, "cleanup")
    schedule = section.get("schedule")
    if schedule is not None and (
        not isinstance(schedule, str)
        or len(schedule.split()) != 5
        or not croniter.is_valid(schedule)
    ):
        raise SpecError(
            f"spec.cleanup.schedule is {schedule!r}; use a 5-field cron expression like '0 4 * * *'"
        )
    hours = _get(section, "cleanup.fileReservedHours", float, 72.0)
    _in_range("cleanup.fileReservedHours", hours, 0, 87600)
    if hours == 0:
        raise SpecError("spec.cleanup.fileReservedHours is 0; use a positive number of hours")
    percent = _get(section, "cleanup.diskMaxUsedRatioPercent", int, 75)
    _in_range("cleanup.diskMaxUsedRatioPercent", percent, 10, 95)
    warning = _get(section, "cleanup.diskWarningRatio", float, 0.9)
    _in_range("cleanup.diskWarningRatio", warning, 0.1, 1)
    forcibly = _get(section, "cleanup.diskCleanForciblyRatio", float, 0.85)
    _in_range("cleanup.diskCleanForciblyRatio", forcibly, 0.1, 1)
    return CleanupSpec(schedule, hours, percent, warning, forcibly)


def _storage(spec: Mapping[str, Any]) -> StorageSpec:
    section = _section(spec, "storage")
    kind = _one_of(
        "storage.type",
        _get(section, "storage.type", str, "persistent-claim"),
        ("ephemeral", "persistent-claim"),
    )
    return StorageSpec(
        type=kind,
        size=_get(section, "storage.size", str, "10Gi"),
        storage_class=_get(section, "storage.class", str, "") or None,
        delete_claim=_get(section, "storage.deleteClaim", bool, False),
    )


def _resources(spec: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    section = _section(spec, "resources")
    result: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        values = _section(section, part) if part in section else {}
        for key, value in values.items():
            if key not in ("cpu", "memory"):
                raise SpecError(f"spec.resources.{part}.{key} is unknown; use cpu or memory")
            result.setdefault(part, {})[key] = str(value)
    return result


def _secret_name(section: Mapping[str, Any], path: str) -> str | None:
    name = _get(section, path, str, "") or None
    if name is not None and not _NAME.match(name):
        raise SpecError(f"spec.{path} is {name!r}; use a Secret name (lowercase, digits, '-', '.')")
    return name


def _tls(security: Mapping[str, Any], key: str) -> TlsSpec:
    section = _section(security, key)
    path = f"security.{key}"
    enabled = _get(section, f"{path}.enabled", bool, False)
    secret = _secret_name(section, f"{path}.secretName")
    manager = _section(section, "certManager")
    issuer: IssuerRef | None = None
    if manager:
        ref = _section(manager, "issuerRef")
        ref_path = f"{path}.certManager.issuerRef"
        name = _get(ref, f"{ref_path}.name", str, "")
        if not name:
            raise SpecError(f"spec.{ref_path}.name is missing; name the cert-manager issuer")
        kind = _one_of(
            f"{ref_path}.kind", _get(ref, f"{ref_path}.kind", str, "Issuer"), ISSUER_KINDS
        )
        group = _get(ref, f"{ref_path}.group", str, "cert-manager.io")
        issuer = IssuerRef(name=name, kind=kind, group=group)
    if not enabled:
        return NO_TLS
    if (secret is None) == (issuer is None):
        raise SpecError(
            f"spec.{path} is enabled; give exactly one of secretName and certManager.issuerRef"
        )
    return TlsSpec(enabled=True, secret_name=secret, issuer=issuer)


def _security(spec: Mapping[str, Any]) -> SecuritySpec:
    security = _section(spec, "security")
    auth = _section(security, "auth")
    enabled = _get(auth, "security.auth.enabled", bool, False)
    credentials = _secret_name(auth, "security.auth.credentialsSecret")
    if enabled and credentials is None:
        raise SpecError(
            "spec.security.auth.credentialsSecret is missing; name the Secret holding the "
            "brokers' credentials file (auth is enabled)"
        )
    return SecuritySpec(
        auth=AuthSpec(
            enabled=enabled,
            credentials_secret=credentials if enabled else None,
            operator_credentials_secret=(
                _secret_name(auth, "security.auth.operatorCredentialsSecret") if enabled else None
            ),
        ),
        tls=_tls(security, "tls"),
        peer_tls=_tls(security, "peerTls"),
    )


def cluster_spec(spec: Mapping[str, Any]) -> ClusterSpec:
    """A GannetCluster's spec with defaults filled in."""
    replicas = _get(spec, "replicas", int, 3)
    _in_range("replicas", replicas, 1, REPLICAS_MAX)
    size_mb = _get(spec, "commitLogFileSizeMb", int, 1024)
    _in_range("commitLogFileSizeMb", size_mb, 1, 4096)
    revive = _get(_section(spec, "pop"), "pop.reviveQueueCount", int, 8)
    _in_range("pop.reviveQueueCount", revive, 1, 64)
    metrics = _section(spec, "metrics")
    monitor = _section(metrics, "serviceMonitor")
    labels = monitor.get("labels") or {}
    image = _get(spec, "image", str, "ghcr.io/gannet/gannet:0.1.0")
    if not image:
        raise SpecError("spec.image is empty; name a container image")
    return ClusterSpec(
        replicas=replicas,
        image=image,
        image_pull_policy=_one_of(
            "imagePullPolicy",
            _get(spec, "imagePullPolicy", str, "IfNotPresent"),
            ("Always", "IfNotPresent", "Never"),
        ),
        flush_mode=_one_of("flushMode", _get(spec, "flushMode", str, "async"), ("async", "sync")),
        commitlog_file_size_mb=size_mb,
        auto_create_topics=_get(spec, "autoCreateTopics", bool, False),
        auto_create_groups=_get(spec, "autoCreateGroups", bool, False),
        storage=_storage(spec),
        resources=_resources(spec),
        revive_queue_count=revive,
        cleanup=_cleanup(spec),
        metrics_enabled=_get(metrics, "metrics.enabled", bool, True),
        service_monitor=ServiceMonitorSpec(
            enabled=_get(monitor, "metrics.serviceMonitor.enabled", bool, False),
            interval=_get(monitor, "metrics.serviceMonitor.interval", str, "30s"),
            labels={str(k): str(v) for k, v in dict(labels).items()},
        ),
        security=_security(spec),
    )
