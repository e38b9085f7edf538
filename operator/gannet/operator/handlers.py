"""kopf handlers for GannetCluster, Topic and ConsumerGroup: thin glue, no decisions.

The Topic and ConsumerGroup handlers are here; the GannetCluster pass they call is
:mod:`gannet.operator.cluster_handling`.

:func:`register` puts every handler on a ``kopf.OperatorRegistry`` bound to one
:class:`Context` (broker client, Kubernetes client, endpoints, clock), so tests can run the
operator in-process against an API emulator and in-process brokers (``tests/operator``), and
:mod:`gannet.operator.running` runs the same handlers for real.

Each handler reads the resource, asks the broker or the API for what exists, lets a pure planning
module decide (:mod:`topic_planning`, :mod:`consumer_group_planning`, :mod:`cluster_planning`,
:mod:`schedules`, :mod:`manifests`), carries the plan out and writes ``status``:
``observedGeneration``, ``conditions`` and live figures. Create, update and resume react at once;
a timer per resource (``refresh_interval_s``) re-runs the same level-based reconcile and
refreshes the figures, which also heals drift (a topic deleted behind the operator's back is
created again). Every pass over one object runs alone (:func:`one_pass_at_a_time`): it
reads the object afresh, writes its status through the status subresource and posts its
Kubernetes Events (:mod:`events`) before the next pass starts. Broker outages become
``Ready=False reason=BrokerUnavailable`` plus a kopf retry; refusals become ``BrokerRefused``
without retry storms (the timer tries again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from gannet.operator import (
    broker_group_planning,
    brokers,
    claims,
    cluster_handling,
    conditions,
    consumer_group_planning,
    contexts,
    events,
    manifests,
    resources,
    specs,
    topic_planning,
)
from gannet.operator.brokers import BrokerRefused, BrokerUnavailable
from gannet.operator.conditions import Condition
from gannet.operator.contexts import Context
from gannet.operator.kube import KubeError

TOPICS = (resources.GROUP, resources.VERSION, resources.PLURALS[resources.TOPIC_KIND])
GROUPS = (resources.GROUP, resources.VERSION, resources.PLURALS[resources.GROUP_KIND])
CLUSTERS = (resources.GROUP, resources.VERSION, resources.PLURALS[resources.CLUSTER_KIND])
FIGURES_TOPICS_MAX = 100


Body = Callable[..., Awaitable[None]]


def one_pass_at_a_time(ctx: Context, kind: str, body: Body) -> Body:
    """``body`` as a kopf handler that never runs beside another pass over the same object
    (:class:`contexts.Passes`): it waits for the object's lock, reads the object afresh (a pass
    that waited must see what the previous one did, not the body kopf queued it with), and
    writes the status the body put in its ``patch`` through the status subresource before
    letting go, so the next pass starts from it."""

    async def handler(*, name: str, namespace: str, **kwargs: Any) -> None:
        async with ctx.passes.hold(kind, namespace, name):
            try:
                current = await ctx.kube.get(resources.API_VERSION, kind, namespace, name)
            except KubeError as exc:
                raise kopf.TemporaryError(str(exc), delay=ctx.retry_delay_s) from None
            if current is None:
                return  # deleted meanwhile: kopf stops its handlers too
            patch = kopf.Patch()
            pending = events.Pending()
            status = current.get("status") or {}
            meta = current.get("metadata") or {}
            kwargs.update(spec=current.get("spec") or {}, status=status, meta=meta, patch=patch)
            try:
                await body(name=name, namespace=namespace, pending=pending, **kwargs)
            finally:
                try:
                    await _write_status(ctx, kind, namespace, name, patch)
                finally:
                    changed = events.from_conditions(
                        status.get("conditions"), (patch.get("status") or {}).get("conditions")
                    )
                    await events.post(
                        ctx.kube, kind, meta, [*pending.events, *changed], now=ctx.clock()
                    )

    return handler


async def _write_status(
    ctx: Context, kind: str, namespace: str, name: str, patch: kopf.Patch
) -> None:
    status = patch.get("status")
    if not status:
        return
    try:
        await ctx.kube.patch_status(resources.API_VERSION, kind, namespace, name, status)
    except KubeError as exc:
        raise kopf.TemporaryError(
            f"writing the status of {kind} {namespace}/{name}: {exc}", delay=ctx.retry_delay_s
        ) from None


def _reconcile_and_refresh(
    resource: tuple[str, str, str],
    kind: str,
    body: Body,
    ctx: Context,
    registry: kopf.OperatorRegistry,
) -> None:
    """Run ``body`` on create, update and resume, and on the refresh timer, one pass at a time.
    The timer waits one interval before its first run: the create (or resume) handler has just
    made that pass."""
    handler = one_pass_at_a_time(ctx, kind, body)
    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        decorator(*resource, id="reconcile", registry=registry)(_any(handler))
    kopf.timer(
        *resource,
        id="refresh",
        interval=ctx.refresh_interval_s,
        initial_delay=ctx.refresh_interval_s,
        registry=registry,
    )(_any(handler))


def _flag(meta: Mapping[str, Any], annotation: str, *, default: bool) -> bool:
    value = (meta.get("annotations") or {}).get(annotation)
    return default if value is None else str(value).lower() == "true"


def _with_condition(
    ctx: Context, status: Mapping[str, Any], condition: Condition, generation: int | None
) -> list[dict[str, Any]]:
    return conditions.merge(
        status.get("conditions"), condition, generation=generation, now=ctx.clock()
    )


def _write_ready(
    ctx: Context,
    patch: kopf.Patch,
    status: Mapping[str, Any],
    meta: Mapping[str, Any],
    condition: Condition,
) -> None:
    generation = meta.get("generation")
    patch.status["conditions"] = _with_condition(ctx, status, condition, generation)
    if generation is not None:
        patch.status["observedGeneration"] = generation


class _Outcome:
    """Result label of one reconcile, set by the handler body."""

    def __init__(self) -> None:
        self.result = "success"


@contextlib.contextmanager
def _observed(ctx: Context, kind: str) -> Iterator[_Outcome]:
    outcome = _Outcome()
    started = time.monotonic()
    try:
        yield outcome
    except Exception:
        outcome.result = "failed"
        raise
    finally:
        ctx.metrics.observe(kind, outcome.result, time.monotonic() - started)


def _unavailable(ctx: Context, exc: Exception) -> kopf.TemporaryError:
    return kopf.TemporaryError(str(exc), delay=ctx.retry_delay_s)


def _claim_of(
    name: str,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    meta: Mapping[str, Any],
    parse: Callable[[str, Mapping[str, Any]], Any],
    held_key: str,
    namespace: str,
) -> dict[claims.ClaimKey, claims.Claim] | None:
    try:
        parsed = parse(name, spec)
    except specs.SpecError:
        return None
    broker_name = parsed.topic_name if hasattr(parsed, "topic_name") else parsed.group_name
    key = claims.ClaimKey(namespace, parsed.cluster, broker_name)
    holds = status.get(held_key) == broker_name
    created = str(meta.get("creationTimestamp") or "")
    return {key: claims.Claim(resource=name, created=created, holds=holds)}


def _any(fn: Callable[..., Any]) -> Any:
    """kopf's handler protocols list every keyword it passes; ours take the few they use."""
    return fn


def register(registry: kopf.OperatorRegistry, ctx: Context) -> None:
    """Register every handler of the operator on ``registry``."""

    # ------------------------------------------------------------------ watch bookkeeping
    for kind, resource in (
        (resources.TOPIC_KIND, TOPICS),
        (resources.GROUP_KIND, GROUPS),
        (resources.CLUSTER_KIND, CLUSTERS),
    ):

        def seen(
            event: Mapping[str, Any], meta: Mapping[str, Any], _kind: str = kind, **_: Any
        ) -> None:
            ctx.metrics.seen(
                _kind,
                str(meta.get("namespace") or ""),
                str(meta.get("name") or ""),
                str(meta.get("resourceVersion") or ""),
                deleted=event.get("type") == "DELETED",
            )

        kopf.on.event(*resource, id=f"seen-{kind.lower()}", registry=registry)(_any(seen))

    # ------------------------------------------------------------------ topics and groups
    for named in (NAMED_TOPIC, NAMED_GROUP):
        _register_named(named, ctx, registry)

    # ------------------------------------------------------------------ clusters
    async def reconcile_cluster(
        name: str,
        namespace: str,
        spec: Any,
        status: Any,
        meta: Any,
        patch: kopf.Patch,
        pending: events.Pending,
        **_: Any,
    ) -> None:
        with _observed(ctx, resources.CLUSTER_KIND) as outcome:
            try:
                cluster = specs.cluster_spec(spec)
            except specs.SpecError as exc:
                outcome.result = "refused"
                _write_ready(
                    ctx,
                    patch,
                    status,
                    meta,
                    Condition(conditions.READY, False, conditions.INVALID_SPEC, str(exc)),
                )
                return
            try:
                await cluster_handling.reconcile(
                    ctx, name, namespace, cluster, status, meta, patch, pending
                )
            except KubeError as exc:
                _write_ready(
                    ctx,
                    patch,
                    status,
                    meta,
                    Condition(conditions.READY, False, "KubernetesError", str(exc)),
                )
                raise kopf.TemporaryError(str(exc), delay=ctx.retry_delay_s) from None

    _reconcile_and_refresh(CLUSTERS, resources.CLUSTER_KIND, reconcile_cluster, ctx, registry)


@dataclass(frozen=True)
class _Named:
    """What differs between the Topic and the ConsumerGroup handlers. Both resources name one
    broker object, claimed by the oldest resource naming it (:mod:`claims`), planned by a pure
    module and carried out through the admin API; the reconcile and release bodies are shared
    (:func:`_reconcile_named`, :func:`_release_named`)."""

    kind: str
    resource: tuple[str, str, str]
    index_id: str  # kopf passes the claims index under this keyword
    held_key: str  # status field naming the broker object this resource holds
    parse: Callable[[str, Mapping[str, Any]], Any]  # specs.SpecError on a bad spec
    broker_name: Callable[[Any], str]
    plan: Callable[..., Any]  # (spec, observed | None, held_name=, winner=, ...) -> plan
    plan_passes: int  # a group's create may need an update next (consumeEnabled=false)
    describe: Callable[[Context, str, str], Awaitable[Any]]  # (observed, figures) | None
    apply: Callable[[Context, str, Any, tuple[str, str]], Awaitable[None]]  # (ns, cluster)
    delete: Callable[[Context, str, str], Awaitable[object]]
    write_figures: Callable[[kopf.Patch, Any], None]


def _topic_figures(patch: kopf.Patch, described: Any) -> None:
    observed, figures = described
    patch.status["queues"] = figures.queues
    patch.status["messageType"] = observed.message_type
    patch.status["permission"] = observed.permission.name
    patch.status["maxOffsets"] = list(figures.max_offsets)
    patch.status["messages"] = figures.messages


def _group_figures(patch: kopf.Patch, described: Any) -> None:
    figures = described[1]
    patch.status["lag"] = figures.lag
    patch.status["topics"] = [
        {"topic": t, "lag": lag} for t, lag in figures.lag_by_topic[:FIGURES_TOPICS_MAX]
    ]


def _register_named(named: _Named, ctx: Context, registry: kopf.OperatorRegistry) -> None:
    def claim(name: str, namespace: str, spec: Any, status: Any, meta: Any, **_: Any) -> Any:
        return _claim_of(name, spec, status, meta, named.parse, named.held_key, namespace)

    async def reconcile(**kwargs: Any) -> None:
        await _reconcile_named(named, ctx, **kwargs)

    async def release(**kwargs: Any) -> None:
        await _release_named(named, ctx, **kwargs)

    kopf.index(*named.resource, id=named.index_id, registry=registry)(_any(claim))
    _reconcile_and_refresh(named.resource, named.kind, reconcile, ctx, registry)
    kopf.on.delete(*named.resource, id="release", registry=registry)(
        _any(one_pass_at_a_time(ctx, named.kind, release))
    )


async def _reconcile_named(
    named: _Named,
    ctx: Context,
    *,
    name: str,
    namespace: str,
    spec: Any,
    status: Any,
    meta: Any,
    patch: kopf.Patch,
    pending: events.Pending,
    **kwargs: Any,
) -> None:
    with _observed(ctx, named.kind) as outcome:
        try:
            parsed = named.parse(name, spec)
        except specs.SpecError as exc:
            outcome.result = "refused"
            _write_ready(
                ctx,
                patch,
                status,
                meta,
                Condition(conditions.READY, False, conditions.INVALID_SPEC, str(exc)),
            )
            return
        broker_name = named.broker_name(parsed)
        index: kopf.Index[claims.ClaimKey, claims.Claim] = kwargs[named.index_id]
        winner = claims.owner(
            index.get(claims.ClaimKey(namespace, parsed.cluster, broker_name), [])
        )
        held = status.get(named.held_key)
        owner = winner is None or winner.resource == name
        try:
            endpoint = await contexts.admin_endpoint(ctx, namespace, parsed.cluster)
            described = None
            plan = None
            for _pass in range(named.plan_passes):
                if not (held and held != broker_name) and owner:
                    described = await named.describe(ctx, endpoint, broker_name)
                plan = named.plan(
                    parsed,
                    None if described is None else described[0],
                    held_name=held,
                    winner=winner,
                    resource=name,
                    managed=_flag(meta, resources.MANAGED_ANNOTATION, default=True),
                    paused=_flag(meta, resources.PAUSE_ANNOTATION, default=False),
                )
                if plan.action is None:
                    break
                await named.apply(ctx, endpoint, plan.action, (namespace, parsed.cluster))
                pending.normal(*_step(named, plan.action))
                described = await named.describe(ctx, endpoint, broker_name)
        except BrokerUnavailable as exc:
            _write_ready(
                ctx,
                patch,
                status,
                meta,
                Condition(conditions.READY, False, conditions.BROKER_UNAVAILABLE, str(exc)),
            )
            raise _unavailable(ctx, exc) from None
        except BrokerRefused as exc:
            outcome.result = "refused"
            _write_ready(
                ctx, patch, status, meta, Condition(conditions.READY, False, exc.reason, str(exc))
            )
            return
        assert plan is not None
        if plan.condition.status is not True:
            outcome.result = "refused"
        _write_ready(ctx, patch, status, meta, plan.condition)
        if plan.holds is not None:
            patch.status[named.held_key] = plan.holds
        if described is not None and owner:
            named.write_figures(patch, described)


async def _release_named(
    named: _Named,
    ctx: Context,
    *,
    name: str,
    namespace: str,
    spec: Any,
    status: Any,
    meta: Any,
    pending: events.Pending,
    **kwargs: Any,
) -> None:
    held = status.get(named.held_key)
    try:
        parsed = named.parse(name, spec)
    except specs.SpecError:
        return
    index: kopf.Index[claims.ClaimKey, claims.Claim] = kwargs[named.index_id]
    winner = claims.owner(index.get(claims.ClaimKey(namespace, parsed.cluster, held or ""), []))
    if not topic_planning.should_delete(
        held_name=held,
        managed=_flag(meta, resources.MANAGED_ANNOTATION, default=True),
        is_owner=winner is None or winner.resource == name,
    ):
        return
    if not await _cluster_exists(ctx, namespace, parsed.cluster):
        return  # the brokers are gone with their cluster; nothing to release
    try:
        endpoint = await contexts.admin_endpoint(ctx, namespace, parsed.cluster)
        await named.delete(ctx, endpoint, held)
    except BrokerUnavailable as exc:
        pending.warning(conditions.BROKER_UNAVAILABLE, f"cannot release {held}: {exc}")
        raise _unavailable(ctx, exc) from None
    subject = "topic" if named.kind == resources.TOPIC_KIND else "consumer group"
    pending.normal("Deleted", f"deleted {subject} {held} from the brokers")


def _step(named: _Named, action: Any) -> tuple[str, str]:
    """The Normal event (reason, message) for a broker change the pass made."""
    subject = "topic" if named.kind == resources.TOPIC_KIND else "consumer group"
    created = isinstance(action, (topic_planning.CreateTopic, consumer_group_planning.CreateGroup))
    values = {f.name: getattr(action, f.name) for f in dataclasses.fields(action)}
    settings = ", ".join(
        f"{key}={value.name if isinstance(value, enum.Enum) else value}"
        for key, value in values.items()
        if key != "name" and value is not None
    )
    verb = "Created" if created else "Updated"
    return verb, f"{verb.lower()} {subject} {action.name} on the brokers ({settings})"


async def _apply_topic(ctx: Context, endpoint: str, action: Any, where: tuple[str, str]) -> None:
    """Carry a topic plan out at ``endpoint`` (group 0's leader; the broker fans it out to the
    other groups), scoped while groups drain (:func:`topic_planning.scope_to_serving`)."""
    namespace, cluster = where
    serving, draining = await _broker_groups(ctx, namespace, cluster)
    scoped = topic_planning.scope_to_serving(action, serving, draining)
    if isinstance(scoped, topic_planning.CreateTopic | topic_planning.ScopedCreate):
        create, groups = (
            (scoped, ())
            if isinstance(scoped, topic_planning.CreateTopic)
            else (scoped.create, scoped.groups)
        )
        # AlreadyExists: created meanwhile (by the timer or another pass); describe again instead.
        with contextlib.suppress(brokers.AlreadyExists):
            await ctx.brokers.create_topic(
                endpoint,
                create.name,
                queues=create.queues,
                permission=create.permission,
                message_type=create.message_type,
                broker_groups=[manifests.broker_name(g) for g in groups],
                tier_remote_retention_s=create.tier_remote_retention_s,
            )
        return
    update = scoped if isinstance(scoped, topic_planning.UpdateTopic) else scoped.fanned_out
    if update is not None:
        await ctx.brokers.update_topic(
            endpoint,
            update.name,
            queues=update.queues,
            permission=update.permission,
            message_type=update.message_type,
            tier_remote_retention_s=update.tier_remote_retention_s,
            tier_remote_retention_removed=update.tier_remote_retention_removed,
        )
    if isinstance(scoped, topic_planning.ScopedUpdate) and scoped.permission is not None:
        for group in scoped.groups:  # each serving group alone: the draining ones stay read-only
            leader = endpoint
            if group:
                base = manifests.group_base(cluster, group)
                leader = await contexts.leader_endpoint(ctx, namespace, base)
            await ctx.brokers.set_permission_here(leader, scoped.name, scoped.permission)


async def _broker_groups(ctx: Context, namespace: str, cluster: str) -> tuple[list[int], list[int]]:
    """(serving groups with a leader, draining groups) of ``cluster`` as its status last showed
    them; no draining group when there is no cluster (``where`` empty) or no status yet."""
    if not cluster:
        return [0], []
    try:
        body = await ctx.kube.get(resources.API_VERSION, resources.CLUSTER_KIND, namespace, cluster)
    except KubeError as exc:
        raise BrokerUnavailable(f"reading GannetCluster {namespace}/{cluster}: {exc}") from None
    body = body or {}
    desired = (body.get("spec") or {}).get("brokerGroups", 1)
    rows = (body.get("status") or {}).get("brokerGroups") or []
    return broker_group_planning.groups_of_status(
        int(desired) if isinstance(desired, int) else 1, rows
    )


async def _apply_group(ctx: Context, endpoint: str, action: Any, _where: tuple[str, str]) -> None:
    if isinstance(action, consumer_group_planning.CreateGroup):
        with contextlib.suppress(brokers.AlreadyExists):
            await ctx.brokers.create_group(
                endpoint, action.name, fifo=action.fifo, retry_max_times=action.retry_max_times
            )
    else:
        await ctx.brokers.update_group(
            endpoint,
            action.name,
            fifo=action.fifo,
            retry_max_times=action.retry_max_times,
            consume_enabled=action.consume_enabled,
        )


async def _cluster_exists(ctx: Context, namespace: str, cluster: str) -> bool:
    try:
        found = await ctx.kube.get(
            resources.API_VERSION, resources.CLUSTER_KIND, namespace, cluster
        )
    except KubeError:
        return True  # unknown: assume it exists and try the broker
    return found is not None


NAMED_TOPIC = _Named(
    kind=resources.TOPIC_KIND,
    resource=TOPICS,
    index_id="topic_claims",
    held_key="topicName",
    parse=specs.topic_spec,
    broker_name=lambda parsed: str(parsed.topic_name),
    plan=topic_planning.plan,
    plan_passes=1,
    describe=lambda ctx, endpoint, name: ctx.brokers.describe_topic(endpoint, name),
    apply=_apply_topic,
    delete=lambda ctx, endpoint, name: ctx.brokers.delete_topic(endpoint, name),
    write_figures=_topic_figures,
)
NAMED_GROUP = _Named(
    kind=resources.GROUP_KIND,
    resource=GROUPS,
    index_id="group_claims",
    held_key="groupName",
    parse=specs.group_spec,
    broker_name=lambda parsed: str(parsed.group_name),
    plan=consumer_group_planning.plan,
    plan_passes=2,
    describe=lambda ctx, endpoint, name: ctx.brokers.describe_group(endpoint, name),
    apply=_apply_group,
    delete=lambda ctx, endpoint, name: ctx.brokers.delete_group(endpoint, name),
    write_figures=_group_figures,
)
