"""Membership changes of a GannetCluster, carried out: the IO around
:mod:`gannet.operator.membership_planning`.

Called by :func:`gannet.operator.cluster_handling.reconcile` once per pass, before the
StatefulSet is applied. :func:`advance` reads the roster ConfigMap (:mod:`member_pods`), the pods
and their claims, and ``ListMembers`` from the Raft leader; asks the planner for the next step
and carries it out; and repeats (reading everything again) while steps make progress, at most
:data:`STEPS_PER_PASS` times. It returns the StatefulSet size (the roster's length), the
``Scaling`` condition and the ``status.members`` table.

How a step is carried out (the roster is always written *before* the call it prepares):

- ``Bootstrap``/``Seal``/``Reassign``: write the roster (a new cluster's pods start with
  ``--peers`` of the first members; sealed, every pod starts with ``--join``);
- ``CreatePod``: write the roster with the new pod's key (``--node-id <new id> --join``); the
  StatefulSet then grows by one;
- ``AddLearner``/``Promote``: ``AddMember`` on the leader (``learner_only`` true, then false);
- ``TransferLeadership``: ``TransferLeadership`` on the leaving leader;
- ``RemoveMember``: mark the record leaving, then ``RemoveMember`` on the leader (it returns
  once the removal committed);
- ``DeletePod``: drop the last record (the StatefulSet shrinks by one) and, with
  ``storage.deleteClaim``, delete its claim ``data-<pod>``;
- ``RestartPod``: delete a pod that still runs a replaced node's arguments.

A refusal of the broker (``FAILED_PRECONDITION``: a lagging member, another change in flight)
ends the pass with ``Scaling=False reason=MemberChangeRefused`` and the broker's message; the
planner's own refusals are ``Scaling=False reason=ScaleDownBlocked`` (or ``MemberChangeBlocked``).
Every step taken is a Normal Event; every changed condition becomes an Event through
:func:`gannet.operator.events.from_conditions`. Each step is counted in
``gannet_operator_membership_steps_total{step,result}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gannet.operator import conditions, manifests, member_pods, specs
from gannet.operator import membership_planning as mp
from gannet.operator.brokers import BrokerRefused, BrokerUnavailable
from gannet.operator.conditions import Condition
from gannet.operator.contexts import Context
from gannet.operator.events import Pending

SCALING = "Scaling"
STEPS_PER_PASS = 8
CHANGE_TIMEOUT_S = 60.0  # AddMember (promotion waits for catch-up) and RemoveMember


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    roster: mp.Roster | None
    replicas: int  # what the StatefulSet gets now
    condition: Condition
    members: list[dict[str, Any]]  # status.members
    leader_id: str  # "" unknown
    changing: bool = False  # a member is joining, a learner, leaving or being restarted


async def _read_roster(ctx: Context, namespace: str, cluster: str) -> mp.Roster | None:
    found = await ctx.kube.get("v1", "ConfigMap", namespace, member_pods.config_map_name(cluster))
    return member_pods.decode((found or {}).get("data"))


async def _write_roster(
    ctx: Context,
    namespace: str,
    cluster: str,
    uid: str,
    roster: mp.Roster,
    owner: tuple[str, int] | None = None,
) -> None:
    await ctx.kube.apply(member_pods.config_map(cluster, namespace, uid, roster, owner=owner))


def _claim_name(cluster: str, ordinal: int) -> str:
    return f"data-{manifests.pod_name(cluster, ordinal)}"


async def _pods(
    ctx: Context, namespace: str, cluster: str, spec: specs.ClusterSpec
) -> tuple[mp.PodState, ...]:
    labels = manifests.selector_labels(cluster)
    pods = await ctx.kube.list("v1", "Pod", namespace, labels=labels)
    claims: dict[str, Mapping[str, Any]] = {}
    if spec.storage.type != "ephemeral":
        listed = await ctx.kube.list("v1", "PersistentVolumeClaim", namespace, labels=labels)
        claims = {str((c.get("metadata") or {}).get("name")): c for c in listed}
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        prefix, _, tail = name.rpartition("-")
        if prefix != cluster or not tail.isdigit():
            continue
        ordinal = int(tail)
        uid = str(meta.get("uid") or "")
        volume, lost = uid, False
        if spec.storage.type != "ephemeral":
            claim = claims.get(_claim_name(cluster, ordinal)) or {}
            volume = str((claim.get("metadata") or {}).get("uid") or "")
            lost = (claim.get("status") or {}).get("phase") == "Lost"
        found.append(
            mp.PodState(
                ordinal=ordinal,
                uid=uid,
                up=_running(pod),
                volume=volume,
                volume_lost=lost,
            )
        )
    return tuple(sorted(found, key=lambda p: p.ordinal))


def _running(pod: Mapping[str, Any]) -> bool:
    """Started and not going away. Readiness is not asked for: a broker waiting to be added
    (``--join``) is not ready until it is a member."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") == "Running"


async def _leader_endpoint(
    ctx: Context, namespace: str, cluster: str, roster: mp.Roster | None
) -> tuple[str, str] | None:
    """(leader node id, its admin endpoint), asked of the client Service; None: no leader."""
    client = ctx.endpoints.client(namespace, cluster)
    try:
        view = await ctx.brokers.raft_status(client)
    except (BrokerUnavailable, BrokerRefused):
        return None
    if not view.leader_id:
        return None
    ordinal = member_pods.ordinal_of(roster, view.leader_id)
    return view.leader_id, (
        ctx.endpoints.pod(namespace, cluster, ordinal) if ordinal >= 0 else client
    )


def _members_status(
    cluster: str, roster: mp.Roster | None, group: mp.Group | None
) -> list[dict[str, Any]]:
    if roster is None:
        return []
    rows = []
    for record in roster.records:
        member = None if group is None else group.member(record.node_id)
        if record.leaving:
            role = "leaving"
        elif member is None:
            role = "joining" if group is not None else "unknown"
        else:
            role = "voter" if member.voter else "learner"
        row: dict[str, Any] = {
            "pod": manifests.pod_name(cluster, record.ordinal),
            "nodeId": record.node_id,
            "role": role,
        }
        if member is not None:
            row["lagBytes"] = member.lag_bytes
            row["reachable"] = member.reachable
            row["leader"] = member.leader
        rows.append(row)
    return rows


def _step_name(step: mp.Step) -> str:
    return type(step).__name__


def _describe(cluster: str, step: mp.Step) -> tuple[str, str]:
    """(event reason, message) of a step that was taken."""

    def pod(record: mp.Record) -> str:
        return f"node {record.node_id} (pod {manifests.pod_name(cluster, record.ordinal)})"

    if isinstance(step, mp.Bootstrap):
        ids = ", ".join(r.node_id for r in step.roster.records)
        verb = "adopted the running members" if step.adopted else "bootstrapping a new group"
        return "MembersBootstrapped", f"{verb}: node ids {ids}"
    if isinstance(step, mp.Seal):
        return "MembersSealed", "the group formed; every pod starts with --join from now on"
    if isinstance(step, mp.CreatePod):
        return "PodAdded", f"creating {pod(step.record)} to join the group"
    if isinstance(step, mp.AddLearner):
        return "LearnerAdded", f"added {pod(step.record)} as a learner"
    if isinstance(step, mp.Promote):
        return "MemberPromoted", f"promoted {pod(step.record)} to voter"
    if isinstance(step, mp.TransferLeadership):
        return "LeadershipTransferred", f"moved Raft leadership off {pod(step.away_from)}"
    if isinstance(step, mp.RemoveMember):
        why = "its volume was lost" if step.replace else "scaling down"
        return "MemberRemoved", f"removed {pod(step.record)} from the group ({why})"
    if isinstance(step, mp.DeletePod):
        return "PodRemoved", f"deleting {pod(step.record)}, no longer a member"
    if isinstance(step, mp.Reassign):
        return "MemberReassigned", f"{pod(step.record)} rejoins under the new id"
    if isinstance(step, mp.RestartPod):
        return "PodRestarted", f"restarting {pod(step.record)} with its new node id"
    return _step_name(step), ""


def _condition(cluster: str, step: mp.Step, roster: mp.Roster | None, desired: int) -> Condition:
    if isinstance(step, mp.Done):
        return Condition(SCALING, True, "AtDesiredSize", f"{desired} members")
    if isinstance(step, mp.Blocked):
        reason = "ScaleDownBlocked" if "scale-down" in step.reason else "MemberChangeBlocked"
        return Condition(SCALING, False, reason, step.reason)
    if isinstance(step, mp.Wait):
        size = 0 if roster is None else len(roster.records)
        return Condition(SCALING, True, "Waiting", f"{size} -> {desired} members: {step.reason}")
    return Condition(SCALING, True, _step_name(step), _describe(cluster, step)[1])


async def _carry_out(
    ctx: Context,
    namespace: str,
    cluster: str,
    uid: str,
    spec: specs.ClusterSpec,
    roster: mp.Roster | None,
    step: mp.Step,
    leader: tuple[str, str] | None,
    owner: tuple[str, int] | None = None,
) -> mp.Roster | None:
    """Carry one step out; returns the roster now stored."""
    if isinstance(step, mp.Bootstrap):
        await _write_roster(ctx, namespace, cluster, uid, step.roster, owner)
        return step.roster
    assert roster is not None
    updated = mp.apply(roster, step)
    if updated != roster:
        await _write_roster(ctx, namespace, cluster, uid, updated, owner)
    assert leader is not None or not isinstance(step, mp.MEMBERSHIP_CHANGES)
    if isinstance(step, (mp.AddLearner, mp.Promote)):
        assert leader is not None
        record = step.record
        peer, client = ctx.endpoints.member(namespace, cluster, record.ordinal)
        await ctx.brokers.add_member(
            leader[1],
            record.node_id,
            peer_endpoint=peer,
            client_endpoint=client,
            learner_only=isinstance(step, mp.AddLearner),
            timeout_s=CHANGE_TIMEOUT_S,
        )
    elif isinstance(step, mp.RemoveMember):
        assert leader is not None
        await ctx.brokers.remove_member(leader[1], step.record.node_id, timeout_s=CHANGE_TIMEOUT_S)
    elif isinstance(step, mp.TransferLeadership):
        away = ctx.endpoints.pod(namespace, cluster, step.away_from.ordinal)
        await ctx.brokers.transfer_leadership(away)
    elif isinstance(step, mp.DeletePod):
        if spec.storage.type != "ephemeral" and spec.storage.delete_claim:
            claim = _claim_name(cluster, step.record.ordinal)
            await ctx.kube.delete("v1", "PersistentVolumeClaim", namespace, claim)
    elif isinstance(step, mp.RestartPod):
        await ctx.kube.delete(
            "v1", "Pod", namespace, manifests.pod_name(cluster, step.record.ordinal)
        )
    return updated


async def advance(
    ctx: Context,
    name: str,
    namespace: str,
    uid: str,
    spec: specs.ClusterSpec,
    current_replicas: int | None,
    pending: Pending,
    owner: tuple[str, int] | None = None,
) -> Outcome:
    """Take the membership steps that can be taken now (see the module docstring). ``name``
    is the group's base name (``manifests.group_base``); ``owner`` the GannetCluster's name and
    the group's number when that differs from ``(name, 0)``."""
    try:
        roster = await _read_roster(ctx, namespace, name)
    except member_pods.RosterError as exc:
        condition = Condition(SCALING, False, "RosterUnreadable", str(exc))
        return Outcome(None, current_replicas or 0, condition, [], "")
    group: mp.Group | None = None
    leader: tuple[str, str] | None = None
    step: mp.Step = mp.Done()
    refused: Condition | None = None
    for _ in range(STEPS_PER_PASS):
        pods = await _pods(ctx, namespace, name, spec)
        if roster is not None:
            adopted = mp.with_volumes(roster, pods)
            if adopted != roster:
                await _write_roster(ctx, namespace, name, uid, adopted, owner)
                roster = adopted
        leader = await _leader_endpoint(ctx, namespace, name, roster)
        group = None
        if leader is not None:
            try:
                group = await ctx.brokers.list_members(leader[1])
            except (BrokerUnavailable, BrokerRefused):
                group = None
        observed = mp.Observed(
            desired=spec.replicas,
            roster=roster,
            pods=pods,
            group=group,
            current_replicas=current_replicas,
        )
        step = mp.next_step(observed)
        if isinstance(step, mp.Blocked):
            ctx.metrics.membership_step(_step_name(step), "blocked")
        if isinstance(step, (mp.Done, mp.Wait, mp.Blocked)):
            break
        try:
            roster = await _carry_out(ctx, namespace, name, uid, spec, roster, step, leader, owner)
        except BrokerRefused as exc:
            ctx.metrics.membership_step(_step_name(step), "refused")
            refused = Condition(SCALING, False, "MemberChangeRefused", f"{_step_name(step)}: {exc}")
            break
        except BrokerUnavailable as exc:
            ctx.metrics.membership_step(_step_name(step), "failed")
            refused = Condition(SCALING, False, conditions.BROKER_UNAVAILABLE, str(exc))
            break
        ctx.metrics.membership_step(_step_name(step), "done")
        pending.normal(*_describe(name, step))
    condition = refused or _condition(name, step, roster, spec.replicas)
    replicas = len(roster.records) if roster is not None else (current_replicas or 0)
    leader_id = "" if group is None else group.leader_id
    rows = _members_status(name, roster, group)
    changing = any(r["role"] in ("joining", "learner", "leaving") for r in rows)
    if roster is not None and group is not None:
        changing = changing or any(r.stale_pod for r in roster.records if not r.volume)
    return Outcome(roster, replicas, condition, rows, leader_id, changing)


def leader_pod(name: str, roster: mp.Roster | None, leader_id: str) -> str:
    return member_pods.pod_of_node(name, roster, leader_id)
