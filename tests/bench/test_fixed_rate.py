"""The fixed-rate latency view of the peer benchmark without any broker: body stamps, the open-loop
schedule, the summary of a run (percentiles from scheduled send times, achieved rate, backlog,
sustained or not), the report's latency rows, table and plot input, and the run header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.loadgen import fixed_rate, latency_view, report, scenarios

RATE = 1_000.0
N = 2_000


def _schedule(n: int = N, rate: float = RATE) -> list[float]:
    return [fixed_rate.due_s(100.0, i, rate) for i in range(n)]


def test_a_stamp_round_trips_and_keeps_the_body_length() -> None:
    mark = fixed_rate.Stamp(run_token=7, measured=True, producer=3, sequence=41,
                            scheduled_ns=123_456_789_000)  # fmt: skip
    body = fixed_rate.stamp(b"x" * 1024, mark)
    assert len(body) == 1024
    assert body.endswith(b"x" * (1024 - fixed_rate.STAMP.size))
    assert fixed_rate.read_stamp(body) == mark
    assert fixed_rate.read_stamp(body).scheduled_s == pytest.approx(123.456789)


def test_foreign_or_short_bodies_are_refused_by_name() -> None:
    with pytest.raises(fixed_rate.StampError, match="not the stamp magic"):
        fixed_rate.read_stamp(b"\0" * 64)
    with pytest.raises(fixed_rate.StampError, match="shorter than a stamp"):
        fixed_rate.read_stamp(b"GNLT")
    with pytest.raises(fixed_rate.StampError, match="cannot hold"):
        fixed_rate.stamp(b"tiny", fixed_rate.Stamp(0, False, 0, 0, 0))
    with pytest.raises(ValueError, match="rate_msgs_per_s=0"):
        fixed_rate.due_s(0.0, 1, 0)


def test_a_run_that_keeps_up_gives_percentiles_from_the_scheduled_times() -> None:
    scheduled = _schedule()
    # Every send leaves on time, is answered 2 ms later; message i arrives 5 ms after its
    # scheduled time, except every 100th, which arrives after 40 ms (1 % of messages).
    receives = [(s, s + (0.040 if i % 100 == 99 else 0.005)) for i, s in enumerate(scheduled)]
    summary = fixed_rate.summarize(
        rate_msgs_per_s=RATE, messages=N, sends=[(s, s) for s in scheduled],
        acks=[(s, s + 0.002) for s in scheduled], receives=receives,
    )  # fmt: skip
    assert summary["sustained"] is True
    assert summary["verdict"] == "sustained"
    assert summary["send_ack_ms"]["p50"] == pytest.approx(2.0)
    assert summary["send_receive_ms"]["p50"] == pytest.approx(5.0)
    assert summary["send_receive_ms"]["p99"] == pytest.approx(5.0)  # 1 % is exactly the tail
    assert summary["send_receive_ms"]["p99.9"] == pytest.approx(40.0)
    assert summary["start_lag_ms"]["max"] == 0.0
    assert summary["drain_s"] == pytest.approx(0.040)
    assert summary["achieved_msgs_per_s"] == pytest.approx(N / (1.999 + 0.040), rel=1e-3)
    assert summary["backlog_at_end"] <= 40  # messages in flight at the end, not a queue


def test_a_stall_is_charged_to_every_message_that_waited_behind_it() -> None:
    # The client stalls for 200 ms at message 1,000: the 200 messages due meanwhile leave late
    # and arrive late. Measured from the actual send they would look as fast as the rest;
    # from the schedule, they carry the wait (coordinated omission corrected).
    scheduled = _schedule()
    stall_end = scheduled[1_000] + 0.200
    issued = [max(s, stall_end) if 1_000 <= i < 1_200 else s for i, s in enumerate(scheduled)]
    summary = fixed_rate.summarize(
        rate_msgs_per_s=RATE, messages=N, sends=list(zip(scheduled, issued, strict=True)),
        acks=[(s, t + 0.001) for s, t in zip(scheduled, issued, strict=True)],
        receives=[(s, t + 0.003) for s, t in zip(scheduled, issued, strict=True)],
    )  # fmt: skip
    assert summary["sustained"] is True
    assert summary["send_receive_ms"]["p50"] == pytest.approx(3.0)
    assert summary["send_receive_ms"]["p99"] > 150.0  # 10 % of messages waited
    assert summary["send_receive_ms"]["max"] == pytest.approx(203.0)
    assert summary["start_lag_ms"]["max"] == pytest.approx(200.0)
    assert summary["backlog_max"] >= 200


def test_a_system_that_falls_behind_is_reported_by_rate_and_backlog() -> None:
    scheduled = _schedule()
    # Received at half the rate: message i arrives at start + 2 i ms.
    receives = [(s, 100.0 + 0.002 * i + 0.001) for i, s in enumerate(scheduled)]
    summary = fixed_rate.summarize(
        rate_msgs_per_s=RATE, messages=N, sends=[(s, s) for s in scheduled],
        acks=[(s, s + 0.001) for s in scheduled], receives=receives,
    )  # fmt: skip
    assert summary["sustained"] is False
    assert summary["achieved_msgs_per_s"] == pytest.approx(500.0, rel=0.01)
    assert summary["backlog_at_end"] == pytest.approx(N / 2, abs=2)
    assert summary["drain_s"] == pytest.approx(2.0, abs=0.01)
    assert "after the last scheduled send (limit 1.0 s)" in summary["verdict"]


def test_lost_messages_and_failed_sends_are_named() -> None:
    scheduled = _schedule(100)
    summary = fixed_rate.summarize(
        rate_msgs_per_s=RATE, messages=100, sends=[(s, s) for s in scheduled],
        acks=[(s, s + 0.001) for s in scheduled[:97]],
        receives=[(s, s + 0.002) for s in scheduled[:90]], send_errors=3,
    )  # fmt: skip
    assert summary["sustained"] is False
    assert "3 of 100 sends not acknowledged (3 errors)" in summary["verdict"]
    assert "10 of 100 messages not received" in summary["verdict"]
    assert summary["backlog_at_end"] == 10
    nothing = fixed_rate.summarize(rate_msgs_per_s=RATE, messages=100, sends=[], acks=[],
                                   receives=[])  # fmt: skip
    assert nothing["sustained"] is False
    assert "nothing was sent" in nothing["verdict"]


def test_backlog_counts_due_and_not_yet_received() -> None:
    assert fixed_rate.backlog([1.0, 2.0, 3.0], [1.5, 4.0], at_s=3.0) == 2
    assert fixed_rate.backlog_max([1.0, 2.0, 3.0], [1.5, 4.0, 4.0]) == 2
    assert fixed_rate.backlog_max([], []) == 0
    assert fixed_rate.drain_limit_s(10.0) == 1.0
    assert fixed_rate.drain_limit_s(60.0) == pytest.approx(3.0)


def test_the_fixed_rate_scenarios_are_open_loop_with_enough_messages_for_p99_9() -> None:
    for scenario_id, rate in (("L500", 500), ("L1K", 1_000), ("L5K", 5_000)):
        s = scenarios.SCENARIOS[scenario_id]
        assert s.open_loop
        assert s.rate_msgs_per_s == rate
        assert s.messages >= 10_000  # p99.9 rests on at least 10 messages
        assert s.schedule_s <= s.max_duration_s
    assert (
        scenarios.order("S9")
        < scenarios.order("L500")
        < scenarios.order("L1K")
        < scenarios.order("L5K")
    )
    assert scenarios.order("S42") == len(scenarios.SCENARIOS)
    with pytest.raises(ValueError, match="needs rate_msgs_per_s and consumers"):
        scenarios.Scenario("Lx", "x", 100, 1, 1, 1, 1, scenarios.Mode.STOCK, open_loop=True)
    with pytest.raises(ValueError, match=r"take 110 s, over max_duration_s=60"):
        scenarios.Scenario("Lx", "x", 100, 1, 1, 1, 1, scenarios.Mode.STOCK, open_loop=True,
                           rate_msgs_per_s=100, messages=10_000, warmup_messages=1_000)  # fmt: skip


def _line(system: str, rep: int, p99_ms: float, *, sustained: bool = True,
          rate: float = 1_000, scenario: str = "L1K") -> dict[str, Any]:  # fmt: skip
    summary: dict[str, Any] = {
        "target_msgs_per_s": rate, "messages": 20_000, "sustained": sustained,
        "verdict": "sustained" if sustained else "the last message arrived 9.0 s after",
        "send_receive_ms": {"p50": 2.0 + rep, "p99": p99_ms, "p99.9": p99_ms * 2},
        "send_ack_ms": {"p50": 1.0, "p99": 3.0, "p99.9": 6.0},
        "achieved_msgs_per_s": rate if sustained else rate * 0.6,
        "backlog_at_end": 5 if sustained else 8_000,
        "start_lag_ms": {"p50": 0.1, "p99": 0.5 if sustained else 2_500.0},
    }  # fmt: skip
    return {
        "run_id": "r9", "ts": f"2026-12-05T15:0{rep}:00+00:00", "scenario": scenario,
        "system": system, "mode": "stock", "durability": "async flush, R1",
        "version": f"{system} 9.9", "repetition": rep, "message_size_bytes": 1024,
        "client": "kafka" if system == "kafka" else "rmq_stock",
        "broker_cpu_us_per_msg": 300.0, "loadavg": [0.5, 0.4, 0.3],
        "loadavg_after": [1.5, 0.6, 0.35], "other_busy_before": 0.01, "preliminary": False,
        "settings": {"scenario": {"rate_msgs_per_s": rate, "messages": 20_000,
                                  "open_loop": True}, "system": {}},
        "environment": {"cpus": 2, "commit": "0123456789abcdef", "pinning": "broker CPU 0",
                        "rocketmq_python_client": "5.1.2", "confluent_kafka": "2.16.1"},
        "fixed_rate": summary,
    }  # fmt: skip


def test_latency_rows_take_medians_and_say_when_a_system_did_not_keep_up() -> None:
    lines = [
        _line("gannet", 0, 10.0), _line("gannet", 1, 30.0), _line("gannet", 2, 20.0),
        _line("kafka", 0, 4.0),
        _line("rocketmq", 0, 50.0), _line("rocketmq", 1, 90.0, sustained=False),
        _line("gannet", 0, 70.0, rate=5_000, scenario="L5K"),
    ]  # fmt: skip
    rows = latency_view.rows(lines)
    assert [(r.rate_msgs_per_s, r.system) for r in rows] == [
        (1_000, "gannet"), (1_000, "kafka"), (1_000, "rocketmq"), (5_000, "gannet"),
    ]  # fmt: skip
    gannet, kafka, rocketmq, _ = rows
    assert gannet.receive_ms == {"p50": 3.0, "p99": 20.0, "p99.9": 40.0}
    assert gannet.sustained
    assert kafka.client == "confluent-kafka 2.16.1"
    assert gannet.client == "rocketmq-python-client 5.1.2"
    assert not rocketmq.sustained
    assert rocketmq.backlog_at_end == 8_000
    text = "\n".join(latency_view.section(rows, latency_view.IMAGE))
    assert "| 1,000 | gannet | rocketmq-python-client 5.1.2 | 3.0 / 20.0 / 40.0 | " \
        "1.0 / 3.0 / 6.0 | 1,000 | 300 | 3 |  |" in text  # fmt: skip
    assert "| 1,000 | rocketmq | rocketmq-python-client 5.1.2 | not sustained | not sustained |" \
        in text  # fmt: skip
    assert "1 of 2 run(s) did not keep up: achieved 800/s of 1,000/s, backlog 8,000" in text
    assert "sends left up to 1.3 s late (p99)" in text  # median of 0.5 ms and 2,500 ms
    assert "coordinated omission is corrected" in text
    assert f"(img/{latency_view.IMAGE})" in text
    series = latency_view.plot_series(rows)
    assert series[1_000.0]["kafka"] == [2.0, 4.0, 8.0]
    assert series[1_000.0]["rocketmq"] is None
    assert "No fixed-rate runs" in "\n".join(latency_view.section([], None))


def test_no_latency_rows_draw_no_plot(tmp_path: Path) -> None:
    assert latency_view.plot([], tmp_path) is None
    assert not tmp_path.joinpath(latency_view.IMAGE).exists()


def test_the_report_header_names_commit_load_and_versions(tmp_path: Path) -> None:
    lines = [_line("gannet", 0, 10.0), _line("kafka", 1, 4.0),
             _line("rocketmq", 2, 9.0, sustained=False)]  # fmt: skip
    text = report.render(lines, [latency_view.IMAGE])
    assert "Run: commit `0123456789ab`; 2 CPUs (broker CPU 0); 1-minute load average " \
        "0.50–0.50 before the runs, 1.50–1.50 after" in text  # fmt: skip
    assert "Versions: gannet: gannet 9.9; kafka: kafka 9.9; rocketmq: rocketmq 9.9. Clients: " \
        "rocketmq-python-client 5.1.2, confluent-kafka 2.16.1." in text  # fmt: skip
    assert "## Machine load per run" in text
    assert "| 2026-12-05 15:01:00 | L1K | kafka | 1 | 0.50 / 0.40 / 0.30 | " \
        "1.50 / 0.60 / 0.35 | 1% |" in text  # fmt: skip
    # Fixed-rate lines appear in the latency view only, not among the throughput tables.
    assert "### L1K" not in text
    assert "## Plots" not in text
    assert text.count(f"(img/{latency_view.IMAGE})") == 1
    jsonl = tmp_path / "peers.jsonl"
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report.write(jsonl, tmp_path / "REPORT.md", tmp_path / "img")
    assert (tmp_path / "img" / latency_view.IMAGE).stat().st_size > 1000  # drawn, one panel
    assert f"(img/{latency_view.IMAGE})" in (tmp_path / "REPORT.md").read_text()
