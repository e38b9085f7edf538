"""A KMock Kubernetes emulator that behaves enough like an API server for kopf.

kmock 0.8 keeps objects in memory but does not emulate ``resourceVersion``, ``generation``,
``uid`` or ``creationTimestamp``, and answers a failed JSON-patch ``test`` with 500. kopf guards
its finalizer and ``patch.fns`` edits with a ``test`` on ``metadata.resourceVersion`` and
re-applies them on 422 (what a real API server answers), so this subclass:

- stamps a fresh, increasing ``resourceVersion`` on every create and update;
- sets ``uid``, ``creationTimestamp`` and ``generation: 1`` on create, and bumps ``generation``
  when an update changes ``spec`` (status and metadata edits do not);
- turns ``jsonpatch.JsonPatchTestFailed`` into HTTP 422 ``Invalid``;
- answers 404 to creates of kinds it does not serve (kmock stores anything);
- delays the requests a test names in :attr:`ApiServerEmulator.latency` (method and plural),
  to widen the window in which two passes of the operator could overlap, and answers 409
  Conflict to as many of them as :attr:`ApiServerEmulator.conflicts` says;
- serves server-side apply (``application/apply-patch+yaml``): a missing object is created (a
  POST joins the request log after the PATCH), an existing one merged with the applied fields
  (no field ownership);
- answers lists with the current ``resourceVersion`` and, when a watch names one, does not
  replay objects that are not newer (kmock replays every object as ADDED, so kopf saw each
  object twice, the second time stale, and its ``test``-guarded finalizer patch failed for good).

It overrides kmock's private ``_handle``, hence ``kmock==0.8`` is pinned.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
from kmock._internal import dicts, enums, rendering

APPLY = "application/apply-patch+yaml"


@attrs.frozen
class Conflict(kmock.KubernetesError):
    status: int = 409
    reason: str = "Conflict"
    message: str = "the object has been modified; please apply your changes to the latest version"


@attrs.frozen
class Invalid(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"
    message: str = "the patch's test operation failed (resourceVersion changed)"


_versions = itertools.count(1000)
_last_version = 0


def _next_version() -> str:
    global _last_version  # noqa: PLW0603 - one counter for the whole emulated "etcd"
    _last_version = next(_versions)
    return str(_last_version)


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    # (HTTP method, resource plural) -> seconds each such request waits before it is served
    latency: dict[tuple[str, str], float] = attrs.field(factory=dict)
    # (HTTP method, resource plural) -> how many such requests to answer 409 Conflict first
    conflicts: dict[tuple[str, str], int] = attrs.field(factory=dict)

    def _current(self, request: rendering.Request) -> dict[str, Any] | None:
        assert request.resource is not None
        assert request.name is not None
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        return copy.deepcopy(dict(self._objects[key].raw))

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource is not None:
            delay = self.latency.get((request.method.value, request.resource.plural or ""))
            if delay:
                await asyncio.sleep(delay)
            key = (request.method.value, request.resource.plural or "")
            if self.conflicts.get(key, 0) > 0:
                self.conflicts[key] -= 1
                return await self._render_error(Conflict())
        if (
            request.action == enums.action.UPDATE
            and request.headers.get("Content-Type", "").startswith(APPLY)
            and request.name is not None
            and request.subresource is None
            and self._current(request) is None
        ):
            # Server-side apply of a missing object creates it: served as a create, which the
            # request log shows as a POST right after the PATCH.
            request = attrs.evolve(
                request,
                action=enums.action.CREATE,
                method="POST",
                url=request.url.parent,
                name=None,
            )
            self._requests.append(request)
        if request.resource is not None and request.action == enums.action.CREATE:
            declared = kmock.KubernetesScaffold._get_resources(self)
            if not any(resource == request.resource for resource in declared):
                # A kind nobody declared (e.g. a CRD that is not installed): 404, as a server.
                return await self._render_error(kmock.KubernetesResourceNotFoundError())
            data = request.data  # stamped in place: kmock tracks the request object itself
            metadata = data.setdefault("metadata", {})
            metadata["resourceVersion"] = _next_version()
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault(
                "creationTimestamp",
                dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            )
            metadata.setdefault("generation", 1)
        elif (
            request.resource is not None
            and request.action == enums.action.UPDATE
            and request.name is not None
        ):
            self._stamp(request)
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed:
            return await self._render_error(Invalid())

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        listing = await super()._serve_list(request)
        assert isinstance(listing, dict)
        listing["metadata"] = {"resourceVersion": str(_last_version)}
        return listing

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        since = request.params.get("resourceVersion", "")
        since_version = int(since) if since.isdigit() else -1
        replaying = True
        async for event in super()._serve_watch(request):
            if replaying and isinstance(event, dict):
                version = str(event.get("object", {}).get("metadata", {}).get("resourceVersion"))
                if version.isdigit() and int(version) <= since_version:
                    continue
            elif not isinstance(event, dict):
                replaying = True  # the b"" that opens the stream precedes the replay
            yield event

    def _stamp(self, request: rendering.Request) -> None:
        current = self._current(request)
        version = _next_version()
        data = request.data
        generation_bump = False
        if current is not None and request.subresource != "status":
            try:
                updated = dicts.patch_dict(current, copy.deepcopy(data))
            except jsonpatch.JsonPatchException:
                updated = current
            generation_bump = updated.get("spec") != current.get("spec")
        generation = int((current or {}).get("metadata", {}).get("generation", 1)) + 1
        if isinstance(data, list):
            # Appended after the caller's operations, so that their `test` sees the old version.
            data.append({"op": "add", "path": "/metadata/resourceVersion", "value": version})
            if generation_bump:
                data.append({"op": "add", "path": "/metadata/generation", "value": generation})
            return
        metadata = data.setdefault("metadata", {})
        metadata["resourceVersion"] = version
        if generation_bump:
            metadata["generation"] = generation
