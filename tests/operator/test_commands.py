"""`gannet operator`: registered on the gannet command, --help everywhere, bad values exit 2."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from gannet.node.cli.root import main


@pytest.mark.parametrize(
    "args", [["--help"], ["operator", "--help"], ["operator", "run", "--help"]]
)
def test_help(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "operator" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--refresh-interval-s", "0"], "not a positive number"),
        (["--metrics-listen", "nonsense"], "is not host:port"),
        (["--broker-endpoint", "localhost"], "is not host:port"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["operator", "run", *args])
    assert result.exit_code == 2
    assert message in result.output


def _operator_stderr(flags: list[str], until: str) -> list[str]:
    """Run `gannet operator run` as a process (the real command path: the `gannet` group sets
    up logging first), against an address that refuses connections, read stderr until a line
    containing ``until``, then stop it with SIGINT; returns every stderr line."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = reserved.getsockname()[1]
        gannet = Path(sys.executable).parent / "gannet"
        args = ["operator", "run", "--server", f"http://127.0.0.1:{port}", "--metrics-listen", ""]
        with subprocess.Popen(
            [str(gannet), *args, *flags], stderr=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stderr is not None
            lines = []
            # Never reading past a deadline: a run that never logs ``until`` is stopped too.
            deadline = threading.Timer(30, proc.send_signal, (signal.SIGINT,))
            deadline.start()
            try:
                for line in proc.stderr:
                    lines.append(line)
                    if until in line:
                        break
            finally:
                deadline.cancel()
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                lines.extend(proc.stderr)
                proc.wait(timeout=20)
    return lines


@pytest.mark.timeout(60)
def test_operator_run_verbose_logs_debug() -> None:
    """`gannet operator run --verbose` logs DEBUG records (the chart's operator.verbose adds
    --verbose): the `gannet` group configures logging at WARNING first, and the operator's own
    level must still win."""
    lines = _operator_stderr(["--verbose"], until="Initial authentication has finished")
    assert any(" DEBUG kopf." in line for line in lines), "".join(lines)
    assert any(" INFO kopf." in line for line in lines), "".join(lines)


@pytest.mark.timeout(60)
def test_operator_run_logs_info_without_debug() -> None:
    lines = _operator_stderr([], until="Initial authentication has finished")
    assert any(" INFO kopf." in line for line in lines), "".join(lines)
    assert not any(" DEBUG " in line for line in lines), "".join(lines)
