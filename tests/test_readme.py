"""The README and the guides run: every ``sh``/``bash`` and ``python`` block of README.md and of
the ``docs/`` pages is executed, in order, against a real ``gannet broker run`` process on free
127.0.0.1 ports in a temporary directory, as a reader following the page would run them.

Each page is one test. The README runs against the broker ``make run`` starts (its command is
read from the Makefile). A ``docs/`` page continues the README's quick start: the README's
blocks run first, then the page's, on the same store, against the page's own ``gannet broker
run`` block if it has one and ``make run``'s otherwise. A ``docs/`` page takes part when it has
a runnable block; blocks of other languages (``json``, plain text) are not run.

An HTML comment on the line before a block says how to run it:

* ``<!-- doctest: skip (reason) -->`` — not run; the reason is required (a Kubernetes cluster,
  Docker, a Spark cluster, a command that serves until Ctrl-C).
* ``<!-- doctest: broker (...) -->`` — the page's one ``gannet broker run`` command, which the
  test starts in the background (with ``--listen`` and ``--metrics-listen`` on free ports) for
  the other blocks.
* ``<!-- doctest: broker stopped -->`` — run with that broker stopped (``store get`` and
  ``store query`` refuse a store a broker holds); the next block without it starts it again on
  the same store.

What the test changes, and nothing else: ``HOME`` is a temporary directory (so
``~/.gannet/store`` is a fresh store), ``/tmp/`` in a block becomes the temporary directory,
``127.0.0.1:8081``, ``127.0.0.1:5557`` and ``127.0.0.1:9876`` become the broker's ports
(``GANNET_ENDPOINT`` is set for the CLI's default; ``make run``'s remoting ports become free
ones too), and ``.venv/bin/`` is the directory of the interpreter running the test.
Python blocks run under that interpreter with ``PYSPARK_PYTHON`` unset and a ``python3`` on PATH
that has no Gannet installed (the interpreter the virtual environment was made from), as on a
machine where the README's ``.venv`` is not activated. Shell blocks run with ``bash -euo
pipefail``: every command must succeed.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
DEVELOPMENT = DOCS / "development.md"
MAKEFILE = REPO / "Makefile"
RUNNABLE = {"sh", "bash", "python"}
# A fence may be indented (a block inside a list item); its lines lose that indentation.
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```\n", re.M | re.S)
MARKER = re.compile(r"<!-- doctest: (.*?) -->\s*$")
SKIP = re.compile(r"skip \((?P<reason>[^)]{10,})\)")
BLOCK_TIMEOUT_S = 600.0  # a loaded 2-core machine runs the three Spark jobs in minutes
BROKER_START_S = 60.0


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str  # the doctest comment's text, "" without one

    @property
    def skipped(self) -> bool:
        return self.marker.startswith("skip")

    @property
    def broker(self) -> bool:
        return self.marker.startswith("broker (") or self.marker == "broker"

    @property
    def offline(self) -> bool:
        return self.marker == "broker stopped"


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` with the doctest marker on the line before it."""
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        indent = len(match.group(1))
        lines = match.group(3).splitlines(keepends=True)
        found.append(
            Block(
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group(2),
                code="".join(line[indent:] if line.strip() else line for line in lines),
                marker=marker.group(1).strip() if marker else "",
            )
        )
    return found


def page_blocks(page: Path) -> list[Block]:
    """The blocks of a page the test deals with: all of the README's (each must be runnable or
    skipped), the ``sh``/``bash``/``python`` ones of a ``docs/`` page."""
    found = blocks(page.read_text())
    return found if page == README else [b for b in found if b.language in RUNNABLE]


def docs_pages() -> list[Path]:
    """The ``docs/`` pages with at least one block the test runs."""
    return [
        page for page in sorted(DOCS.rglob("*.md")) if any(not b.skipped for b in page_blocks(page))
    ]


PAGES = [README, *docs_pages()]


def name(page: Path) -> str:
    return str(page.relative_to(REPO))


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_blocks_are_found_and_marked_well(page: Path) -> None:
    found = page_blocks(page)
    for block in found:
        where = f"{name(page)}:{block.line}"
        assert block.language in RUNNABLE, f"{where}: block without sh/bash/python language"
        if block.skipped:
            assert SKIP.fullmatch(block.marker), f"{where}: a skipped block needs a (reason)"
        else:
            assert block.marker in ("", "broker stopped") or block.broker, f"{where}: {block!r}"
    assert sum(b.broker for b in found) <= 1, f"{name(page)}: more than one broker block"
    if page == README:  # it runs against `make run`'s broker: it shows no other
        assert not any(b.broker for b in found), "the README's broker is make run's"
        assert sum(not b.skipped for b in found) >= 4, "the README's blocks were not found"


def test_every_page_that_runs_is_found() -> None:
    # The pages the README's blocks moved to, each with blocks that run; and as many blocks
    # run in all as when they were all on the README (14 besides its broker).
    assert {name(p) for p in PAGES} >= {
        "README.md",
        "docs/messages.md",
        "docs/cli.md",
        "docs/pipeline.md",
    }
    run = [b for page in PAGES for b in page_blocks(page) if not b.skipped and not b.broker]
    assert len(run) >= 14, len(run)
    # A docs page whose sh/python blocks are all skipped is not run: its blocks say why.
    for page in sorted(DOCS.rglob("*.md")):
        for block in page_blocks(page):
            if page not in PAGES:
                assert SKIP.fullmatch(block.marker), f"{name(page)}:{block.line}: {block!r}"


def make_run_command() -> str:
    """The broker command of ``make run``'s recipe, with the Makefile's variables filled in as
    a reader's shell would see them (``$(HOME)`` as ``~``)."""
    makefile = MAKEFILE.read_text()
    variables: dict[str, str] = dict(re.findall(r"^([A-Z_]+) *[:?]?= *(.*?) *$", makefile, re.M))
    variables["HOME"] = "~"
    command: str
    (command,) = re.findall(r"^run:.*\n\t(.+)$", makefile, re.M)
    while "$(" in command:
        command = re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], command)
    return command


def test_make_run_serves_the_readmes_store() -> None:
    command = make_run_command()
    assert command == (
        ".venv/bin/gannet broker run --data-dir ~/.gannet/store --auto-create-groups"
        " --remoting-port 10911 --nameserver-port 9876"  # docs/remoting.md: 4.x clients too
    )
    readme = README.read_text()
    (line,) = [line for line in readme.splitlines() if line.startswith("make run ")]
    assert line.endswith("starts a single-node broker on ~/.gannet/store"), line
    assert "--auto-create-groups" in readme  # the README says why its consumer needs no group


def test_marker_parsing() -> None:
    text = "x\n<!-- doctest: skip (needs a Kubernetes cluster) -->\n```sh\nkubectl get gc\n```\n"
    text += "```python\nprint(1)\n```\n"
    first, second = blocks(text)
    assert first.skipped
    assert first.code == "kubectl get gc\n"
    assert first.line == 3
    assert not second.skipped
    assert second.marker == ""
    assert second.language == "python"
    assert not SKIP.fullmatch("skip")
    assert not SKIP.fullmatch("skip ()")
    indented = "* a list item:\n\n  <!-- doctest: skip (needs a Kubernetes cluster) -->\n"
    indented += "  ```sh\n  kubectl get gc \\\n    -n gannet\n  ```\n"
    (block,) = blocks(indented)
    assert block.skipped
    assert block.code == "kubectl get gc \\\n  -n gannet\n"


def test_readme_and_makefile_agree() -> None:
    readme = README.read_text()
    makefile = MAKEFILE.read_text()
    # make test installs a JRE and promtool with apt-get: the README says so.
    assert "apt-get" in readme
    assert "openjdk-17-jre-headless" in readme
    assert "promtool" in readme
    assert "openjdk-17-jre-headless" in makefile
    assert "install-promtool.sh" in makefile
    # The benchmark duration is the same on both (the other targets are in docs/development.md).
    development = DEVELOPMENT.read_text()
    (in_make,) = re.findall(r"## bench-standard:.*?\((about \d+ min on 2 cores)", makefile)
    (row,) = [
        line for line in development.splitlines() if line.startswith("| `make bench-standard`")
    ]
    assert in_make in row, (in_make, row)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    """The README's ``gannet broker run`` line as a background process on free ports."""

    def __init__(self, command: str, env: dict[str, str], log: Path) -> None:
        # make run's fixed remoting ports (10911, 9876) become free ones as well: another
        # broker on this machine (a second checkout's suite, a developer's make run) may hold them.
        fixed = {"10911": env["DOCTEST_REMOTING_PORT"], "9876": env["DOCTEST_NAMESERVER_PORT"]}
        self.argv = [
            *(fixed.get(a, a) for a in shlex.split(command)),
            "--listen",
            env["GANNET_ENDPOINT"],
            "--metrics-listen",
            env["DOCTEST_METRICS"],
        ]
        # As the reader's shell would: ~ is the (temporary) HOME of the blocks.
        self.argv = [env["HOME"] + a[1:] if a.startswith("~/") else a for a in self.argv]
        assert not any(a.startswith("~") for a in self.argv), self.argv
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.process is None
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        ready = f"http://{self.env['DOCTEST_METRICS']}/readyz"
        deadline = time.monotonic() + BROKER_START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"broker exited {self.process.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(ready, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)  # polling /readyz: the broker offers no other start signal
        raise AssertionError(f"broker not ready in {BROKER_START_S} s: {self.tail()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self.process = None
        assert code == 0, f"broker exited {code} on Ctrl-C: {self.tail()}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def substituted(code: str, env: dict[str, str], bin_dir: Path, tmp: Path) -> str:
    """The block as the test runs it. ``/tmp/`` is replaced first: the paths put in after it
    (the checkout's ``.venv/bin``) may themselves lie under /tmp, and must stay as they are."""
    return (
        code.replace("/tmp/", f"{tmp}/")
        .replace("127.0.0.1:8081", env["GANNET_ENDPOINT"])
        .replace("127.0.0.1:5557", env["DOCTEST_METRICS"])
        .replace("127.0.0.1:9876", f"127.0.0.1:{env['DOCTEST_NAMESERVER_PORT']}")
        .replace(".venv/bin/", f"{bin_dir}/")
    )


def test_substitution_keeps_a_checkout_under_tmp_intact(tmp_path: Path) -> None:
    env = {
        "GANNET_ENDPOINT": "127.0.0.1:1",
        "DOCTEST_METRICS": "127.0.0.1:2",
        "DOCTEST_NAMESERVER_PORT": "3",
    }
    code = ".venv/bin/gannet store get /tmp/store 127.0.0.1:8081"
    got = substituted(code, env, Path("/tmp/ci/clone/.venv/bin"), tmp_path)
    assert got == f"/tmp/ci/clone/.venv/bin/gannet store get {tmp_path}/store 127.0.0.1:1"


@pytest.fixture
def reader_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    plain = tmp_path / "plain-python"
    plain.mkdir()
    # The interpreter the venv was made from: no Gannet, as `python3` on a reader's PATH.
    base = Path(getattr(sys, "_base_executable", "") or "/usr/bin/python3")
    (plain / "python3").symlink_to(base)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "GANNET_"))}
    env.update(
        HOME=str(home),
        PATH=f"{plain}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        GANNET_ENDPOINT=f"127.0.0.1:{free_port()}",
        DOCTEST_METRICS=f"127.0.0.1:{free_port()}",
        DOCTEST_REMOTING_PORT=str(free_port()),
        DOCTEST_NAMESERVER_PORT=str(free_port()),
        PYTHONUNBUFFERED="1",
    )
    env.pop("VIRTUAL_ENV", None)
    return env


# Pages whose blocks start Spark: docs/pipeline.md, after the README's blocks, takes about
# 1.5 min on an idle 2-core machine (four Spark jobs start a JVM each), more under load. `make
# test` leaves them to `make test-docs-spark` (which CI runs after it); the jobs themselves are
# tested in tests/pipeline.
SPARK_PAGES = {DOCS / "pipeline.md"}
SPARK_PAGES_ENV = "GANNET_DOCS_SPARK"


def test_spark_pages_are_the_pages_that_start_spark() -> None:
    starts_spark = {
        page
        for page in PAGES
        for b in page_blocks(page)
        if not b.skipped and ("gannet pipeline" in b.code or "pyspark" in b.code)
    }
    assert starts_spark == SPARK_PAGES


# README.md alone: about 30 s.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_block_runs(page: Path, reader_env: dict[str, str], tmp_path: Path) -> None:
    if page in SPARK_PAGES and os.environ.get(SPARK_PAGES_ENV) != "1":
        pytest.skip(f"starts Spark: run by make test-docs-spark ({SPARK_PAGES_ENV}=1)")
    steps = [(page, b) for b in page_blocks(page)]
    if page != README:  # a docs page continues the README's quick start
        steps = [(README, b) for b in page_blocks(README)] + steps
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "gannet").exists(), f"no gannet command beside {sys.executable}"
    brokers = [b.code.strip() for _, b in steps if b.broker]
    (command,) = brokers or [make_run_command()]
    command = substituted(command, reader_env, bin_dir, tmp_path)
    assert "\n" not in command, "the broker block is one command"
    broker = Broker(command, reader_env, tmp_path / "broker.log")
    ran: list[str] = []
    try:
        for source, block in steps:
            if block.skipped or block.broker:
                continue
            where = f"{name(source)}:{block.line}"
            if block.offline:
                broker.stop()
            elif broker.process is None:
                broker.start()
            code = substituted(block.code, reader_env, bin_dir, tmp_path)
            if block.language == "python":
                argv = [sys.executable, "-c", code]
            else:
                argv = ["bash", "-euo", "pipefail", "-c", code]
            started = time.monotonic()
            done = subprocess.run(
                argv,
                env=reader_env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
                check=False,
            )
            took = time.monotonic() - started
            print(f"{where} ({block.language}) rc={done.returncode} {took:.1f}s")
            assert done.returncode == 0, (
                f"{where} failed (rc {done.returncode}):\n{block.code}\n"
                f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-5000:]}\n"
                f"--- broker\n{broker.tail() if broker.log.exists() else ''}"
            )
            assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr}"
            check_output(where, block, done.stdout)
            ran.append(where)
    finally:
        broker.stop()
    own = [w for w in ran if w.startswith(f"{name(page)}:")]
    assert len(own) == sum(not b.skipped and not b.broker for b in page_blocks(page)), ran


def check_output(where: str, block: Block, stdout: str) -> None:
    """What a reader should see from the blocks whose output says whether they worked."""
    if "FilterType.SQL" in block.code:  # the SQL92 filter passes order 1006 (amount 250) only
        assert stdout == "big order b'order 1006 paid'\n", f"{where}: {stdout}"
    elif "begin_transaction" in block.code:  # the half message committed
        assert stdout.startswith("committed "), f"{where}: {stdout}"
        assert stdout.count("\n") == 1, f"{where}: {stdout}"
    elif "LiteSimpleConsumer(" in block.code:  # its lite topic only; priorities high to low
        assert stdout == (
            "session-42 b'hello from session-42'\n"
            "priority 3 b'alert level 3'\npriority 1 b'alert level 1'\n"
            "priority 0 b'alert level 0'\n"
        ), f"{where}: {stdout}"
    elif "Producer(" in block.code:
        assert stdout.count("sent ") == 4, f"{where}: {stdout}"
    elif "SimpleConsumer(" in block.code:
        assert "got b'order 100" in stdout, f"{where}: {stdout}"
    if 'spark.read.format("gannet")' in block.code:
        # .show() prints each message's keys (the orders of the README's producer); the body
        # is binary (hex).
        for order in range(1001, 1005):
            assert f"[order-{order}]" in stdout, f"{where}: {stdout}"
    if "/metrics" in block.code:
        assert "gannet_messages_in" in stdout, f"{where}: {stdout}"
