"""``gannet broker run`` security options: bad files are refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gannet.node import cli


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli.main,
        ["broker", "run", "--data-dir", str(tmp_path / "data"), "--metrics-listen", "", *args],
    )
    return result.exit_code, result.output


def test_bad_auth_file_is_a_usage_error_naming_the_field(tmp_path: Path):
    bad = tmp_path / "accounts.json"
    bad.write_text(json.dumps({"accounts": [{"access_key": "k", "secret_key": ""}]}))
    code, output = _run(tmp_path, "--auth-file", str(bad))
    assert code == 2
    assert "accounts[0].secret_key: expected a non-empty string" in output
    assert not (tmp_path / "data").exists()  # refused before the store was created


def test_tls_key_without_certificate_is_a_usage_error(tmp_path: Path):
    key = tmp_path / "tls.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    code, output = _run(tmp_path, "--tls-key", str(key))
    assert code == 2
    assert "TLS needs both --tls-cert and --tls-key" in output


def test_help_lists_the_security_options():
    result = CliRunner().invoke(cli.main, ["broker", "run", "--help"])
    assert result.exit_code == 0
    for option in ("--auth-file", "--auth-skew-s", "--tls-cert", "--tls-key", "--tls-client-ca"):
        assert option in result.output
