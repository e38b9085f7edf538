"""Broker groups of a GannetCluster beyond group 0: their objects, grow and drain — the IO
around :mod:`gannet.operator.broker_group_planning`.

Called by :func:`gannet.operator.cluster_handling.reconcile` once per pass, after group 0 (the
cluster's original StatefulSet, whose names never change) was reconciled. For a cluster that
has never had more than one group it only writes ``status.brokerGroups`` from what the pass
already knows (no broker call, no object). Otherwise, per pass:

1. every group ``1 .. N-1`` with a StatefulSet or wanted by ``spec.brokerGroups`` takes its
   membership steps (:mod:`membership_handling`, on the group's own roster
   ``<cluster>-g<g>-members``) and gets its objects applied
   (:func:`broker_group_manifests.group_objects`);
   a wanted group whose StatefulSet is gone but whose claims remain is not recreated
   (``BrokerGroups=False reason=StaleGroupData``: a new group on an old Raft log);
2. the seeds ConfigMap ``<cluster>-groups`` is applied and every member whose seeds differ is
   sent ``SetClusterSeeds`` (each group knows every other group that exists, draining ones
   included, so consumers still find the draining queues);
3. each group's leader is asked for its topics and consumer groups; a serving group missing
   some gets them created there alone (a grown group's queues appear in every route);
4. each draining group takes its next drain step; a drained one is first forgotten by every
   other member (``SetClusterSeeds`` without it), then its objects are deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gannet.operator import (
    broker_group_manifests,
    cluster_planning,
    conditions,
    manifests,
    member_pods,
    membership_handling,
)
from gannet.operator import broker_group_planning as bgp
from gannet.operator.brokers import BrokerRefused, BrokerUnavailable
from gannet.operator.conditions import Condition
from gannet.operator.contexts import Context
from gannet.operator.events import Pending
from gannet.operator.kube import KubeError
from gannet.operator.specs import ClusterSpec

BROKER_GROUPS = "BrokerGroups"

Roll = Callable[[str, Mapping[str, Any], int, str | None], Awaitable[cluster_planning.RollStep]]
"""``cluster_handling``'s rolling step for one group: (base name, StatefulSet, replicas, leader
pod) -> the step taken."""


@dataclasses.dataclass(slots=True)
class _Group:
    """What one pass knows of one group."""

    group: int
    draining: bool
    replicas: int
    ready: int = 0
    leader_pod: str = ""
    leader_endpoint: str = ""
    member_pods: tuple[str, ...] = ()
    lag_bytes: int = 0
    state: bgp.GroupState | None = None
    phase: str = "Creating"
    message: str = ""
    drain_lag: int = 0
    drain_unconsumed: int = 0  # messages of topics no consumer group has consumed
    view: tuple[float, str] | None = None  # group 0's view of it: (age in s, last poll error)
    problems: list[str] = dataclasses.field(default_factory=list)


def _outcome_facts(
    ctx: Context, namespace: str, base: str, outcome: membership_handling.Outcome
) -> tuple[str, str, tuple[str, ...], int]:
    """(leader pod, leader admin endpoint, member pods, largest member lag) of one group."""
    pods = tuple(str(r["pod"]) for r in outcome.members)
    lag = max((int(r.get("lagBytes") or 0) for r in outcome.members), default=0)
    if not outcome.leader_id:
        return "", "", pods, lag
    ordinal = member_pods.ordinal_of(outcome.roster, outcome.leader_id)
    if ordinal < 0:
        return "", ctx.endpoints.client(namespace, base), pods, lag
    return (
        manifests.pod_name(base, ordinal),
        ctx.endpoints.pod(namespace, base, ordinal),
        pods,
        lag,
    )


async def _existing_groups(ctx: Context, namespace: str, name: str) -> list[int]:
    """Group numbers >= 1 that have a StatefulSet."""
    found = await ctx.kube.list(
        "apps/v1", "StatefulSet", namespace, labels={manifests.CLUSTER_LABEL: name}
    )
    groups = []
    for sts in found:
        label = ((sts.get("metadata") or {}).get("labels") or {}).get(manifests.GROUP_LABEL, "")
        if label.isdigit() and int(label) >= 1:
            groups.append(int(label))
    return sorted(groups)


async def _stale_claims(ctx: Context, namespace: str, base: str) -> list[str]:
    claims = await ctx.kube.list("v1", "PersistentVolumeClaim", namespace)
    prefix = f"data-{base}-"
    names = [str((c.get("metadata") or {}).get("name") or "") for c in claims]
    return sorted(n for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit())


async def _read_state(ctx: Context, g: _Group, *, offsets: bool) -> None:
    if not g.leader_endpoint:
        g.state = bgp.GroupState(g.group, "")
        return
    try:
        topics, groups = await ctx.brokers.group_definitions(g.leader_endpoint)
        if not offsets:
            g.state = bgp.GroupState(g.group, g.leader_endpoint, topics, groups)
            return
        found = await ctx.brokers.group_offsets(
            g.leader_endpoint, [c.name for c in groups], [t.name for t in topics]
        )
    except (BrokerUnavailable, BrokerRefused) as exc:
        g.state = bgp.GroupState(g.group, "")
        g.message = str(exc)
        return
    g.state = bgp.GroupState(
        g.group,
        g.leader_endpoint,
        topics,
        groups,
        found.subscriptions,
        found.lag,
        found.messages,
        found.undelivered,
        found.pops,
    )


async def _sync_seeds(
    ctx: Context,
    namespace: str,
    name: str,
    known: Sequence[_Group],
    pending: Pending,
) -> list[str]:
    """Send ``SetClusterSeeds`` to every member of ``known`` whose seeds differ from the other
    known groups' client Services. Returns problems (members that did not answer)."""
    problems: list[str] = []
    numbers = [g.group for g in known]
    for g in known:
        base = manifests.group_base(name, g.group)
        want = sorted(
            ctx.endpoints.client(namespace, manifests.group_base(name, other))
            for other in numbers
            if other != g.group
        )
        for ordinal in range(g.replicas):
            endpoint = ctx.endpoints.pod(namespace, base, ordinal)
            try:
                _, seeds = await ctx.brokers.cluster_view(endpoint)
                if sorted(seeds) != want:
                    await ctx.brokers.set_cluster_seeds(endpoint, want)
                    pending.normal(
                        "ClusterSeedsSet",
                        f"{manifests.pod_name(base, ordinal)}: seeds {', '.join(want) or '(none)'}",
                    )
            except (BrokerUnavailable, BrokerRefused) as exc:
                problems.append(f"seeds of {manifests.pod_name(base, ordinal)}: {exc}")
    return problems


async def _views(ctx: Context, zero: _Group, known: Sequence[_Group]) -> None:
    """How group 0's leader sees every other group (``GetClusterView``: the age of its view and
    the last poll error), for ``status.brokerGroups[].viewAgeSeconds``/``viewError``."""
    if not zero.leader_endpoint:
        return
    try:
        views, _ = await ctx.brokers.cluster_view(zero.leader_endpoint)
    except (BrokerUnavailable, BrokerRefused):
        return
    by_name = {broker: (age, error) for broker, age, error in views}
    for g in known:
        if g.group != 0:
            g.view = by_name.get(manifests.broker_name(g.group), (-1.0, "not known to broker-0"))


async def _delete_group(ctx: Context, namespace: str, name: str, group: int) -> None:
    for api_version, kind, obj in broker_group_manifests.group_object_keys(name, group):
        try:
            await ctx.kube.delete(api_version, kind, namespace, obj)
        except KubeError as exc:
            if exc.status != 404:
                raise


async def _settings(
    ctx: Context, cluster: ClusterSpec, g: _Group, pods: Sequence[str], pending: Pending
) -> list[str]:
    """The revive-queue count at a group's leader and the cleanup policy on each of its
    members ``pods`` (group 0's: :func:`cluster_handling._broker_settings`; scheduled cleanup
    runs there only)."""
    broker = manifests.broker_name(g.group)
    try:
        revive = await ctx.brokers.revive_queues(g.leader_endpoint)
        change = cluster_planning.revive_change(cluster.revive_queue_count, revive)
        if change is not None:
            await ctx.brokers.set_revive_queue_count(g.leader_endpoint, change)
            pending.normal(
                "ReviveQueuesChanged", f"{broker}: revive queues {revive.active_count} -> {change}"
            )
        for pod in pods:
            await ctx.brokers.cleanup(pod, cluster.cleanup, trigger=False)
    except (BrokerUnavailable, BrokerRefused) as exc:
        return [f"settings of {broker}: {exc}"]
    return []


def _row(name: str, namespace: str, g: _Group) -> dict[str, Any]:
    base = manifests.group_base(name, g.group)
    row: dict[str, Any] = {}
    if g.view is not None:
        row = {"viewAgeSeconds": round(g.view[0], 1), "viewError": g.view[1][:240]}
    return {
        **row,
        "group": g.group,
        "brokerName": manifests.broker_name(g.group),
        "statefulSet": base,
        "clientEndpoint": manifests.client_endpoint(base, namespace),
        "phase": g.phase,
        "leader": g.leader_pod,
        "readyReplicas": g.ready,
        "members": list(g.member_pods),
        "lagBytes": g.lag_bytes,
        "drainLag": g.drain_lag,
        "drainUnconsumed": g.drain_unconsumed,
        "message": g.message,
    }


async def _group(
    ctx: Context,
    name: str,
    namespace: str,
    uid: str,
    cluster: ClusterSpec,
    number: int,
    pending: Pending,
    roll: Roll | None,
) -> _Group | Condition:
    """Membership, objects, rolling step and settings of group ``number`` >= 1; a Condition
    when the group cannot be made (another cluster's name, stale claims)."""
    base = manifests.group_base(name, number)
    broker = manifests.broker_name(number)
    sts = await ctx.kube.get("apps/v1", "StatefulSet", namespace, base)
    other = broker_group_manifests.foreign_owner(sts, uid)
    if other is not None:
        return Condition(
            BROKER_GROUPS,
            False,
            "NameConflict",
            f"{broker} needs StatefulSet {base}, which belongs to {other}; rename one of the "
            "two clusters",
        )
    if sts is None and (stale := await _stale_claims(ctx, namespace, base)):
        return Condition(
            BROKER_GROUPS,
            False,
            "StaleGroupData",
            f"{broker} is not created: claims {', '.join(stale)} of an earlier group of that "
            "number remain (a new group would start on its old Raft log); delete them to "
            "create it",
        )
    current = None if sts is None else int((sts.get("spec") or {}).get("replicas", 0))
    outcome = await membership_handling.advance(
        ctx, base, namespace, uid, cluster, current, pending, owner=(name, number)
    )
    for obj in broker_group_manifests.group_objects(
        name, namespace, uid, cluster, group=number, replicas=outcome.replicas
    ):
        result = await ctx.kube.apply(obj)
        if result != "unchanged":
            obj_name = f"{obj['kind']} {obj['metadata']['name']}"
            pending.normal(result.capitalize(), f"{result} {obj_name}")
    found = await ctx.kube.get("apps/v1", "StatefulSet", namespace, base) or {}
    g = _Group(number, number >= cluster.broker_groups, outcome.replicas)
    g.ready = int((found.get("status") or {}).get("readyReplicas") or 0)
    g.leader_pod, g.leader_endpoint, g.member_pods, g.lag_bytes = _outcome_facts(
        ctx, namespace, base, outcome
    )
    g.phase = "Draining" if g.draining else ("Serving" if g.leader_pod else "Creating")
    if roll is not None and not outcome.changing and found:
        # Same rule as group 0: one pod per pass, leader last, never mid-change.
        rolled = await roll(base, found, outcome.replicas, g.leader_pod or None)
        if isinstance(rolled, cluster_planning.Wait):
            g.message = rolled.reason
    if g.leader_endpoint:
        pods = [ctx.endpoints.pod(namespace, base, i) for i in range(outcome.replicas)]
        g.problems += await _settings(ctx, cluster, g, pods, pending)
    return g


async def _grow(ctx: Context, known: Sequence[_Group], pending: Pending) -> list[str]:
    """Every serving group holds every definition the others hold, and the topic permissions
    of group 0 (a drain undone). Returns problems."""
    problems: list[str] = []
    serving = [g.state for g in known if not g.draining and g.state is not None]
    zero = next((g.state for g in known if g.group == 0 and g.state), bgp.GroupState(0, ""))
    for g in known:
        if g.draining or g.state is None:
            continue
        broker = manifests.broker_name(g.group)
        missing = bgp.missing_definitions(g.state, serving)
        restore = bgp.permissions_to_restore(g.state, zero)
        try:
            if missing is not None:
                for topic in missing.topics:
                    await ctx.brokers.create_topic_here(g.leader_endpoint, topic)
                for group in missing.groups:
                    await ctx.brokers.create_group_here(g.leader_endpoint, group)
                what = [t.name for t in missing.topics] + [c.name for c in missing.groups]
                pending.normal("GroupDefinitionsCreated", f"{broker}: created {', '.join(what)}")
            for topic, permission in restore:
                await ctx.brokers.set_permission_here(g.leader_endpoint, topic.name, permission)
            if restore:
                restored = ", ".join(f"{t.name} {p.name}" for t, p in restore)
                pending.normal("GroupServing", f"{broker}: {restored} again")
        except (BrokerUnavailable, BrokerRefused) as exc:
            problems.append(f"definitions on {broker}: {exc}")
    return problems


async def _drain(
    ctx: Context, known: Sequence[_Group], pending: Pending
) -> tuple[list[int], list[str], list[str]]:
    """One drain step per draining group, highest first: (groups drained, what is waited
    for, problems)."""
    states = [g.state for g in known if g.state is not None]
    deleted: list[int] = []
    waiting: list[str] = []
    problems: list[str] = []
    for g in sorted((g for g in known if g.draining), key=lambda g: -g.group):
        assert g.state is not None
        broker = manifests.broker_name(g.group)
        step = bgp.drain_step(g.state, states)
        if isinstance(step, bgp.MakeReadOnly):
            try:
                for topic in step.topics:
                    await ctx.brokers.set_permission_here(
                        g.leader_endpoint, topic.name, bgp.read_only(topic.permission)
                    )
            except (BrokerUnavailable, BrokerRefused) as exc:
                problems.append(f"read-only on {broker}: {exc}")
                continue
            names = ", ".join(t.name for t in step.topics)
            pending.normal("GroupDraining", f"{broker}: topics {names} read-only there")
            g.message = f"draining {broker}: topics {names} made read-only"
            waiting.append(g.message)
        elif isinstance(step, bgp.WaitForLeader):
            g.message = f"draining {broker}: waiting for a leader to read its lag {g.message}"
            waiting.append(g.message.strip())
        elif isinstance(step, bgp.WaitForLag):
            g.drain_lag, g.drain_unconsumed = step.total, step.unconsumed_total
            g.message = step.message(broker)
            waiting.append(g.message)
        else:
            deleted.append(g.group)
    return deleted, waiting, problems


def _condition(
    known: Sequence[_Group], blocked: Condition | None, waiting: list[str], problems: list[str]
) -> Condition:
    if blocked is not None:
        return blocked
    if waiting:
        return Condition(BROKER_GROUPS, False, "Draining", "; ".join(waiting))
    unled = [manifests.broker_name(g.group) for g in known if not g.leader_pod]
    if unled:  # a group still starting: its members not answering is expected
        return Condition(
            BROKER_GROUPS, False, "WaitingForLeader", f"no leader yet in {', '.join(unled)}"
        )
    if problems:
        return Condition(BROKER_GROUPS, False, conditions.BROKER_UNAVAILABLE, "; ".join(problems))
    return Condition(
        BROKER_GROUPS, True, conditions.RECONCILED, f"{len(known)} broker group(s) serving"
    )


async def reconcile(
    ctx: Context,
    name: str,
    namespace: str,
    uid: str,
    cluster: ClusterSpec,
    first: membership_handling.Outcome,
    first_ready: int,
    pending: Pending,
    roll: Roll | None = None,
) -> tuple[list[dict[str, Any]], Condition | None]:
    """One pass over the groups (module docstring): ``status.brokerGroups`` and the
    ``BrokerGroups`` condition (None for a cluster that has only ever had one group)."""
    zero = _Group(0, False, first.replicas, first_ready, phase="Serving")
    zero.leader_pod, zero.leader_endpoint, zero.member_pods, zero.lag_bytes = _outcome_facts(
        ctx, namespace, name, first
    )
    existing = await _existing_groups(ctx, namespace, name)
    if cluster.broker_groups == 1 and not existing:
        return [_row(name, namespace, zero)], None
    known: list[_Group] = [zero]
    blocked: Condition | None = None
    for number in sorted(set(existing) | set(range(1, cluster.broker_groups))):
        made = await _group(ctx, name, namespace, uid, cluster, number, pending, roll)
        if isinstance(made, Condition):
            blocked = made
        else:
            known.append(made)
    problems = [p for g in known for p in g.problems]

    total = max(g.group for g in known) + 1
    await ctx.kube.apply(broker_group_manifests.groups_config_map(name, namespace, uid, total))
    draining_any = any(g.draining for g in known)
    for g in known:
        await _read_state(ctx, g, offsets=draining_any)
    problems += await _grow(ctx, known, pending)
    deleted, waiting, drain_problems = await _drain(ctx, known, pending)
    problems += drain_problems
    if deleted:
        # The others forget the drained groups first (they leave the routes), then they go.
        remaining = [g for g in known if g.group not in deleted]
        seed_problems = await _sync_seeds(ctx, namespace, name, remaining, pending)
        if seed_problems:
            problems += seed_problems
            waiting.append(f"draining: waiting for every member to forget {deleted}")
        else:
            for number in deleted:
                await _delete_group(ctx, namespace, name, number)
                pending.normal(
                    "GroupDeleted",
                    f"{manifests.broker_name(number)} drained (lag 0) and its objects deleted",
                )
            known = remaining
            total = max(g.group for g in known) + 1
            await ctx.kube.apply(
                broker_group_manifests.groups_config_map(name, namespace, uid, total)
            )
    else:
        problems += await _sync_seeds(ctx, namespace, name, known, pending)

    await _views(ctx, zero, known)
    rows = [_row(name, namespace, g) for g in sorted(known, key=lambda g: g.group)]
    return rows, _condition(known, blocked, waiting, problems)
