"""`gannet operator`: registered on the gannet command, --help everywhere, bad values exit 2."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gannet.node.cli import main


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
