"""Reads by commit-log offset: the local-or-tier choice, the lowest readable offset, the
answers to a tier outage on each protocol, and the tier metrics (pure; the reads themselves
run against a real S3 server in ``e2e/tier/test_store_reads.py``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from gannet.node.api import store_statuses
from gannet.node.metrics import tier_collecting
from gannet.node.store.log import records
from gannet.node.store.tier import errors, manifests, reading, routing

PREFIX = "gannet/c1/g0"
MD5 = "0" * 32
FILE = 1000


def tier(first_file: int, files: int) -> manifests.Manifest:
    objects = tuple(
        manifests.TierObject(n * FILE, FILE, MD5, 1) for n in range(first_file, first_file + files)
    )
    return manifests.check(manifests.Manifest(PREFIX, objects))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5), st.integers(0, 5), st.integers(0, 8), st.integers(0, 9 * FILE - 1))
def test_one_place_answers_for_every_offset(
    tier_first: int, tier_files: int, local_first: int, offset: int
) -> None:
    manifest = tier(tier_first, tier_files)
    local_min = local_first * FILE
    chosen = routing.where(offset, local_min, manifest)
    if offset >= local_min:
        assert chosen is routing.Where.LOCAL  # a file both local and offloaded: disk wins
    elif tier_first * FILE <= offset < (tier_first + tier_files) * FILE:
        assert chosen is routing.Where.TIER
    else:
        assert chosen is routing.Where.GONE
    assert routing.where(offset, local_min, None) is (
        routing.Where.LOCAL if offset >= local_min else routing.Where.GONE
    )


def test_a_recorded_gap_reads_as_gone_and_keeps_the_tier_reaching_disk() -> None:
    with_gap = manifests.apply(tier(0, 2), manifests.RecordGap(2 * FILE, 4 * FILE))
    assert routing.where(FILE, 4 * FILE, with_gap) is routing.Where.TIER
    assert routing.where(2 * FILE, 4 * FILE, with_gap) is routing.Where.GONE
    assert routing.where(4 * FILE - 1, 4 * FILE, with_gap) is routing.Where.GONE
    assert routing.readable_min_offset(4 * FILE, with_gap) == 0  # consume queues keep units


def test_a_topics_tier_retention_is_judged_on_the_record_read() -> None:
    hour_ms = 3_600_000
    retention = {"Kept": None, "Never": 0, "Hour": 3600}.get
    for topic, stored_ms, served in (
        ("Kept", 0, True),
        ("Other", 0, True),
        ("Never", 10 * hour_ms, False),
        ("Hour", 10 * hour_ms - hour_ms + 1, True),
        ("Hour", 10 * hour_ms - hour_ms, False),
    ):
        assert routing.served_from_tier(topic, stored_ms, retention, 10 * hour_ms) is served
    msg = records.Message("Hour", b"body", store_timestamp_ms=123)
    data = bytes(records.encode(msg, body_size_max_bytes=1024))
    assert routing._first_record(data) == ("Hour", 123)
    assert routing._first_record(data[:4]) is None  # a size probe is not judged


def test_the_lowest_readable_offset_is_the_tier_start_only_when_the_tier_reaches_disk() -> None:
    assert routing.readable_min_offset(3 * FILE, tier(0, 3)) == 0
    assert routing.readable_min_offset(2 * FILE, tier(0, 3)) == 0  # a hot local copy
    assert routing.readable_min_offset(4 * FILE, tier(0, 3)) == 4 * FILE  # a gap
    assert routing.readable_min_offset(3 * FILE, manifests.Manifest(PREFIX)) == 3 * FILE
    assert routing.readable_min_offset(3 * FILE, None) == 3 * FILE


def test_a_tier_outage_is_answered_retryably_on_v2() -> None:
    answer = store_statuses.from_store_error(
        reading.FetchesBusy("commit-log offset 42 (tier file 0): 4 tier fetches are in flight")
    )
    assert answer.code == store_statuses.HA_NOT_AVAILABLE
    assert "offset 42" in answer.message
    refused = store_statuses.from_store_error(errors.TierCredentialsRejected("check the Secret"))
    assert refused.code != store_statuses.HA_NOT_AVAILABLE  # not retryable: a config problem


def test_read_errors_are_counted_by_reason() -> None:
    assert reading.error_reason(reading.FetchesBusy("x")) == "busy"
    assert reading.error_reason(reading.ShortRead("x")) == "short_read"
    assert reading.error_reason(errors.TierUnavailable("x")) == "unavailable"
    assert reading.error_reason(errors.TierCredentialsRejected("x")) == "credentials"
    assert reading.error_reason(errors.TierRequestRejected("x")) == "rejected"
    assert reading.error_reason(errors.ManifestCorrupt("x")) == "other"


def test_statistics_become_prometheus_families() -> None:
    counts = [0] * (len(reading.FETCH_SECONDS_BOUNDS) + 1)
    counts[0], counts[3], counts[-1] = 1, 2, 1  # <= 5 ms, <= 50 ms, > 30 s
    statistics = reading.ReadStatistics(
        7,
        3,
        2,
        8192,
        4096,
        {"unavailable": 1},
        disk_cache_hits=5,
        disk_cache_misses=2,
        disk_cached_bytes=1 << 20,
        disk_cache_discarded=1,
        readahead_fetches=4,
        readahead_dropped=6,
        fetch_seconds_counts=tuple(counts),
        fetch_seconds_sum=31.5,
    )
    registry = CollectorRegistry()

    class Fixed:
        def statistics(self) -> reading.ReadStatistics:
            return statistics

    registry.register(tier_collecting.TierCollector(Fixed))
    text = generate_latest(registry).decode()
    for line in (
        "gannet_tier_cache_hits_total 7.0",
        "gannet_tier_cache_misses_total 3.0",
        "gannet_tier_fetches_total 2.0",
        "gannet_tier_fetched_bytes_total 8192.0",
        "gannet_tier_cache_bytes 4096.0",
        'gannet_tier_read_errors_total{reason="unavailable"} 1.0',
        'gannet_tier_read_errors_total{reason="busy"} 0.0',
        "gannet_tier_disk_cache_hits_total 5.0",
        "gannet_tier_disk_cache_misses_total 2.0",
        "gannet_tier_disk_cache_discarded_total 1.0",
        "gannet_tier_disk_cache_bytes 1.048576e+06",
        "gannet_tier_readahead_fetches_total 4.0",
        "gannet_tier_readahead_dropped_total 6.0",
        'gannet_tier_fetch_seconds_bucket{le="0.005"} 1.0',
        'gannet_tier_fetch_seconds_bucket{le="0.05"} 3.0',
        'gannet_tier_fetch_seconds_bucket{le="30.0"} 3.0',
        'gannet_tier_fetch_seconds_bucket{le="+Inf"} 4.0',
        "gannet_tier_fetch_seconds_count 4.0",
        "gannet_tier_fetch_seconds_sum 31.5",
    ):
        assert line in text.splitlines(), line
    empty = CollectorRegistry()
    empty.register(tier_collecting.TierCollector(lambda: None))
    assert "gannet_tier" not in generate_latest(empty).decode()
