"""The internals dashboards: Pop and revive, Raft replication, Storage and cleanup (broker
expressions filter on ``cluster`` and ``broker``, the broker group) and the Operator (its own
metrics, no broker labels).

Called by :func:`deploy.dashboards.build.dashboards`; the look is :mod:`deploy.dashboards.kit`.
"""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from deploy.dashboards.kit import MSGS, MSGS_COUNT, OPS, Row, dashboard, p, row, t
from deploy.dashboards.traffic import RI, C, quantile


def pop() -> models.Dashboard:
    main = row(
        "Pop",
        (
            p(
                "Checkpoints in memory",
                "Pop checkpoints tracked until their revive time, and those held only in "
                "memory (buffer merge: not yet written to the revive queue).",
                "none",
                t(
                    f"sum by (instance) (gannet_pop_checkpoints_tracked{{{C}}})",
                    "tracked {{instance}}",
                ),
                t(
                    f"sum by (instance) (gannet_pop_checkpoints_buffered{{{C}}})",
                    "buffered {{instance}}",
                ),
            ),
            p(
                "Checkpoints never written",
                "Checkpoints fully acked in memory before they had to be written, per second "
                "(the write traffic buffer merge saves).",
                OPS,
                t(
                    "sum by (instance) (rate(gannet_pop_checkpoints_dropped_without_write_total"
                    f"{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Long polls waiting",
                "ReceiveMessage calls waiting for a message (the Pop request queue).",
                "none",
                t(f"sum by (instance) (gannet_pop_poll_waiters{{{C}}})", "{{instance}}"),
            ),
            p(
                "Offset queues",
                "Queues with pops waiting for their consumer offset to be committed.",
                "none",
                t(f"sum by (instance) (gannet_pop_offset_queues{{{C}}})", "{{instance}}"),
            ),
        ),
    )
    revive = row(
        "Revive",
        (
            p(
                "Revive in",
                "Checkpoint and ack messages delivered into each revive queue per second.",
                MSGS,
                t(
                    f"sum by (queue) (rate(gannet_pop_revive_in_messages_total{{{C}}}[{RI}]))",
                    "queue {{queue}}",
                ),
            ),
            p(
                "Revive out",
                "Messages revive wrote back per second: retry topic, DLQ, or re-put.",
                MSGS,
                t(
                    f"sum by (result) (rate(gannet_pop_revive_out_messages_total{{{C}}}[{RI}]))",
                    "{{result}}",
                ),
                stack=True,
            ),
            p(
                "Revive lag (messages)",
                "Revive-queue messages not yet handled, by revive queue.",
                MSGS_COUNT,
                t(f"max by (queue) (gannet_pop_revive_lag_messages{{{C}}})", "queue {{queue}}"),
            ),
            p(
                "Revive lag (time)",
                "Age of the oldest unhandled revive-queue message: how late redelivery runs.",
                "s",
                t(f"max by (queue) (gannet_pop_revive_lag_seconds{{{C}}})", "queue {{queue}}"),
            ),
            p(
                "Ack latency",
                "p99 time to answer AckMessage and ChangeInvisibleDuration.",
                "s",
                t(quantile(0.99, "AckMessage"), "AckMessage p99"),
            ),
        ),
    )
    return dashboard(
        "gannet-pop",
        "Gannet / Pop and revive",
        "Pop consumption internals: in-memory checkpoints, long polls and revive queues.",
        (main, revive),
    )


def raft() -> models.Dashboard:
    main = row(
        "Raft",
        (
            p(
                "Role",
                "1 for each node's current Raft role.",
                "none",
                t(
                    f"max by (instance, role) (gannet_raft_role{{{C}}}) == 1",
                    "{{instance}} {{role}}",
                ),
                kind="table",
            ),
            p(
                "Term",
                "Current Raft term per node; a climbing term means repeated elections.",
                "none",
                t(f"max by (instance) (gannet_raft_term{{{C}}})", "{{instance}}"),
            ),
            p(
                "Commit offset",
                "Commit-log offset durable on a majority, per node.",
                "bytes",
                t(f"max by (instance) (gannet_raft_commit_offset_bytes{{{C}}})", "{{instance}}"),
            ),
            p(
                "Replication rate",
                "Committed bytes per second (the leader's commit offset growth).",
                "Bps",
                t(
                    f"max by (instance) (rate(gannet_raft_commit_offset_bytes{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Follower lag",
                "Bytes each follower is behind the leader's log (the leader's view).",
                "bytes",
                t(f"max by (peer) (gannet_raft_follower_lag_bytes{{{C}}})", "{{peer}}"),
            ),
            p(
                "Elections and leader changes",
                "Elections started and leader changes seen per hour.",
                "none",
                t(f"sum(increase(gannet_raft_elections_total{{{C}}}[1h]))", "elections"),
                t(f"sum(increase(gannet_raft_leader_changes_total{{{C}}}[1h]))", "leader changes"),
            ),
            p(
                "Unreachable followers",
                "Followers the leader cannot reach on the peer port.",
                "none",
                t(f"count(gannet_raft_peer_reachable{{{C}}} == 0) or vector(0)", "unreachable"),
                kind="stat",
            ),
        ),
    )
    return dashboard(
        "gannet-raft",
        "Gannet / Raft replication",
        "Leadership, terms, commit progress and follower lag of the Raft group.",
        (main,),
    )


def storage() -> models.Dashboard:
    main = row(
        "Store",
        (
            p(
                "Commit-log size",
                "Disk taken by the (preallocated) commit-log files, per broker.",
                "bytes",
                t(f"max by (instance) (gannet_store_commitlog_size_bytes{{{C}}})", "{{instance}}"),
            ),
            p(
                "Write rate",
                "Commit-log bytes appended per second (records, not bodies).",
                "Bps",
                t(
                    f"max by (instance) (rate(gannet_store_max_offset_bytes{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Disk used vs thresholds",
                "Partition usage against the warning (writes refused) and clean-forcibly "
                "(early deletion) ratios.",
                "percentunit",
                t(f"max by (instance) (gannet_store_disk_used_ratio{{{C}}})", "used {{instance}}"),
                t(f"max(gannet_store_disk_warning_ratio{{{C}}})", "warning"),
                t(f"max(gannet_store_disk_clean_forcibly_ratio{{{C}}})", "clean forcibly"),
            ),
            p(
                "Flush and dispatch lag",
                "Bytes written but not yet synced, and committed but not yet in the consume "
                "queues.",
                "bytes",
                t(f"max by (instance) (gannet_store_flush_lag_bytes{{{C}}})", "flush {{instance}}"),
                t(
                    f"max by (instance) (gannet_store_dispatch_lag_bytes{{{C}}})",
                    "dispatch {{instance}}",
                ),
            ),
            p(
                "Timer backlog",
                "Delayed messages parked in the timer store, not yet due.",
                MSGS_COUNT,
                t(
                    f"sum by (instance) (gannet_store_timer_backlog_messages{{{C}}})",
                    "{{instance}}",
                ),
            ),
            p(
                "Store files",
                "Commit-log files, consume queues and index files.",
                "none",
                t(f"sum(gannet_store_commitlog_files{{{C}}})", "commit-log files"),
                t(f"sum(gannet_store_consume_queues{{{C}}})", "consume queues"),
                t(f"sum(gannet_store_index_files{{{C}}})", "index files"),
            ),
        ),
    )
    cleanup = row(
        "Cleanup",
        (
            p(
                "Files removed",
                "Files deleted by cleanup per hour, by kind.",
                "none",
                t(
                    f"sum by (kind) (increase(gannet_cleanup_files_removed_total{{{C}}}[1h]))",
                    "{{kind}}",
                ),
            ),
            p(
                "Bytes removed",
                "Commit-log bytes deleted by cleanup per hour.",
                "bytes",
                t(f"sum(increase(gannet_cleanup_bytes_removed_total{{{C}}}[1h]))", "removed"),
            ),
            p(
                "Cleanup runs",
                "Cleanup passes per hour, by trigger (idle: nothing was due).",
                "none",
                t(
                    f"sum by (reason) (increase(gannet_cleanup_runs_total{{{C}}}[1h]))",
                    "{{reason}}",
                ),
                stack=True,
            ),
            p(
                "Writable",
                "1 while every broker's store accepts writes (not full, no failed fsync).",
                "none",
                t(f"min(gannet_store_writable{{{C}}})", "writable"),
                kind="stat",
                thresholds=((0, "red"), (1, "green")),
            ),
        ),
    )
    return dashboard(
        "gannet-storage",
        "Gannet / Storage and cleanup",
        "Commit-log size and growth, disk thresholds, flush/dispatch lag, timer store, cleanup "
        "and tiered storage.",
        (main, cleanup, _tier()),
    )


def _tier() -> Row:
    """Tiered storage (docs/tiered-storage.md): offload on the leaders, local deletes on every
    member, reads of offloaded files through the block cache. Empty without ``--tier-*``."""
    hits = f"sum(rate(gannet_tier_cache_hits_total{{{C}}}[{RI}]))"
    misses = f"sum(rate(gannet_tier_cache_misses_total{{{C}}}[{RI}]))"
    return row(
        "Tiered storage",
        (
            p(
                "Offload failures",
                "Failed offload passes per second by reason (unavailable, credentials, gap, ...). "
                "Writes never wait for them; the GannetCluster gets a TierOffload condition and "
                "an Event.",
                OPS,
                t(
                    f"sum by (reason) (rate(gannet_tier_offload_failures_total{{{C}}}[{RI}]))",
                    "{{reason}}",
                ),
            ),
            p(
                "Offloaded",
                "Commit-log bytes recorded in the tier per second (uploaded by the leaders).",
                "Bps",
                t(
                    f"sum by (instance) (rate(gannet_tier_offloaded_bytes_total{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Files offloaded and deleted locally",
                "Files recorded in the tier, and offloaded files deleted from local disk, per "
                "hour.",
                "none",
                t(f"sum(increase(gannet_tier_offloaded_files_total{{{C}}}[1h]))", "offloaded"),
                t(
                    f"sum(increase(gannet_tier_local_deleted_files_total{{{C}}}[1h]))",
                    "deleted locally",
                ),
            ),
            p(
                "Tier cache hit ratio",
                "Blocks of offloaded files served from the block cache, of all blocks read.",
                "percentunit",
                t(f"{hits} / ({hits} + {misses})", "hit ratio"),
            ),
            p(
                "Tier fetches",
                "Bytes fetched from the bucket per second (ranged GETs, read-ahead included).",
                "Bps",
                t(
                    f"sum by (instance) (rate(gannet_tier_fetched_bytes_total{{{C}}}[{RI}]))",
                    "{{instance}}",
                ),
            ),
            p(
                "Tier read errors",
                "Reads of offloaded offsets that failed per second, by reason (the client gets "
                "a retryable error).",
                OPS,
                t(
                    f"sum by (reason) (rate(gannet_tier_read_errors_total{{{C}}}[{RI}]))",
                    "{{reason}}",
                ),
            ),
            p(
                "Tier cache size",
                "Bytes of offloaded files held by each broker's block cache.",
                "bytes",
                t(f"max by (instance) (gannet_tier_cache_bytes{{{C}}})", "{{instance}}"),
            ),
        ),
    )


def operator() -> models.Dashboard:
    main = row(
        "Operator",
        (
            p(
                "Resources",
                "Custom resources the operator manages, by kind.",
                "none",
                t("sum by (kind) (gannet_operator_resources)", "{{kind}}"),
                kind="bargauge",
            ),
            p(
                "Reconciliations",
                "Reconciliations per second, by kind and result.",
                OPS,
                t(
                    f"sum by (kind, result) (rate(gannet_operator_reconciliations_total[{RI}]))",
                    "{{kind}} {{result}}",
                ),
            ),
            p(
                "Failed and refused reconciliations",
                "Reconciliations that failed (broker or API error, retried) or were refused "
                "(a condition says why, e.g. a queue shrink) in the last hour, by kind.",
                "none",
                t(
                    "sum by (kind, result) (increase(gannet_operator_reconciliations_total"
                    '{result!="success"}[1h]))',
                    "{{kind}} {{result}}",
                ),
            ),
            p(
                "Reconcile duration",
                "p50 and p99 time of one reconciliation.",
                "s",
                t(
                    "histogram_quantile(0.5, sum by (le) "
                    f"(rate(gannet_operator_reconcile_duration_seconds_bucket[{RI}])))",
                    "p50",
                ),
                t(
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(gannet_operator_reconcile_duration_seconds_bucket[{RI}])))",
                    "p99",
                ),
            ),
        ),
    )
    return dashboard(
        "gannet-operator",
        "Gannet / Operator",
        "The kopf operator: managed resources and reconciliation results and times.",
        (main,),
        variables=(),
    )
