"""What every handler gets: the broker and Kubernetes clients, metrics, endpoints and the clock.

Built once by :mod:`gannet.operator.running` (or by a test) and closed over by the handlers of
:mod:`gannet.operator.handlers` and :mod:`gannet.operator.cluster_handling`. ``Endpoints`` says
where a cluster's brokers answer the admin API: the in-cluster Service names by default, one
fixed address for brokers outside Kubernetes and for tests. :func:`admin_endpoint` finds the
member that accepts admin writes (the Raft leader), after :func:`secure` has told the broker
client how to reach the cluster: the admin key from ``spec.security.auth.operatorCredentialsSecret``
(a Secret with ``accessKey`` and ``secretKey``; without it the operator's own key) and, with
``spec.security.tls`` enabled, TLS trusting the ``ca.crt`` of the cluster's client TLS Secret.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import datetime as dt
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from gannet.operator import manifests, member_pods, resources, specs
from gannet.operator.brokers import BrokerError, Brokers, Security, Unauthorized
from gannet.operator.kube import Kube, KubeError
from gannet.operator.metrics import OperatorMetrics


class Endpoints(Protocol):
    """Where a cluster's brokers answer the admin API."""

    def client(self, namespace: str, cluster: str) -> str: ...

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str: ...

    def member(self, namespace: str, cluster: str, ordinal: int) -> tuple[str, str]:
        """(peer, client) address the group knows the member in pod ``ordinal`` by."""
        ...


class ServiceEndpoints:
    """In-cluster DNS names of the Services that :mod:`manifests` creates."""

    def client(self, namespace: str, cluster: str) -> str:
        return manifests.client_endpoint(cluster, namespace)

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str:
        return manifests.pod_endpoint(cluster, namespace, ordinal)

    def member(self, namespace: str, cluster: str, ordinal: int) -> tuple[str, str]:
        return (
            member_pods.peer_address(cluster, namespace, ordinal),
            member_pods.client_address(cluster, namespace, ordinal),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class FixedEndpoints:
    """One endpoint for every cluster and member (brokers outside Kubernetes; tests), or per
    broker group base name (``manifests.group_base``) in ``groups``."""

    endpoint: str
    groups: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def client(self, namespace: str, cluster: str) -> str:
        return self.groups.get(cluster, self.endpoint)

    def pod(self, namespace: str, cluster: str, ordinal: int) -> str:
        return self.groups.get(cluster, self.endpoint)

    def member(self, namespace: str, cluster: str, ordinal: int) -> tuple[str, str]:
        return (
            member_pods.peer_address(cluster, namespace, ordinal),
            member_pods.client_address(cluster, namespace, ordinal),
        )


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Passes:
    """One reconcile pass at a time per object. kopf runs an object's create/update/resume/delete
    handlers one after another but its timers in tasks of their own, so without this a timer
    pass and a create pass ran together (both creating the same StatefulSet) and two passes
    could each take a "one pod per pass" rolling step. Every handler body runs under
    :meth:`hold`; the lock of an object lives only while some pass holds or awaits it, so the
    table never outgrows the passes in flight."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[tuple[str, str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @contextlib.asynccontextmanager
    async def hold(self, kind: str, namespace: str, name: str) -> AsyncIterator[None]:
        key = (kind, namespace, name)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            yield


@dataclasses.dataclass
class Context:
    brokers: Brokers
    kube: Kube
    metrics: OperatorMetrics
    passes: Passes = dataclasses.field(default_factory=Passes)
    endpoints: Endpoints = dataclasses.field(default_factory=ServiceEndpoints)
    clock: Callable[[], dt.datetime] = utc_now
    refresh_interval_s: float = 30.0
    retry_delay_s: float = 10.0


def _secret_value(secret: Mapping[str, Any], key: str, where: str) -> str:
    encoded = (secret.get("data") or {}).get(key)
    if not encoded:
        raise Unauthorized(f"{where} has no {key!r} entry; it needs accessKey and secretKey")
    try:
        return base64.b64decode(encoded, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthorized(f"{where}: {key!r} is not base64-encoded text") from None


async def _read_secret(ctx: Context, namespace: str, name: str, where: str) -> dict[str, Any]:
    try:
        secret = await ctx.kube.get("v1", "Secret", namespace, name)
    except KubeError as exc:
        raise Unauthorized(f"{where}: cannot read Secret {namespace}/{name}: {exc}") from None
    if secret is None:
        raise Unauthorized(f"{where}: Secret {namespace}/{name} does not exist")
    return secret


async def cluster_security(
    ctx: Context, namespace: str, spec: specs.ClusterSpec, cluster: str
) -> Security | None:
    """How to reach ``cluster``'s brokers; None: the operator's default (:attr:`Brokers.security`).
    Raises :class:`Unauthorized` when a named Secret is missing or malformed."""
    auth, tls = spec.security.auth, spec.security.tls
    if not tls.enabled and not auth.operator_credentials_secret:
        return None
    access_key, secret_key = ctx.brokers.security.access_key, ctx.brokers.security.secret_key
    if auth.operator_credentials_secret:
        where = f"spec.security.auth.operatorCredentialsSecret {auth.operator_credentials_secret}"
        secret = await _read_secret(ctx, namespace, auth.operator_credentials_secret, where)
        access_key = _secret_value(secret, "accessKey", where)
        secret_key = _secret_value(secret, "secretKey", where)
    ca_pem = ctx.brokers.security.ca_pem
    tls_secret = manifests.client_tls_secret_name(cluster, spec)
    if tls_secret is not None:
        # Not there yet (cert-manager still issuing): TLS with the default trust; the calls
        # then fail as unavailable until the Secret appears.
        try:
            found = await ctx.kube.get("v1", "Secret", namespace, tls_secret) or {}
        except KubeError:
            found = {}
        encoded = (found.get("data") or {}).get("ca.crt")
        if encoded:
            ca_pem = base64.b64decode(encoded)
    try:
        return Security(
            access_key=access_key,
            secret_key=secret_key,
            tls=tls.enabled or ctx.brokers.security.tls,
            ca_pem=ca_pem,
        )
    except ValueError as exc:
        raise Unauthorized(f"GannetCluster {namespace}/{cluster}: {exc}") from None


async def secure(
    ctx: Context, namespace: str, cluster: str, spec: specs.ClusterSpec | None = None
) -> None:
    """Point the broker client at ``cluster``'s security settings (from ``spec``, else read from
    the GannetCluster, and its Secrets) for the client endpoint and every member's endpoint of
    every broker group it may have."""
    if spec is None:
        body = await ctx.kube.get(resources.API_VERSION, resources.CLUSTER_KIND, namespace, cluster)
        try:
            spec = None if body is None else specs.cluster_spec(body.get("spec") or {})
        except specs.SpecError:
            spec = None  # the GannetCluster's own status says what is wrong
    security = None if spec is None else await cluster_security(ctx, namespace, spec, cluster)
    endpoints: list[str] = []
    for group in range(specs.BROKER_GROUPS_MAX):  # every broker group's Services and pods
        base = manifests.group_base(cluster, group)
        endpoints.append(ctx.endpoints.client(namespace, base))
        endpoints += [ctx.endpoints.pod(namespace, base, i) for i in range(specs.REPLICAS_MAX)]
    ctx.brokers.use(endpoints, security)


async def admin_endpoint(
    ctx: Context, namespace: str, cluster: str, spec: specs.ClusterSpec | None = None
) -> str:
    """Where admin writes go: the Raft leader's client endpoint (a follower forwards them there,
    one hop more; brokers before admin forwarding refused them). Falls back to the client
    Service when no leader is known; the call that follows then reports the broker's state. Raises
    :class:`~gannet.operator.brokers.Unauthorized` when the cluster's Secrets are unusable."""
    await secure(ctx, namespace, cluster, spec)
    return await leader_endpoint(ctx, namespace, cluster)


async def leader_endpoint(ctx: Context, namespace: str, base: str) -> str:
    """The Raft leader's client endpoint of the broker group whose objects are named after
    ``base`` (``manifests.group_base``), else its client Service (:func:`admin_endpoint`
    without :func:`secure`)."""
    client = ctx.endpoints.client(namespace, base)
    try:
        view = await ctx.brokers.raft_status(client)
    except BrokerError:
        return client
    # Node ids are not pod ordinals once a member was replaced: the leader's advertised client
    # address names its pod; without one (older brokers), the first members' rule (id - 1).
    ordinal = member_pods.ordinal_of_endpoint(base, view.leader_client_endpoint)
    if ordinal < 0 and not view.leader_client_endpoint:
        ordinal = member_pods.ordinal_of(None, view.leader_id)
    return ctx.endpoints.pod(namespace, base, ordinal) if ordinal >= 0 else client
