"""The one module that talks to the Kubernetes API for the operator's own objects.

kopf watches the custom resources and writes their status; everything else the operator owns
(StatefulSet, Services, ConfigMap, PodDisruptionBudget, ServiceMonitor, cert-manager
Certificates, reads of the operator's credentials Secrets, pod deletes during a
roll, listings for the liveness check) goes through :class:`Kube`, a small aiohttp client over
the same credentials kopf logged in with (:func:`access_from`). Writes are create-or-merge-patch:
:meth:`Kube.apply` creates a missing object, leaves an equal one alone, and otherwise patches
only the fields the object kind allows to change (a StatefulSet's ``volumeClaimTemplates`` and
``selector`` are immutable, so they are never sent again).

Every request has a total timeout (``timeout_s``); failures raise :class:`KubeError` naming the
verb, the path and the API server's message.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp

_KINDS: dict[tuple[str, str], str] = {
    ("v1", "Service"): "services",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Pod"): "pods",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitors",
    ("cert-manager.io/v1", "Certificate"): "certificates",
    ("v1", "Secret"): "secrets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("gannet.io/v1alpha1", "GannetCluster"): "gannetclusters",
    ("gannet.io/v1alpha1", "Topic"): "topics",
    ("gannet.io/v1alpha1", "ConsumerGroup"): "consumergroups",
}
# Fields sent on update, per kind (everything else is fixed at create or owned by the server).
_MUTABLE: dict[str, tuple[str, ...]] = {
    "StatefulSet": (
        "replicas",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
    ),
}


class KubeError(Exception):
    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class Access:
    """Where the API server is and how to authenticate: request headers (bearer token, basic
    auth) and the TLS context (CA, client certificate); ``tls=None`` for plain HTTP."""

    server: str
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tls: ssl.SSLContext | None = None


def access_from(info: Any) -> Access:
    """An :class:`Access` from a ``kopf.ConnectionInfo`` (kopf's login result): kopf builds the
    headers and the TLS context itself, including kubeconfig's inline ``*-data`` certificates."""
    server = str(info.server)
    tls = info.as_ssl_context() if server.startswith("https") else None
    return Access(server=server, headers=dict(info.as_http_headers()), tls=tls)


def resource_path(
    api_version: str, kind: str, namespace: str | None, name: str | None = None
) -> str:
    plural = _KINDS.get((api_version, kind))
    if plural is None:
        raise ValueError(f"kind {api_version}/{kind} is not one the operator manages")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    return f"{path}/{name}" if name else path


def contains(existing: Any, desired: Any) -> bool:
    """Whether every field of ``desired`` has the same value in ``existing`` (lists compared
    item by item, dicts as subsets: server defaults in ``existing`` do not count as changes)."""
    if isinstance(desired, Mapping):
        return isinstance(existing, Mapping) and all(
            contains(existing.get(k), v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(existing, list)
            and len(existing) == len(desired)
            and all(contains(e, d) for e, d in zip(existing, desired, strict=True))
        )
    return bool(existing == desired)


def update_body(desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that brings an existing object to ``desired``."""
    metadata = desired.get("metadata", {})
    body: dict[str, Any] = {
        "metadata": {k: metadata[k] for k in ("labels", "annotations") if k in metadata}
    }
    mutable = _MUTABLE.get(str(desired.get("kind")))
    for key in ("spec", "data"):
        if key not in desired:
            continue
        value = desired[key]
        body[key] = (
            {k: v for k, v in value.items() if k in mutable} if mutable and key == "spec" else value
        )
    return body


def _label_match(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class Kube:
    """API client; ``access`` may arrive later (:meth:`connect`), once kopf has logged in."""

    def __init__(self, access: Access | None = None, *, timeout_s: float = 30.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s is {timeout_s}; use a positive number of seconds")
        self._access = access
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def access(self) -> Access:
        if self._access is None:
            raise KubeError("not logged in to the Kubernetes API yet", status=0)
        return self._access

    async def connect(self, access: Access) -> None:
        """Use ``access`` from now on (a new login replaces the old session)."""
        if access != self._access:
            await self.close()
            self._access = access

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                base_url=self.access.server.rstrip("/"),
                headers={"Accept": "application/json", **self.access.headers},
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(
                    ssl=self.access.tls if self.access.tls is not None else False, limit=16
                ),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self,
        verb: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        session = self._open()
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            async with session.request(
                verb, path, json=body, headers=headers, params=params
            ) as response:
                if response.status == 404 and verb != "POST":
                    return None  # the object does not exist
                if response.status == 404:
                    raise KubeError(
                        f"{verb} {path}: HTTP 404; the API server does not serve this kind "
                        "(is its CRD installed?)",
                        status=404,
                    )
                payload = await response.json(content_type=None)
                if response.status >= 400:
                    message = payload.get("message") if isinstance(payload, dict) else payload
                    raise KubeError(
                        f"{verb} {path}: HTTP {response.status} {message}", status=response.status
                    )
                return payload
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeError(f"{verb} {path}: {exc!r}", status=0) from None

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        result = await self._request("GET", resource_path(api_version, kind, namespace, name))
        return None if result is None else dict(result)

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        params = (
            {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else None
        )
        result = await self._request(
            "GET", resource_path(api_version, kind, namespace), params=params
        )
        items = [] if result is None else list(result.get("items") or [])
        # Filter here too: not every API server (or emulator) honours the selector.
        return [i for i in items if not labels or _label_match(i, labels)]

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        result = await self._request("DELETE", resource_path(api_version, kind, namespace, name))
        return result is not None

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch one object; None when it does not exist."""
        result = await self._request(
            "PATCH",
            resource_path(api_version, kind, namespace, name),
            body=dict(body),
            content_type="application/merge-patch+json",
        )
        return None if result is None else dict(result)

    async def apply(self, desired: Mapping[str, Any]) -> str:
        """Create or update ``desired``; returns "created", "updated" or "unchanged"."""
        api_version, kind = str(desired["apiVersion"]), str(desired["kind"])
        namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        existing = await self.get(api_version, kind, namespace, name)
        if existing is None:
            try:
                await self._request(
                    "POST", resource_path(api_version, kind, namespace), body=desired
                )
            except KubeError as exc:
                if exc.status != 409:
                    raise
                # Created meanwhile (another pass of the operator): update it instead.
                existing = await self.get(api_version, kind, namespace, name) or {}
            else:
                return "created"
        body = update_body(desired)
        if contains(existing, body):
            return "unchanged"
        await self._request(
            "PATCH",
            resource_path(api_version, kind, namespace, name),
            body=body,
            content_type="application/merge-patch+json",
        )
        return "updated"
