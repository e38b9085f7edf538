"""The GannetCluster reconcile: Kubernetes objects, membership, rolling restarts, revive queues
and cleanup — the IO around :mod:`cluster_planning`, :mod:`manifests` and :mod:`schedules`.

Called by the GannetCluster handlers of :mod:`gannet.operator.handlers` (create, update,
resume and the refresh timer). One call is one level-based pass: it takes the membership steps
that can be taken now (:mod:`membership_handling`, which decides the StatefulSet's size),
applies the objects for that size, takes at most one rolling step, pushes the broker settings,
and writes everything it learnt into ``patch.status``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from typing import Any

import kopf

from gannet.operator import (
    broker_group_handling,
    cluster_key,
    cluster_planning,
    conditions,
    contexts,
    events,
    manifests,
    member_pods,
    membership_handling,
    schedules,
    specs,
    tier_planning,
)
from gannet.operator.brokers import BrokerError, BrokerRefused, BrokerUnavailable, Unauthorized
from gannet.operator.conditions import Condition
from gannet.operator.contexts import Context
from gannet.operator.kube import KubeError
from gannet.operator.membership_planning import Roster


async def _leader_view(
    ctx: Context, namespace: str, cluster: str, roster: Roster | None
) -> cluster_planning.RaftView | None:
    """The leader's view of the group, asking the leader itself when another member answered."""
    try:
        view = await ctx.brokers.raft_status(ctx.endpoints.client(namespace, cluster))
        if view.leader_id and view.node_id != view.leader_id:
            leader = member_pods.ordinal_of(roster, view.leader_id)
            if leader >= 0:
                view = await ctx.brokers.raft_status(ctx.endpoints.pod(namespace, cluster, leader))
    except (BrokerUnavailable, BrokerRefused):
        return None
    return view if view.leader_id else None


async def reconcile(
    ctx: Context,
    name: str,
    namespace: str,
    cluster: specs.ClusterSpec,
    status: Mapping[str, Any],
    meta: Mapping[str, Any],
    patch: kopf.Patch,
    pending: events.Pending,
) -> None:
    generation = meta.get("generation")
    uid = str(meta.get("uid") or "")
    security: Condition | None = None
    try:
        await contexts.secure(ctx, namespace, name, cluster)
    except Unauthorized as exc:
        # The objects are still applied; broker calls below report the refusal too.
        security = Condition("BrokerAccess", False, Unauthorized.reason, str(exc))
    sts = await ctx.kube.get("apps/v1", "StatefulSet", namespace, name)
    current = None if sts is None else int(sts.get("spec", {}).get("replicas", 0))
    membership = await membership_handling.advance(
        ctx, name, namespace, uid, cluster, current, pending
    )
    replicas = membership.replicas
    if current is not None and replicas != current:
        pending.normal("Scaled", f"StatefulSet {name}: {current} -> {replicas} replicas")
    if await _ensure_peer_secret(ctx, name, namespace, uid, cluster):
        secret = manifests.peer_secret_name(name, cluster)
        pending.normal("Created", f"created Secret {secret}")
    if await _ensure_cluster_key(ctx, name, namespace, uid, cluster):
        pending.normal("Created", f"created Secret {cluster_key.secret_name(name)}")
    monitoring: Condition | None = None
    certificates: Condition | None = None

    async def apply(obj: Mapping[str, Any]) -> None:
        result = await ctx.kube.apply(obj)
        if result != "unchanged":
            what = f"{obj['kind']} {obj['metadata']['name']}"
            pending.normal(result.capitalize(), f"{result} {what}")

    for obj in manifests.build(name, namespace, uid, cluster, replicas=replicas):
        if obj["kind"] == "Certificate":
            # Needs cert-manager; without its CRD the pods wait for their Secret: say so.
            try:
                await apply(obj)
            except KubeError as exc:
                certificates = Condition("Certificates", False, "CertManagerUnavailable", str(exc))
            else:
                if certificates is None:
                    certificates = Condition(
                        "Certificates", True, conditions.RECONCILED, "Certificates applied"
                    )
            continue
        if obj["kind"] != "ServiceMonitor":
            await apply(obj)
            continue
        # Optional: without prometheus-operator the brokers still run; say so in a condition.
        try:
            await apply(obj)
            monitoring = Condition(
                "Monitoring", True, conditions.RECONCILED, "ServiceMonitor applied"
            )
        except KubeError as exc:
            monitoring = Condition("Monitoring", False, "ServiceMonitorUnavailable", str(exc))
    sts = await ctx.kube.get("apps/v1", "StatefulSet", namespace, name) or {}
    sts_status = sts.get("status") or {}
    ready = int(sts_status.get("readyReplicas") or 0)
    found = list(status.get("conditions") or ())
    found = conditions.merge(found, membership.condition, generation=generation, now=ctx.clock())
    if monitoring is not None:
        found = conditions.merge(found, monitoring, generation=generation, now=ctx.clock())
    if certificates is not None:
        found = conditions.merge(found, certificates, generation=generation, now=ctx.clock())
    if cluster.security.tls.enabled or cluster.security.auth.operator_credentials_secret:
        found = conditions.merge(
            found,
            security or Condition("BrokerAccess", True, conditions.RECONCILED, "Secrets read"),
            generation=generation,
            now=ctx.clock(),
        )

    # Rolling restarts, one pod per pass, leader last, never during a membership change.
    leader = await _leader_view(ctx, namespace, name, membership.roster)
    leader_pod = (
        None
        if leader is None
        else member_pods.pod_of_node(name, membership.roster, leader.leader_id)
    )
    step: cluster_planning.RollStep
    if membership.changing:
        # A restart now would take a member down while the configuration changes.
        step = cluster_planning.Wait("waiting for the membership change to finish")
    else:
        step = await _roll(ctx, name, namespace, sts, replicas, leader_pod)
    if isinstance(step, cluster_planning.DeletePod):
        pending.normal("PodRestarted", f"deleted pod {step.name} to roll it to the new revision")
    elif isinstance(step, cluster_planning.TransferLeadership):
        pending.normal(
            "LeadershipTransferred", f"asked {step.away_from} to hand Raft leadership over"
        )
    found = conditions.merge(
        found, cluster_planning.roll_condition(step), generation=generation, now=ctx.clock()
    )

    # Broker-side settings: revive-queue count, cleanup policy and schedule.
    settings_condition = await _broker_settings(
        ctx, name, namespace, cluster, status, patch, replicas, pending
    )
    found = conditions.merge(found, settings_condition, generation=generation, now=ctx.clock())

    async def roll(
        base: str, group_sts: Mapping[str, Any], size: int, leader: str | None
    ) -> cluster_planning.RollStep:
        step = await _roll(ctx, base, namespace, group_sts, size, leader)
        if isinstance(step, cluster_planning.DeletePod):
            pending.normal(
                "PodRestarted", f"deleted pod {step.name} to roll it to the new revision"
            )
        return step

    # Tiered storage: each group's leader says how its offload goes (Events on changes).
    found = await _tier(ctx, name, namespace, cluster, found, generation, status, patch)

    rows, groups_condition = await broker_group_handling.reconcile(
        ctx, name, namespace, uid, cluster, membership, ready, pending, roll
    )
    if groups_condition is not None:
        found = conditions.merge(found, groups_condition, generation=generation, now=ctx.clock())
    found = conditions.merge(
        found,
        cluster_planning.ready_condition(desired=replicas, ready=ready, groups=rows),
        generation=generation,
        now=ctx.clock(),
    )
    patch.status["brokerGroups"] = rows
    patch.status["conditions"] = found
    patch.status["observedGeneration"] = generation
    patch.status["replicas"] = replicas
    patch.status["members"] = membership.members
    if membership.roster is not None:
        patch.status["nextNodeId"] = membership.roster.next_node_id
    patch.status["readyReplicas"] = ready
    patch.status["selector"] = manifests.selector_text(name)
    patch.status["clientEndpoint"] = manifests.client_endpoint(name, namespace)
    if leader is not None and leader_pod is not None:
        patch.status["leader"] = leader_pod
        patch.status["term"] = leader.term


async def _ensure_peer_secret(
    ctx: Context, name: str, namespace: str, uid: str, cluster: specs.ClusterSpec
) -> bool:
    """Create the generated peer secret once (``manifests.peer_secret_name``); a Secret named
    in the spec is the user's to create (the pods wait for it). True when it was created."""
    secret = manifests.peer_secret_name(name, cluster)
    if secret is None or cluster.security.peer_secret is not None:
        return False
    if await ctx.kube.get("v1", "Secret", namespace, secret) is not None:
        return False
    token = secrets.token_urlsafe(32)
    await ctx.kube.apply(manifests.generated_peer_secret(name, namespace, uid, token))
    return True


async def _ensure_cluster_key(
    ctx: Context, name: str, namespace: str, uid: str, cluster: specs.ClusterSpec
) -> bool:
    """Create the cluster key Secret once when auth is on (``cluster_key``); an existing one
    is kept (the members read it at start). True when it was created."""
    if not cluster_key.needed(cluster):
        return False
    if await ctx.kube.get("v1", "Secret", namespace, cluster_key.secret_name(name)) is not None:
        return False
    token = secrets.token_urlsafe(32)
    await ctx.kube.apply(manifests.generated_cluster_key(name, namespace, uid, token))
    return True


async def _roll(
    ctx: Context,
    name: str,
    namespace: str,
    sts: Mapping[str, Any],
    replicas: int,
    leader_pod: str | None,
) -> cluster_planning.RollStep:
    update_revision = (sts.get("status") or {}).get("updateRevision")
    if not update_revision:
        return cluster_planning.Done()
    pods = await ctx.kube.list("v1", "Pod", namespace, labels=manifests.selector_labels(name))
    views = [_pod_view(pod) for pod in pods]
    step = cluster_planning.next_roll_step(
        views,
        update_revision=update_revision,
        replicas=replicas,
        leader_pod=leader_pod,
    )
    if isinstance(step, cluster_planning.TransferLeadership):
        with contextlib.suppress(BrokerUnavailable, BrokerRefused):
            away = cluster_planning.ordinal(step.away_from)
            await ctx.brokers.transfer_leadership(ctx.endpoints.pod(namespace, name, away))
    elif isinstance(step, cluster_planning.DeletePod):
        await ctx.kube.delete("v1", "Pod", namespace, step.name)
    return step


def _pod_view(pod: Mapping[str, Any]) -> cluster_planning.PodView:
    meta = pod.get("metadata") or {}
    pod_conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod_conditions)
    return cluster_planning.PodView(
        name=str(meta.get("name")),
        revision=str((meta.get("labels") or {}).get("controller-revision-hash", "")),
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
    )


async def _tier(
    ctx: Context,
    name: str,
    namespace: str,
    cluster: specs.ClusterSpec,
    found: list[dict[str, Any]],
    generation: Any,
    status: Mapping[str, Any],
    patch: kopf.Patch,
) -> list[dict[str, Any]]:
    """``found`` with the ``TierOffload`` condition (:mod:`tier_planning`) of the leaders'
    ``GetTierStatus`` answers, and ``status.tier``; without ``spec.tier`` both are dropped."""
    if cluster.tier is None:
        if status.get("tier") is not None:
            patch.status["tier"] = None  # the merge patch removes it
        return [c for c in found if c.get("type") != tier_planning.TIER_OFFLOAD]
    views: dict[str, tier_planning.TierView | None] = {}
    for group in range(cluster.broker_groups):
        base = manifests.group_base(name, group)
        try:
            endpoint = await contexts.leader_endpoint(ctx, namespace, base)
            views[manifests.broker_name(group)] = await ctx.brokers.tier_status(endpoint)
        except BrokerError:  # unreachable, refused, or a broker from before GetTierStatus
            views[manifests.broker_name(group)] = None
    patch.status["tier"] = {"groups": tier_planning.status_rows(views)}
    previous = conditions.find(found, tier_planning.TIER_OFFLOAD)
    condition = tier_planning.tier_condition(views, previous)
    if condition is None:
        return found
    return conditions.merge(found, condition, generation=generation, now=ctx.clock())


async def _broker_settings(
    ctx: Context,
    name: str,
    namespace: str,
    cluster: specs.ClusterSpec,
    status: Mapping[str, Any],
    patch: kopf.Patch,
    replicas: int,
    pending: events.Pending,
) -> Condition:
    try:
        client = await contexts.admin_endpoint(ctx, namespace, name, cluster)  # Pop: the leader
    except Unauthorized as exc:
        return Condition("BrokerSettings", False, Unauthorized.reason, str(exc))
    problems: list[str] = []
    try:
        revive = await ctx.brokers.revive_queues(client)
        change = cluster_planning.revive_change(cluster.revive_queue_count, revive)
        if change is not None:
            before = revive.active_count
            revive = await ctx.brokers.set_revive_queue_count(client, change)
            pending.normal("ReviveQueuesChanged", f"revive queues: {before} -> {change}")
        patch.status["reviveQueues"] = {
            "active": revive.active_count,
            "draining": list(revive.draining),
        }
    except (BrokerUnavailable, BrokerRefused) as exc:
        problems.append(f"revive queues: {exc}")
    problems.extend(await _cleanup(ctx, name, namespace, cluster, status, patch, replicas, pending))
    if problems:
        return Condition(
            "BrokerSettings", False, conditions.BROKER_UNAVAILABLE, "; ".join(problems)
        )
    return Condition(
        "BrokerSettings", True, conditions.RECONCILED, "revive queues and cleanup applied"
    )


async def _cleanup(
    ctx: Context,
    name: str,
    namespace: str,
    cluster: specs.ClusterSpec,
    status: Mapping[str, Any],
    patch: kopf.Patch,
    replicas: int,
    pending: events.Pending,
) -> list[str]:
    """Apply the cleanup policy on every member, and run a cleanup when the schedule is due."""
    recorded = status.get("cleanup") or {}
    now = ctx.clock()
    decision = schedules.decide(
        cluster.cleanup.schedule,
        now=now,
        next_run=schedules.parse_time(recorded.get("nextRunTime")),
    )
    problems: list[str] = []
    files = freed = answered = 0
    for ordinal in range(replicas):
        endpoint = ctx.endpoints.pod(namespace, name, ordinal)
        try:
            run = await ctx.brokers.cleanup(endpoint, cluster.cleanup, trigger=decision.run)
        except (BrokerUnavailable, BrokerRefused) as exc:
            problems.append(f"cleanup on {manifests.pod_name(name, ordinal)}: {exc}")
            continue
        answered += 1
        if run is not None:
            files += run.files_deleted
            freed += run.bytes_freed
    section: dict[str, Any] = {
        "nextRunTime": None
        if decision.next_run is None
        else conditions.timestamp(decision.next_run)
    }
    if decision.run:
        pending.normal(
            "CleanupRun",
            f"scheduled cleanup on {answered} of {replicas} brokers: {files} files, "
            f"{freed} bytes freed",
        )
        section.update(
            lastRunTime=conditions.timestamp(now),
            lastRunFilesDeleted=files,
            lastRunBytesFreed=freed,
            lastRunBrokers=answered,
            lastRunErrors=problems[:9],
        )
    patch.status["cleanup"] = section
    return problems
