"""``bench.remoting_report``: the Java client's ``done`` lines become figures, repetitions fold into
medians, and the recorded runs render as REMOTING.md tables with the ratio of the two systems.
Pure: no JVM, no broker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import remoting_report
from bench.remoting_report import Done, HarnessError


def test_a_done_line_parses_into_its_figures() -> None:
    line = "done send msgs=20000 failed=1 seconds=12.5000 p50_us=1800 p99_us=9100"
    assert remoting_report.parse_done(line) == Done("send", 20000, 1, 12.5, 1800, 9100)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("ready", "not a 'done <phase>"),
        ("done receive msgs=1 failed=0 seconds=1 p50_us=0 p99_us=0", "not a 'done <phase>"),
        ("done send msgs=1 failed=0 seconds=1 p50_us=0", "p99_us missing"),
        ("done send msgs=1 failed=0 seconds=1 p50_us=0 p99_us", "'p99_us' is not key=value"),
        ("done pull msgs=x failed=0 seconds=1 p50_us=0 p99_us=0", "not a number"),
        ("done pull msgs=0 failed=0 seconds=1 p50_us=0 p99_us=0", "without messages"),
    ],
)
def test_a_bad_done_line_is_refused_naming_the_fault(line: str, named: str) -> None:
    with pytest.raises(HarnessError, match=named):
        remoting_report.parse_done(line)


def test_phase_figures_are_rates_and_cpu_per_message() -> None:
    send = remoting_report.phase_figures(Done("send", 20000, 0, 10.0, 1500, 8250), 3.0, 20.0)
    assert send["msgs_per_s"] == 2000.0
    assert send["cpu_us_per_msg"] == 150.0  # 3 s of broker CPU over 20,000 messages
    assert send["cpu_above_idle_us_per_msg"] == 140.0  # less 20 ms/s idle over the 10 s
    assert (send["p50_ms"], send["p99_ms"]) == (1.5, 8.25)
    pull = remoting_report.phase_figures(Done("pull", 5000, 0, 0.5, 0, 0), 0.25, 1000.0)
    assert (pull["msgs_per_s"], pull["cpu_us_per_msg"]) == (10000.0, 50.0)
    assert pull["cpu_above_idle_us_per_msg"] == 0.0  # never below nothing
    assert "p50_ms" not in pull  # a drain times no single call


def test_medians_take_the_middle_repetition_and_sum_the_counts() -> None:
    reps = [
        {"msgs": 100.0, "failed": 0.0, "msgs_per_s": 900.0, "p50_ms": 2.0},
        {"msgs": 100.0, "failed": 2.0, "msgs_per_s": 1500.0},
        {"msgs": 100.0, "failed": 0.0, "msgs_per_s": 1000.0, "p50_ms": 4.0},
    ]
    folded = remoting_report.medians(reps)
    assert folded["msgs_per_s"] == 1000.0
    assert (folded["msgs"], folded["failed"], folded["repetitions"]) == (300.0, 2.0, 3)
    assert "p50_ms" not in folded  # not every repetition has it
    with pytest.raises(ValueError, match="no repetition"):
        remoting_report.medians([])


def _record(time: str, system: str, phase: str, **figures: float) -> dict[str, Any]:
    return {
        "time": time,
        "scenario": f"{system}/{phase}",
        "system": system,
        "phase": phase,
        "commit": "0123456789abcdef",
        "label": "",
        "load_before": 3.5,
        "load_after": 9.0,
        "versions": {"gannet": "gannet 0.1.0", "rocketmq": "Apache RocketMQ 5.3.3"},
        "msgs_per_s_runs": [1.0, 2.0, 3.0],
        **figures,
    }


def test_the_report_shows_each_pair_of_systems_latest_run_with_ratios() -> None:
    records = [
        _record("2026-12-01T10:00:00", "gannet", "send", msgs_per_s=100.0, cpu_us_per_msg=1.0),
        _record("2026-12-01T10:00:00", "rocketmq", "send", msgs_per_s=400.0, cpu_us_per_msg=1.0),
        {"scenario": "an older shape without system and phase", "time": "2026-11-01T00:00:00"},
    ]
    for system, rate, cpu in (("gannet", 1000.0, 300.0), ("rocketmq", 4000.0, 100.0)):
        for phase in ("send", "batch", "pull"):
            figures = {"msgs_per_s": rate, "cpu_us_per_msg": cpu, "p50_ms": 2.0, "p99_ms": 8.0}
            records.append(_record("2026-12-02T10:00:00", system, phase, **figures))
    runs = remoting_report.runs(records)
    assert [run.time for run in runs] == ["2026-12-01T10:00:00", "2026-12-02T10:00:00"]
    assert runs[1].systems == ("gannet", "rocketmq")
    text = remoting_report.markdown(runs, "# Title\n", "## Notes\n\nby hand\n")
    assert text.startswith("# Title\n")
    assert text.index("latest run") < text.index("## Notes\n\nby hand\n")
    assert text.index("## Notes") < text.index("## Every recorded run")
    assert "## Gannet vs RocketMQ: latest run" in text
    assert text.count("latest run") == 1  # one pair of systems: its latest run only
    assert "| send | msgs/s | 1,000 | 4,000 | 0.25× | 1.00, 2.00, 3.00; 1.00, 2.00, 3.00 |" in text
    assert "| pull | broker CPU µs/msg | 300 | 100 | 3.00× |  |" in text
    assert "| pull | send p50 ms" not in text  # no latency rows for the drain
    assert "load average (1 min) 3.5 before, 9.0 after" in text
    history = text.split("## Every recorded run")[1]
    first = "| 2026-12-01T10:00:00 | 0123456789 | – | Gannet vs RocketMQ | 3.5 → 9.0 |"
    assert f"{first} 0.25× | – | – |" in history
    assert "| 0.25× | 0.25× | 0.25× | 300 / 300 / 300 |" in history


def test_a_before_after_pair_names_the_other_tree() -> None:
    records = [
        _record("2026-12-03T10:00:00", "gannet", "pull", msgs_per_s=1200.0),
        _record("2026-12-03T10:00:00", "gannet@4560c5a", "pull", msgs_per_s=1000.0),
    ]
    text = remoting_report.markdown(remoting_report.runs(records), "# T")
    assert "## Gannet vs Gannet (4560c5a): latest run" in text
    assert "| pull | msgs/s | 1,200 | 1,000 | 1.20× |" in text


def test_the_committed_report_is_what_the_generator_renders() -> None:
    from bench import remoting, results_log

    records = [
        json.loads(line) for line in results_log.log_path(remoting.LOG).read_text().splitlines()
    ]
    rendered = remoting_report.markdown(
        remoting_report.runs(records), remoting.INTRO, remoting.NOTES.read_text()
    )
    assert remoting.REPORT.read_text() == rendered, "run python -m bench.remoting --report-only"
