"""The one module that talks to the Kubernetes API for the operator's own objects, through the
official asyncio client (``kubernetes_asyncio``).

kopf watches the custom resources; everything else the operator reads or writes (StatefulSet,
Services, ConfigMap, PodDisruptionBudget, ServiceMonitor, cert-manager Certificates, the status
subresource of its own resources, Events, reads of the credentials Secrets, pod deletes during a
roll, listings for the liveness check) goes through :class:`Kube`. It calls the client's typed
APIs (``CoreV1Api``, ``AppsV1Api``, ``PolicyV1Api``; ``CustomObjectsApi`` for CRD kinds) and
hands plain dicts in the API's own camelCase shape to the rest of the operator.

- Credentials: :func:`configuration` loads the pod's service account, else ``KUBECONFIG`` /
  ``~/.kube/config`` (or a bare URL without credentials: tests, ``kubectl proxy``);
  :func:`connection_info` gives kopf the same login, so both speak to one server as one user.
- Writes are server-side apply under the field manager :data:`FIELD_MANAGER` (forced: the
  operator owns the fields it sets). :meth:`Kube.apply` reads the object first: an equal one is
  left alone, and an existing StatefulSet keeps its immutable ``spec`` fields as the server has
  them (only :data:`_MUTABLE` fields ever change).
- Status goes through the ``status`` subresource as a merge patch (:meth:`Kube.patch_status`).
- A 409 Conflict (a create racing another writer, a stale read) is retried from a fresh read up
  to :data:`CONFLICT_RETRIES` times; every other failure raises :class:`KubeError` naming the
  verb, the object and the API server's message. Every request has a total timeout.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import aiohttp
import kopf
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

FIELD_MANAGER: Final = "gannet-operator"
CONFLICT_RETRIES: Final = 3
APPLY: Final = "application/apply-patch+yaml"
MERGE: Final = "application/merge-patch+json"


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    plural: str
    api: str  # the kubernetes_asyncio API class; "" for CustomObjectsApi
    snake: str = ""  # the typed methods' resource word, e.g. "stateful_set"


_KINDS: dict[tuple[str, str], _Kind] = {
    ("v1", "Service"): _Kind("services", "CoreV1Api", "service"),
    ("v1", "ConfigMap"): _Kind("configmaps", "CoreV1Api", "config_map"),
    ("v1", "Pod"): _Kind("pods", "CoreV1Api", "pod"),
    ("v1", "Secret"): _Kind("secrets", "CoreV1Api", "secret"),
    ("v1", "Event"): _Kind("events", "CoreV1Api", "event"),
    ("v1", "PersistentVolumeClaim"): _Kind(
        "persistentvolumeclaims", "CoreV1Api", "persistent_volume_claim"
    ),
    ("apps/v1", "StatefulSet"): _Kind("statefulsets", "AppsV1Api", "stateful_set"),
    ("policy/v1", "PodDisruptionBudget"): _Kind(
        "poddisruptionbudgets", "PolicyV1Api", "pod_disruption_budget"
    ),
    ("networking.k8s.io/v1", "NetworkPolicy"): _Kind(
        "networkpolicies", "NetworkingV1Api", "network_policy"
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _Kind("servicemonitors", ""),
    ("cert-manager.io/v1", "Certificate"): _Kind("certificates", ""),
    ("gannet.io/v1alpha1", "GannetCluster"): _Kind("gannetclusters", ""),
    ("gannet.io/v1alpha1", "Topic"): _Kind("topics", ""),
    ("gannet.io/v1alpha1", "ConsumerGroup"): _Kind("consumergroups", ""),
}
# Fields sent on update, per kind (the rest of ``spec`` is fixed at create, e.g. a
# StatefulSet's ``volumeClaimTemplates`` and ``selector``, and is sent back as it is).
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


def _kind(api_version: str, kind: str) -> _Kind:
    found = _KINDS.get((api_version, kind))
    if found is None:
        raise ValueError(f"kind {api_version}/{kind} is not one the operator manages")
    return found


def resource_path(
    api_version: str, kind: str, namespace: str | None, name: str | None = None
) -> str:
    """The REST path of a kind, namespace or object (tests watch it)."""
    plural = _kind(api_version, kind).plural
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


def apply_body(desired: Mapping[str, Any], existing: Mapping[str, Any] | None) -> dict[str, Any]:
    """The server-side apply body that brings ``existing`` (None: not there yet) to
    ``desired``: ``desired`` itself, except that the immutable ``spec`` fields of an existing
    object are sent as the server has them."""
    body = copy.deepcopy(dict(desired))
    mutable = _MUTABLE.get(str(desired.get("kind")))
    if existing is None or not mutable or "spec" not in body:
        return body
    current = existing.get("spec") or {}
    body["spec"] = {
        key: value if key in mutable else current[key]
        for key, value in body["spec"].items()
        if key in mutable or key in current
    }
    return body


def _label_match(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


async def configuration(server: str | None = None) -> client.Configuration:
    """Where the API server is and who the operator is there: ``server`` without credentials,
    else the pod's service account, else ``KUBECONFIG`` / ``~/.kube/config``."""
    result = client.Configuration()
    if server is not None:
        result.host = server.rstrip("/")
        result.verify_ssl = False
        return result
    try:
        config.load_incluster_config(client_configuration=result)  # type: ignore[no-untyped-call]
    except ConfigException:
        try:
            # KUBECONFIG as it is now (the library reads it once, at import).
            await config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG") or None, client_configuration=result
            )
        except (ConfigException, OSError) as exc:
            raise KubeError(
                "no Kubernetes credentials: not in a pod with a service account, and no "
                f"usable KUBECONFIG or ~/.kube/config ({exc}); or pass --server",
                status=0,
            ) from None
    return result


def connection_info(settings: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's login from the client configuration: one server, one identity for both."""
    token = (settings.api_key or {}).get("BearerToken") or (settings.api_key or {}).get(
        "authorization"
    )
    if token:
        prefix = (settings.api_key_prefix or {}).get("BearerToken")
        token = str(token).removeprefix("Bearer ").removeprefix(f"{prefix} " if prefix else "")
    return kopf.ConnectionInfo(
        server=str(settings.host),
        ca_path=settings.ssl_ca_cert or None,
        insecure=not settings.verify_ssl,
        username=settings.username or None,
        password=settings.password or None,
        scheme="Bearer" if token else None,
        token=token or None,
        certificate_path=settings.cert_file or None,
        private_key_path=settings.key_file or None,
    )


class Kube:
    """API client; the configuration may arrive later (:meth:`connect`), once kopf logs in."""

    def __init__(
        self, settings: client.Configuration | None = None, *, timeout_s: float = 30.0
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s is {timeout_s}; use a positive number of seconds")
        self.timeout_s = timeout_s
        self._settings = settings
        self._client: client.ApiClient | None = None

    @classmethod
    def for_server(cls, server: str, *, timeout_s: float = 30.0) -> Kube:
        """A client of ``server`` without credentials (tests, ``kubectl proxy``)."""
        settings = client.Configuration()
        settings.host = server.rstrip("/")
        return cls(settings, timeout_s=timeout_s)

    async def connect(self, settings: client.Configuration) -> None:
        """Use ``settings`` from now on (a new login replaces the old connection)."""
        await self.close()
        self._settings = settings

    def _api(self, name: str) -> Any:
        if self._settings is None:
            raise KubeError("not logged in to the Kubernetes API yet", status=0)
        # The models' required-field checks would refuse objects the server accepts
        # (e.g. a StatefulSet status without replicas); the server is the judge.
        self._settings.client_side_validation = False
        if self._client is None:
            self._client = client.ApiClient(self._settings)
        return getattr(client, name)(self._client)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _call(self, what: str, call: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
        """Run one typed call and return the API server's JSON answer as a dict. The calls run
        with ``_preload_content=False``: the answer is not turned into the client's models,
        whose required-field checks refuse objects the server itself accepts (a StatefulSet
        status without ``replicas``), and the operator reads plain dicts anyway."""
        try:
            response = await call()
            try:
                status, text = int(response.status), str(await response.text())
            finally:
                response.release()
        except ApiException as exc:
            status, text = int(exc.status or 0), str(exc.body or exc.reason)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise KubeError(f"{what}: {exc!r}", status=0) from None
        try:
            payload = json.loads(text) if text else {}
        except ValueError:
            payload = {"message": text}
        if status >= 400:
            message = payload.get("message") if isinstance(payload, dict) else None
            if status == 404 and what.startswith(("create", "apply")):
                message = f"{message}; the API server does not serve this kind (CRD installed?)"
            raise KubeError(f"{what}: HTTP {status} {message or text}", status=status)
        return payload if isinstance(payload, dict) else {}

    def _method(
        self, verb: str, api_version: str, kind: str, namespace: str | None, **kwargs: Any
    ) -> Callable[[], Awaitable[Any]]:
        """The typed call for ``verb`` (read, list, create, patch, patch_status, delete)."""
        spec = _kind(api_version, kind)
        kwargs["_request_timeout"] = self.timeout_s
        kwargs["_preload_content"] = False
        if not spec.api:
            group, _, version = api_version.partition("/")
            api = self._api("CustomObjectsApi")
            words = {
                "read": "get",
                "list": "list",
                "create": "create",
                "patch": "patch",
                "patch_status": "patch",
                "delete": "delete",
            }
            scope = "namespaced" if namespace else "cluster"
            suffix = "_status" if verb == "patch_status" else ""
            method = getattr(api, f"{words[verb]}_{scope}_custom_object{suffix}")
            args = (group, version, *((namespace,) if namespace else ()), spec.plural)
            return lambda: method(*args, **kwargs)
        api = self._api(spec.api)
        if verb == "list" and not namespace:
            method = getattr(api, f"list_{spec.snake}_for_all_namespaces")
            return lambda: method(**kwargs)
        suffix = "_status" if verb == "patch_status" else ""
        base = "patch" if verb == "patch_status" else verb
        method = getattr(api, f"{base}_namespaced_{spec.snake}{suffix}")
        return lambda: method(namespace=namespace, **kwargs)

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        call = self._method("read", api_version, kind, namespace, name=name)
        try:
            found = await self._call(
                f"get {resource_path(api_version, kind, namespace, name)}", call
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
        extra = {"label_selector": selector} if selector else {}
        call = self._method("list", api_version, kind, namespace, **extra)
        try:
            found = await self._call(f"list {resource_path(api_version, kind, namespace)}", call)
        except KubeError as exc:
            if exc.status == 404:
                return []
            raise
        items = list(found.get("items") or [])
        # Filter here too: not every API server (or emulator) honours the selector.
        return [i for i in items if not labels or _label_match(i, labels)]

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete one object; False when it did not exist."""
        call = self._method("delete", api_version, kind, namespace, name=name)
        try:
            await self._call(f"delete {resource_path(api_version, kind, namespace, name)}", call)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (HTTP 409 if it exists: :class:`KubeError`)."""
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        namespace = obj["metadata"].get("namespace")
        call = self._method("create", api_version, kind, namespace, body=dict(obj))
        return await self._call(f"create {resource_path(api_version, kind, namespace)}", call)

    async def patch(
        self, api_version: str, kind: str, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch one object; None when it does not exist."""
        return await self._merge("patch", api_version, kind, namespace, name, dict(body))

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch the ``status`` subresource; None when the object does not exist."""
        body = {"status": dict(status)}
        return await self._merge("patch_status", api_version, kind, namespace, name, body)

    async def _merge(
        self,
        verb: str,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        body: dict[str, Any],
    ) -> dict[str, Any] | None:
        call = self._method(
            verb, api_version, kind, namespace, name=name, body=body, _content_type=MERGE
        )
        what = f"{verb.replace('_', ' ')} {resource_path(api_version, kind, namespace, name)}"
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                return await self._call(what, call)
            except KubeError as exc:
                if exc.status == 404:
                    return None
                if exc.status != 409 or attempt == CONFLICT_RETRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def apply(self, desired: Mapping[str, Any]) -> str:
        """Create or update ``desired`` by server-side apply; returns "created", "updated" or
        "unchanged" (an object that already has every desired field is not written)."""
        api_version, kind = str(desired["apiVersion"]), str(desired["kind"])
        namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        _kind(api_version, kind)
        for attempt in range(CONFLICT_RETRIES + 1):
            existing = await self.get(api_version, kind, namespace, name)
            body = apply_body(desired, existing)
            if existing is not None and contains(existing, body):
                return "unchanged"
            call = self._method(
                "patch",
                api_version,
                kind,
                namespace,
                name=name,
                body=body,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY,
            )
            try:
                await self._call(f"apply {resource_path(api_version, kind, namespace, name)}", call)
            except KubeError as exc:
                if exc.status != 409 or attempt == CONFLICT_RETRIES:
                    raise
                continue  # changed meanwhile: read it again
            return "created" if existing is None else "updated"
        raise AssertionError("unreachable")  # pragma: no cover
