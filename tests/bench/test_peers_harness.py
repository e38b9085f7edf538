"""The pure parts of the peer benchmark (bench/peers, bench/loadgen): scenario definitions,
/proc parsing, percentiles, medians and ratios, report rendering from a fixture, and the
process helpers on a real child (``sleep``) — no Java, NATS or Redis needed."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.loadgen import phases, profile, report, scenarios, stats
from bench.loadgen.drivers import WorkerResult
from bench.peers import processes, procfs, rocketmq
from bench.peers.base import Layout

STAT = "4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 3 0"
IO = "rchar: 100\nwchar: 2048\nsyscr: 1\nsyscw: 2\nread_bytes: 0\nwrite_bytes: 8192\n"


def test_stat_counts_fields_after_the_last_parenthesis() -> None:
    times = procfs.parse_stat(STAT, ticks_per_s=100)
    assert times.user_s == 2.5
    assert times.system_s == 0.75
    assert times.total_s == 3.25


@pytest.mark.parametrize("bad", ["no parens 1 2 3", "1 (x) S 1 2"])
def test_stat_of_the_wrong_shape_is_refused_by_name(bad: str) -> None:
    with pytest.raises(procfs.ProcFormatError, match="/proc stat"):
        procfs.parse_stat(bad)


def test_io_status_loadavg_children() -> None:
    assert procfs.parse_io(IO)["write_bytes"] == 8192
    assert procfs.parse_io(IO)["wchar"] == 2048
    assert procfs.parse_rss_bytes("Name:\tx\nVmRSS:\t   1234 kB\n") == 1234 * 1024
    assert procfs.parse_loadavg("0.50 1.25 3.00 2/345 6789\n") == (0.5, 1.25, 3.0)
    assert procfs.parse_children("12 13 \n") == [12, 13]
    with pytest.raises(procfs.ProcFormatError, match="VmRSS"):
        procfs.parse_rss_bytes("Name: kthread\n")
    with pytest.raises(procfs.ProcFormatError, match="not an integer"):
        procfs.parse_io("write_bytes: lots\n")


def test_every_scenario_of_performance_md_is_defined_and_bounded() -> None:
    assert list(scenarios.SCENARIOS) == [*(f"S{i}" for i in range(1, 10)), "L500", "L1K", "L5K"]
    for s in scenarios.SCENARIOS.values():
        assert s.messages > 0
        assert s.max_duration_s <= 60
        assert s.repetitions == 3
        quick = s.quick()
        assert quick.repetitions == 1
        assert quick.messages <= s.messages
        assert quick.max_duration_s <= 20
    assert scenarios.SCENARIOS["S3"].batch == 32
    assert scenarios.SCENARIOS["S5"].flush is scenarios.Flush.SYNC
    assert scenarios.SCENARIOS["S6"].replicas == 3
    assert scenarios.SCENARIOS["S8"].topics == 100
    assert scenarios.SCENARIOS["S9"].message_size_bytes == 64 * 1024


def test_bad_scenarios_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"S1.*stock mode sends one message per request"):
        scenarios.Scenario("S1", "x", 10, 1, 1, 1, 1, scenarios.Mode.STOCK, batch=4)
    with pytest.raises(ValueError, match="message_size_bytes=0"):
        scenarios.Scenario("Sx", "x", 0, 1, 1, 1, 1, scenarios.Mode.STOCK)
    with pytest.raises(ValueError, match="unknown scenario"):
        scenarios.select(["S42"], quick=True)
    assert [s.id for s in scenarios.select(["all"], quick=False)][-1] == "L5K"


def test_shares_add_up_to_the_total() -> None:
    s = scenarios.SCENARIOS["S2"]
    assert sum(s.share(i, 3, 20_000) for i in range(3)) == 20_000
    assert [s.share(i, 3, 10) for i in range(3)] == [4, 3, 3]


def test_percentiles_are_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert stats.percentile(values, 50) == 50.0
    assert stats.percentile(values, 99) == 99.0
    assert stats.percentile(values, 100) == 100.0
    assert stats.percentile([7.0], 99.9) == 7.0
    summary = stats.latency_summary([0.001 * i for i in range(1, 1001)])
    assert summary["p50"] == pytest.approx(500.0)
    assert summary["p99.9"] == pytest.approx(999.0)
    assert summary["max"] == pytest.approx(1000.0)
    assert stats.latency_summary([]) == {}
    with pytest.raises(ValueError, match="no values"):
        stats.percentile([], 50)


def _rec(
    system: str, rep: int, produce: float, consume: float, run_id: str = "r2"
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "scenario": "S1",
        "system": system,
        "mode": "stock",
        "durability": "async flush, R1",
        "version": f"{system} 1.0",
        "repetition": rep,
        "message_size_bytes": 1024,
        "produce_msgs_per_s": produce,
        "consume_msgs_per_s": consume,
        "broker_cpu_us_per_msg": 100.0 if system == "gannet" else 50.0,
        "send_latency_ms": {"p50": 1.0, "p99": 2.0 + rep},
        "loadavg": [3.0, 2.0, 1.0],
        "preliminary": True,
        "settings": {"system": {"flush": "async"}},
        "environment": {"cpus": 2},
    }


def test_medians_over_repetitions_and_gannet_ratios() -> None:
    records = [
        _rec("gannet", 0, 100, 10),
        _rec("gannet", 1, 300, 30),
        _rec("gannet", 2, 200, 20),
        _rec("rocketmq", 0, 400, 40),
        {**_rec("rocketmq", 1, 0, 0), "error": "boom"},
    ]
    table = stats.medians(records)
    mine = table[("S1", "gannet", "stock", "async flush, R1")]
    theirs = table[("S1", "rocketmq", "stock", "async flush, R1")]
    assert mine["produce_msgs_per_s"] == 200
    assert mine["send_p99_ms"] == 3.0
    assert theirs["runs"] == 1
    assert theirs["failed_runs"] == 1
    assert theirs["errors"] == ["boom"]
    ratios = stats.ratios(table, "produce_msgs_per_s")
    assert ratios == {("S1", "rocketmq", "stock", "async flush, R1"): 0.5}
    assert stats.ratio(1.0, 0.0) is None


def test_report_renders_targets_ratios_and_skips_from_a_fixture(tmp_path: Path) -> None:
    lines = [
        _rec("gannet", 0, 999, 1, run_id="r1"),  # an older run of the same row: ignored
        _rec("gannet", 0, 200, 20),
        _rec("rocketmq", 0, 400, 10),
        {"run_id": "r2", "scenario": "S5", "system": "nats", "mode": "batched",
         "durability": "sync flush, R1", "skipped": "nats-server 2.9 has no per-message fsync"},
    ]  # fmt: skip
    jsonl = tmp_path / "peers.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "REPORT.md"
    report.write(jsonl, out, tmp_path / "img")
    text = out.read_text()
    assert "PRELIMINARY" in text
    assert "Gannet 200/s vs RocketMQ 400/s = 0.50× (target ≥ 1.00×): **NOT met**" in text
    assert "Gannet 20/s vs RocketMQ 10/s = 2.00× (target ≥ 1.00×): **met**" in text
    assert "| rocketmq | stock | async flush, R1 | 1,024 | 400 |" in text
    assert "0.50× / 2.00× / 2.00×" in text
    assert "999" not in text
    assert "nats-server 2.9 has no per-message fsync" in text
    assert (tmp_path / "img" / "throughput_produce.png").stat().st_size > 1000


def test_committed_report_is_what_the_generator_renders() -> None:
    # REPORT.md is generated: what it says beyond the runs (the dated notes measured outside
    # the harness) lives in bench/loadgen/report.py, so regenerating it loses nothing.
    results = Path(report.__file__).resolve().parent.parent / "results"
    committed = (results / "REPORT.md").read_text()
    images = re.findall(r"^!\[[^\]]*\]\(img/([^)]+)\)$", committed, re.M)
    assert images
    assert all((results / "img" / name).is_file() for name in images)
    assert report.render(report.load(results / "peers.jsonl"), images) == committed
    assert "Runs of the rows shown: 2026-11-22" in committed
    for date, title, files, text in report.DATED_NOTES:
        assert f"**{date}, {title}.** {text}" in committed
        assert all((results / name).is_file() for name in files), files


def test_report_names_the_line_that_is_not_json(tmp_path: Path) -> None:
    jsonl = tmp_path / "peers.jsonl"
    jsonl.write_text(json.dumps(_rec("gannet", 0, 1, 1)) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"peers.jsonl:2: not JSON"):
        report.load(jsonl)


def test_combining_workers_spans_first_start_to_last_message() -> None:
    a = WorkerResult(
        done=100, start_s=10.0, end_s=12.0, payload_bytes=100, latencies_s=[0.001], cpu_s=0.01
    )
    b = WorkerResult(
        done=300, start_s=10.5, end_s=14.0, payload_bytes=300, latencies_s=[0.003], cpu_s=0.03
    )
    idle = WorkerResult(errors=2, first_error="refused")
    usage = processes.Usage(cpu_s=0.2, write_bytes=800, peak_rss_bytes=1)
    result = phases.combine([a, b, idle], usage)
    assert result.done == 400
    assert result.elapsed_s == 4.0
    assert result.msgs_per_s == 100.0
    assert result.errors == 2
    assert result.first_error == "refused"
    assert result.latency_ms["max"] == pytest.approx(3.0)
    assert result.client_cpu_us_per_msg == pytest.approx(100.0)


def test_a_worker_counts_its_own_cpu_from_begin_to_its_last_message() -> None:
    result = WorkerResult()
    result.begin()
    deadline = time.process_time() + 0.02
    while time.process_time() < deadline:
        pass
    result.record(0.001, 32, 100)
    assert result.done == 32
    assert result.cpu_s >= 0.02


def test_rocketmq_topics_json_and_broker_conf() -> None:
    layout = Layout(("a", "b"), 16, "g")
    table = json.loads(rocketmq.topics_json(layout))["topicConfigTable"]
    assert table["a"]["readQueueNums"] == table["b"]["writeQueueNums"] == 16
    assert table["a"]["perm"] == 6
    conf = rocketmq.broker_conf(Path("/s"), 9876, 20911, "sync")
    assert "flushDiskType=SYNC_FLUSH\n" in conf
    assert "namesrvAddr=127.0.0.1:9876\n" in conf
    assert "brokerRole=ASYNC_MASTER\n" in conf
    assert "rocketmq-proxy" in rocketmq.POM.read_text()
    assert f"<rocketmq.version>{rocketmq.VERSION}</rocketmq.version>" in rocketmq.POM.read_text()


@pytest.mark.timeout(30)
def test_child_process_group_is_started_metered_and_stopped(tmp_path: Path) -> None:
    script = "import socket,time;s=socket.socket();s.bind(('127.0.0.1',0));s.listen();" \
        "print(s.getsockname()[1],flush=True);sum(range(3_000_000));time.sleep(60)"  # fmt: skip
    child = processes.spawn("py", [sys.executable, "-c", script], tmp_path / "c.log")
    try:
        processes.wait_log(child, "\n", timeout_s=20)
        port = int(child.log_tail().split()[0])
        processes.wait_port(child, "127.0.0.1", port, timeout_s=10)
        with processes.Meter([child.pid]) as meter:
            socket.create_connection(("127.0.0.1", port)).close()
        assert meter.usage is not None
        assert meter.usage.peak_rss_bytes > 1_000_000
        assert child.pid in processes.descendants(child.pid)
    finally:
        code = processes.stop(child, grace_s=5)
    assert code is not None
    assert child.process.poll() is not None


@pytest.mark.timeout(30)
def test_a_child_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    child = processes.spawn(
        "dies", [sys.executable, "-c", "print('bad config: port');raise SystemExit(3)"],
        tmp_path / "d.log",
    )  # fmt: skip
    with pytest.raises(processes.PeerError, match=r"(?s)exited with 3.*bad config"):
        processes.wait_port(child, "127.0.0.1", processes.free_port(), timeout_s=20)


COLLAPSED = """\
_run (grpc/aio/_server.py:10);send (/w/node/gannet/node/api/messaging.py:5);put (/w/node/gannet/node/store/message_store.py:9) 30
_run (grpc/aio/_server.py:10);send (/w/node/gannet/node/api/messaging.py:5) 10
_run (grpc/aio/_server.py:10);ParseFromString (google/protobuf/message.py:3) 60
"""  # noqa: E501


def test_collapsed_stacks_are_aggregated_by_function_and_area() -> None:
    p = profile.parse_collapsed(COLLAPSED.splitlines())
    assert p.total == 100
    assert p.self_samples.most_common(1)[0] == ("ParseFromString (google/protobuf/message.py)", 60)
    assert p.inclusive["_run (grpc/aio/_server.py)"] == 100
    assert p.inclusive["send (gannet/node/api/messaging.py)"] == 40
    assert p.areas == {"protobuf": 60, "gannet store": 30, "gannet api (v2 servicers)": 10}
    text = profile.render("phase", p, messages=1000, cpu_s=0.5)
    assert "**500 µs/message**" in text
    assert "| protobuf | 60.0% | 300 |" in text
    assert "`send (gannet/node/api/messaging.py)` | 40.0%" in text
    with pytest.raises(ValueError, match="line 1 has no trailing count"):
        profile.parse_collapsed(["a;b;c"])


def test_generated_profile_section_keeps_the_hand_written_text() -> None:
    doc = "# P\n\nfindings\n\n<!-- profile:begin -->\nold\n<!-- profile:end -->\n\nmore\n"
    new = profile.splice(doc, "fresh")
    assert "old" not in new
    assert "fresh" in new
    assert new.startswith("# P\n\nfindings")
    assert new.endswith("more\n")
    assert profile.splice("# P\n", "x").endswith(
        "<!-- profile:begin -->\nx\n<!-- profile:end -->\n"
    )


def test_a_frame_holding_a_newline_is_joined_to_its_count() -> None:
    p = profile.parse_collapsed(["a (x.py:1);weird", "name (y.py:2) 5", "a (x.py:1) 2"])
    assert p.total == 7
    assert p.self_samples["weird\nname (y.py)"] + p.self_samples["weirdname (y.py)"] == 5


def test_notes_in_parentheses_do_not_split_a_durability_class() -> None:
    nats = {**_rec("nats", 0, 100, 10), "durability": "async flush, R1 (no fsync per publish)"}
    table = stats.medians([_rec("gannet", 0, 50, 10), nats])
    assert stats.ratios(table, "produce_msgs_per_s") == {
        ("S1", "nats", "stock", "async flush, R1"): 0.5
    }


def test_scale_and_repetitions_override_counts_and_are_recorded() -> None:
    chosen = scenarios.select(["S1", "S3"], quick=False, scale=0.2, repetitions=3)
    s1, s3 = chosen
    assert (s1.messages, s1.warmup_messages, s1.repetitions, s1.scale) == (2_000, 200, 3, 0.2)
    assert (s3.messages, s3.warmup_messages) == (40_000, 2_000)
    assert s1.settings()["scale"] == 0.2
    assert s1.settings()["messages"] == 2_000
    assert s1.quick().messages == s1.messages // 5  # factors compound from the given scenario
    assert s1.quick().scale == pytest.approx(0.04)
    tiny = scenarios.SCENARIOS["S2"].scaled(0.0001)
    assert tiny.messages == 40  # at least 10 per producer
    assert tiny.warmup_messages == 4
    only_reps = scenarios.select(["S9"], quick=False, repetitions=5)[0]
    assert (only_reps.messages, only_reps.repetitions) == (2_000, 5)
    assert scenarios.select(["S9"], quick=False)[0] is scenarios.SCENARIOS["S9"]
    assert scenarios.SCENARIOS["S1"].quick().scale == 0.2


def test_bad_scale_or_repetitions_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="scale=0"):
        scenarios.SCENARIOS["S1"].scaled(0)
    with pytest.raises(ValueError, match="repetitions=0"):
        scenarios.SCENARIOS["S1"].scaled(1.0, repetitions=0)
    with pytest.raises(ValueError, match="quick already means"):
        scenarios.select(["S1"], quick=True, scale=0.5)


def test_run_cli_refuses_bad_sizes_with_exit_code_2() -> None:
    from click.testing import CliRunner

    from bench.loadgen import run

    runner = CliRunner()
    for args, needle in (
        (["--scale", "0"], "--scale"),
        (["--repetitions", "0"], "--repetitions"),
        (["--quick", "--repetitions", "2"], "quick already means"),
        (["--systems", "gannet,kafkaesque"], "unknown system"),
    ):
        done = runner.invoke(run.main, [*args, "--no-report"])
        assert done.exit_code == 2, (args, done.output)
        assert needle in done.output


def test_report_states_the_effective_sizes_of_each_run(tmp_path: Path) -> None:
    sized = scenarios.SCENARIOS["S1"].scaled(0.2, repetitions=3).settings()
    lines = [
        {**_rec("gannet", rep, 200, 20), "settings": {"scenario": sized, "system": {}}}
        for rep in range(3)
    ]
    lines.append({**_rec("redis", 0, 100, 10), "settings": {"scenario": {**sized, "scale": 1.0,
                  "messages": 10_000, "warmup_messages": 1_000, "repetitions": 1}}})  # fmt: skip
    text = report.render(lines, [])
    assert "Run sizes: scale 0.2, 1 of each scenario's defined" in text
    assert "2,000 measured messages after 200 warm-up, 3 repetition(s), scale 0.2 (gannet)" in text
    assert "10,000 measured messages after 1,000 warm-up, 1 repetition(s), scale 1 (redis)" in text
    uniform = report.render(lines[:3], [])
    assert "Measured here: 2,000 measured messages after 200 warm-up, 3 repetition(s), " \
        "scale 0.2." in uniform  # fmt: skip


def _row(scenario: str, system: str, mode: str, durability: str, **metrics: float) -> Any:
    return {
        **_rec(system, 0, metrics.pop("produce", 0.0), metrics.pop("consume", 0.0)),
        "scenario": scenario,
        "mode": mode,
        "durability": durability,
        **metrics,
    }


def test_report_judges_the_earlier_targets_on_one_core_and_names_next_steps() -> None:
    lines = [
        _row("S2", "gannet", "stock", "async flush, R1", produce=900, broker_cpu_us_per_msg=400),
        _row("S2", "redis", "stock", "async flush, R1", produce=1800, consume=10),
        _row("S3", "gannet", "batched", "async flush, R1", produce=9_000, consume=2_000,
             broker_cpu_us_per_msg=10, consume_cpu_us_per_msg=500),
        _row("S3", "redis", "batched", "async flush, R1", produce=4_500, consume=4_000),
        _row("S5", "gannet", "batched", "sync flush, R1", produce=4_000),
        _row("S6", "gannet-r3", "batched", "sync flush, R3", produce=1_000),
    ]  # fmt: skip
    text = report.render(lines, [])
    # One-core capacity = 1e6 / CPU µs per message: 2,500/s of 5,000 is half the target.
    assert "| 4 | official client, 1 msg/RPC (S2 produce) ≥ 5,000/s | 900/s | 400 | 2,500/s | " \
        "**NOT met** (0.50× of target) |" in text  # fmt: skip
    assert "≥ 80,000/s | 9,000/s | 10 | 100,000/s | met (1.25×) |" in text
    assert "(S3 consume) ≥ 12,000/s | 2,000/s | 500 | 2,000/s | **NOT met** (0.17× of" in text
    assert "| 5 | 3-node ÷ 1-node batched produce (S6 ÷ S5, sync flush) ≥ 0.50 | 0.25× |" in text
    assert "| redis | S2 (stock) | 0.50× | 0.00× |" in text
    assert "- **stock consume**:" in text
    assert "| redis | S3 (batched) | 2.00× | 0.50× |" in text
    # Only the kinds where Gannet trails get a next step.
    assert "- **stock produce**:" in text
    assert "- **batched consume**:" in text
    assert "- **batched produce**:" not in text


def test_cpu_times_leave_out_idle_and_iowait() -> None:
    text = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n"
    assert procfs.parse_cpu_times(text) == (160, 1000)
    with pytest.raises(procfs.ProcFormatError, match="no complete 'cpu' line"):
        procfs.parse_cpu_times("cpu0 1 2 3 4 5\n")
    busy = processes.cpu_busy_fraction(0.05)
    assert 0.0 <= busy <= 1.0
    # A process tree that spins is excluded when named: what is left is everything else. Both
    # shares come from one window, so other work on a shared machine cannot blur the check.
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        machine, others = processes.cpu_busy_split(0.5, exclude_roots=[spinner.pid])
        assert 0.0 <= others <= machine <= 1.0
        assert machine - others >= 0.02, "the spinner's CPU time was not subtracted"
    finally:
        spinner.kill()
        spinner.wait()


def test_report_banner_follows_the_cpu_busy_check() -> None:
    quiet = [{**_rec("gannet", 0, 100, 10), "other_busy_before": 0.02, "preliminary": False}]
    text = report.render(quiet, [])
    assert "PRELIMINARY" not in text
    assert "other work than the system under test kept 2%–2% of 2 CPUs busy before runs" in text
    shared = [{**_rec("gannet", 0, 100, 10), "other_busy_before": 0.4, "preliminary": True}]
    assert "other work than the system under test kept 40%–40% of 2 CPUs" in report.render(
        shared, []
    )
    machine = [{**_rec("gannet", 0, 100, 10), "cpu_busy_before": 0.3, "preliminary": True}]
    assert "own background work included, was 30%–30%" in report.render(machine, [])
    old = [_rec("gannet", 0, 100, 10)]  # no cpu_busy_before: judged by the load average
    assert "predate the CPU-busy check" in report.render(old, [])


def test_a_scenario_note_is_printed_under_its_table() -> None:
    rows = [{**_rec("gannet", 0, 100, 10), "scenario": "S9", "message_size_bytes": 65536}]
    text = report.render(rows, [])
    assert "Note: Receive + ack of 64 KiB messages is bound by the official Python client" in text
    assert "Note:" not in report.render([_rec("gannet", 0, 100, 10)], [])
