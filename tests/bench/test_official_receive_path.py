"""``bench.official --receive-path-rounds`` runs the receive + ack path it claims to measure:
every popped message comes back as a frame and is acknowledged (not a timing test)."""

from __future__ import annotations

from bench import official


def test_receive_path_receives_and_acks_every_round() -> None:
    result = official.receive_path(2)
    assert result["msgs"] == 2 * official.RECEIVE_BATCH
    assert result["cpu_us_per_msg"] > 0
    assert 0 < result["loop_cpu_us_per_msg"] <= result["cpu_us_per_msg"]
