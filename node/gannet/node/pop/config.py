"""Pop settings, each named with its unit; defaults are RocketMQ's ``BrokerConfig`` values
except where Gannet deliberately differs (noted).

Frozen; change with :func:`dataclasses.replace`. Used by every module of :mod:`gannet.node.pop`.
"""

from __future__ import annotations

from dataclasses import dataclass

ACK_TIME_INTERVAL_MS = 1_000  # PopAckConstants.ackTimeInterval
CK_DELIVER_LEAD_MS = 1_000  # a CK is delivered to the revive queue this long before reviveTime
REVIVE_EXPIRE_MARGIN_MS = 2_000  # a CK is expired when endTime - reviveTime exceeds this
RE_PUT_BACKOFF_S = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                    3600, 7200)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PopConfig:
    revive_queue_count: int = 8  # reviveQueueNum
    pop_from_retry_probability_percent: int = 20  # popFromRetryProbability
    pop_batch_messages_max: int = 32  # max msgs per pop
    invisible_time_ms_min: int = 0
    invisible_time_ms_max: int = 12 * 3_600_000  # must stay below the timer's 3-day maximum
    # In-memory ack matching (PopBufferMergeService). ON by default in Gannet (RocketMQ: off).
    buffer_merge_enabled: bool = True  # enablePopBufferMerge
    pop_ck_stay_buffer_time_ms: int = 10_000  # popCkStayBufferTime
    pop_ck_stay_buffer_timeout_ms: int = 3_000  # popCkStayBufferTimeOut
    pop_ck_buffer_size_max: int = 200_000  # popCkMaxBufferSize (tracked checkpoints)
    pop_ck_offset_queue_size_max: int = 20_000  # popCkOffsetMaxQueueSize (per queue)
    # PopBufferMergeService scan interval. Gannet: the least gap between scans while acks keep
    # coming; otherwise the thread sleeps until its next deadline (pop/waking.py).
    buffer_scan_interval_ms: int = 5
    # Revive.
    revive_interval_ms: int = 1_000  # reviveInterval
    revive_batch_messages_max: int = 32  # messages pulled per read of a revive queue
    revive_pass_messages_max: int = 10_000  # messages read per revive pass and queue
    revive_pass_cks_max: int = 5_000  # checkpoints held in memory per revive pass
    # Long polling.
    poll_waiters_per_key_max: int = 1_024  # popPollingSize
    poll_waiters_max: int = 100_000  # maxPopPollingSize
    # Orderly pop.
    order_info_idle_ms_max: int = 24 * 3_600_000  # entries idle longer are dropped
