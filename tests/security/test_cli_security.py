"""``gannet broker run`` security options: bad files are refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gannet.node.cli import root as cli


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
    for option in (
        "--auth-file",
        "--auth-skew-s",
        "--tls-cert",
        "--tls-key",
        "--tls-client-ca",
        "--peer-tls-cert",
        "--peer-tls-key",
        "--peer-tls-ca",
    ):
        assert option in result.output


def test_peer_tls_needs_all_three_files(tmp_path: Path):
    cert = tmp_path / "node.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    code, output = _run(
        tmp_path,
        "--node-id", "1", "--peers", "1=127.0.0.1:18091/18081",
        "--peer-tls-cert", str(cert),
    )  # fmt: skip
    assert code == 2
    assert "needs all three of --peer-tls-cert, --peer-tls-key, --peer-tls-ca" in output
    assert not (tmp_path / "data").exists()


def test_peer_tls_file_that_is_not_pem_is_named(tmp_path: Path):
    good = tmp_path / "node.crt"
    good.write_text("-----BEGIN CERTIFICATE-----\n")
    bad = tmp_path / "ca.crt"
    bad.write_text("hello\n")
    code, output = _run(
        tmp_path,
        "--node-id", "1", "--peers", "1=127.0.0.1:18091/18081",
        "--peer-tls-cert", str(good), "--peer-tls-key", str(good), "--peer-tls-ca", str(bad),
    )  # fmt: skip
    assert code == 2
    assert "cluster CA" in output
    assert "is not PEM" in output
