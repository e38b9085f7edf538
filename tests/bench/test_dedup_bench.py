"""``bench.dedup path`` measures what it claims: one-message sends through the servicer, with
the index lookups counted: every send is looked up right after ids were dropped for room
(born within the margin of the horizon), none when the map dropped nothing."""

from __future__ import annotations

from bench import dedup


def test_the_path_bench_counts_the_lookups_it_causes() -> None:
    dropped = dedup.path(20, 200, 0.0, 100)
    assert dropped["held"] == 100
    assert dropped["log_lookups"] == 20
    assert dropped["fill_cpu_us_per_record"] > 0
    fresh = dedup.path(20, 0, 0.0, 100)
    assert fresh["log_lookups"] == 0
    assert fresh["cpu_us_per_send"] > 0
