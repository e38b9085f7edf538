"""``python -m bench.loadgen.profile``: where a Gannet broker's CPU goes per message.

Starts ``gannet broker run`` (async flush, one topic × 16 queues), attaches ``py-spy record``
(bench extra; sampling at 250 Hz, raw collapsed stacks, only threads holding the GIL — so
waits on locks and time in gRPC's C core without the GIL do not count) for each of three
phases — official-client sends (1 message per RPC), batched raw sends (32 per RPC), Pop
receive + ack — and writes, per phase, the functions with the most self and inclusive samples
and the share per area (gRPC core, protobuf, Gannet api / store / pop, Python stdlib), into the
generated section of ``bench/results/PROFILE.md`` (between the ``profile:begin`` / ``profile:end``
markers; the hand-written findings around it are kept). Raw stacks go to bench/results/raw/.

Collapsed-stack format (py-spy ``--format raw``): one line per distinct stack,
``frame;frame;...;leaf count``, each frame ``function (file:line)``, root first.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import click

from bench.loadgen import drivers, phases, run
from bench.loadgen.scenarios import SCENARIOS
from bench.peers import gannet, processes
from bench.peers.base import Layout

RESULTS = Path(__file__).resolve().parent.parent / "results"
BEGIN, END = "<!-- profile:begin -->", "<!-- profile:end -->"
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
AREAS = (
    ("gannet api (v2 servicers)", "node/api/"),
    ("gannet broker glue", "node/broker/"),
    ("gannet store", "node/store/"),
    ("gannet pop", "node/pop/"),
    ("gannet metrics", "node/metrics/"),
    ("grpc (aio / cygrpc)", "grpc/"),
    ("protobuf", "google/protobuf/"),
    ("asyncio", "asyncio/"),
    ("threading / queue / concurrent", "threading.py"),
)


@dataclass(frozen=True)
class Profile:
    total: int
    self_samples: Counter[str]
    inclusive: Counter[str]
    areas: Counter[str]  # by the innermost frame whose file names an area


def _short(frame: str) -> str:
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/node/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match['func']} ({path})"


def parse_collapsed(lines: Iterable[str]) -> Profile:
    """Aggregate py-spy raw output. Bad lines raise ValueError naming the line."""
    self_samples: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    pending, pending_from = "", 0
    for number, raw_line in enumerate(lines, 1):
        # A frame's text may hold a newline (a code object's name): join until the count.
        line = pending + raw_line.rstrip("\n")
        pending_from = pending_from or number
        if not line.strip():
            pending, pending_from = "", 0
            continue
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            pending = line
            continue
        pending, pending_from = "", 0
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        names = [_short(f) for f in frames]
        total += count
        self_samples[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
        area = "other (python, C extensions)"
        for frame in reversed(frames):
            found = next((label for label, needle in AREAS if needle in frame), None)
            if found:
                area = found
                break
        areas[area] += count
    if pending:
        raise ValueError(
            f"collapsed stack line {pending_from} has no trailing count: {pending[:80]!r}"
        )
    return Profile(total, self_samples, inclusive, areas)


def render(name: str, profile: Profile, messages: int, cpu_s: float, top: int = 12) -> str:
    """A Markdown section for one phase: totals, areas, top self and inclusive functions."""
    us_per_msg = cpu_s / max(messages, 1) * 1e6
    out = [
        f"### {name}",
        "",
        f"{messages:,} messages, broker CPU {cpu_s:.2f} s = **{us_per_msg:,.0f} µs/message**; "
        f"{profile.total:,} GIL-holding samples. Shares are of GIL-held time; the µs column "
        "spreads the whole CPU figure over them (it includes C work done without the GIL).",
        "",
        "| area (innermost matching frame) | share | ≈ µs/msg |",
        "| --- | ---: | ---: |",
    ]
    for area, count in profile.areas.most_common():
        share = count / max(profile.total, 1)
        out.append(f"| {area} | {share:.1%} | {share * us_per_msg:,.0f} |")
    out += ["", "| top self time | share |", "| --- | ---: |"]
    for func, count in profile.self_samples.most_common(top):
        out.append(f"| `{func}` | {count / max(profile.total, 1):.1%} |")
    out += ["", "| top inclusive (gannet frames) | share |", "| --- | ---: |"]
    gannet_frames = [
        (f, c)
        for f, c in profile.inclusive.most_common()
        if any(needle in f for _, needle in AREAS[:5])
    ]
    for func, count in gannet_frames[:top]:
        out.append(f"| `{func}` | {count / max(profile.total, 1):.1%} |")
    out.append("")
    return "\n".join(out)


def splice(document: str, generated: str) -> str:
    """Replace the text between the markers (appending markers if absent)."""
    if BEGIN in document and END in document:
        head, _, rest = document.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return f"{head}{BEGIN}\n{generated}\n{END}{tail}"
    return f"{document.rstrip()}\n\n{BEGIN}\n{generated}\n{END}\n"


def _py_spy() -> str:
    path = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(path).exists():
        raise click.ClickException("py-spy not installed: pip install -e '.[bench]'")
    return path


def _recorded(
    pid: int, out: Path, phase: str, specs: list[drivers.WorkerSpec], meter_pids: list[int]
) -> phases.PhaseResult:
    spy = subprocess.Popen(
        [_py_spy(), "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
         "--output", str(out), "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        result = phases.run(phase, specs, meter_pids)
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            spy.kill()
    return result


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", default=6000, show_default=True, help="Per phase (stock sends).")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS / "PROFILE.md",
    show_default=True,
)  # fmt: skip
def main(messages: int, out: Path) -> None:
    """Profile a Gannet broker under official-client sends, batched sends and receive+ack."""
    raw_dir = RESULTS / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    stock = dataclasses.replace(SCENARIOS["S2"].quick(), messages=messages, warmup_messages=400)
    batched = SCENARIOS["S3"].quick()
    layout = Layout((f"profile-{tag}",), 16, f"g-{tag}")
    sections = []
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        running = gannet.start(Path(tmp), "async", 1, layout)
        try:
            pid = running.pids[0]
            plan = [
                ("official client SendMessage (1 msg/RPC, S2)", stock, "rmq_stock", "produce"),
                ("raw SendMessage, 32 msgs/RPC (S3 shape)", batched, "rmq_raw", "produce"),
                ("Pop receive (32) + ack, official client", stock, "rmq_stock", "consume"),
            ]  # fmt: skip
            for title, scenario, client, role in plan:
                specs = run.specs_for(role, running, client, scenario, layout)
                if role == "consume":
                    # drain everything the two send phases left (stops when idle)
                    specs = [
                        dataclasses.replace(s, expected_total=10**9, deadline_s=30) for s in specs
                    ]
                raw = raw_dir / f"profile-{client}-{role}.txt"
                result = _recorded(pid, raw, role, specs, running.pids)
                profile = parse_collapsed(raw.read_text().splitlines())
                sections.append(render(title, profile, result.done, result.usage.cpu_s))
                click.echo(f"{title}: {result.done} msgs, {result.usage.cpu_s:.2f} s CPU")
        finally:
            running.stop()
    load = processes.loadavg()
    header = (
        f"Generated by `python -m bench.loadgen.profile` (py-spy 250 Hz, {os.cpu_count()} CPUs, "
        f"1-minute load average {load[0]:.1f} at the end — other work shared the machine)."
    )
    document = out.read_text() if out.exists() else "# Where Gannet's broker time goes\n"
    out.write_text(splice(document, header + "\n\n" + "\n".join(sections)))
    click.echo(f"wrote {out}")


if __name__ == "__main__":
    main()
