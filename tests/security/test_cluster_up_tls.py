"""``gannet cluster up --tls``: the cluster CA and member certificates it creates (kept, reused,
owner-only keys), the user's own ``--tls-cert/--tls-key/--tls-ca``, and the errors that name a
bad file and what to do; ``DATA_ROOT/client.env``. The run of real processes is in
:mod:`test_cluster_up_tls_run`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import stat
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gannet.node.cli import root as cli
from gannet.node.cli.cluster import commands as cluster
from gannet.node.cli.cluster import pki as cluster_pki
from gannet.node.cli.cluster import tls as cluster_tls

from . import certs

MEMBERS = ("broker-0-node1", "broker-0-node2")
HOST = "127.0.0.1"


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_created_once_owner_only_and_reused_with_new_members_from_the_same_ca(
    tmp_path: Path,
) -> None:
    tls_dir = tmp_path / "tls"
    first = cluster_pki.generated(tls_dir, MEMBERS, "127.0.0.2")
    ca = _cert(first.ca_file)
    assert _mode(tls_dir) == 0o700
    assert _mode(tls_dir / "ca.key") == 0o600
    for name in MEMBERS:
        files = first.members[name]
        assert _mode(files.key_file) == 0o600
        cert = _cert(files.cert_file)
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", name}
        assert set(sans.get_values_for_type(x509.IPAddress)) == {
            ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "127.0.0.2")
        }
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    before = {p.name: p.read_bytes() for p in tls_dir.iterdir()}
    again = cluster_pki.generated(tls_dir, (*MEMBERS, "broker-0-node3"), "127.0.0.2")
    assert {name: (tls_dir / name).read_bytes() for name in before} == before  # reused
    _cert(again.members["broker-0-node3"].cert_file).verify_directly_issued_by(ca)
    assert not [p for p in tls_dir.iterdir() if p.name.endswith(".tmp")]
    node1 = again.members["broker-0-node1"]
    assert again.argv("broker-0-node1") == [
        *("--tls-cert", str(node1.cert_file), "--tls-key", str(node1.key_file)),
        *("--peer-tls-cert", str(node1.cert_file), "--peer-tls-key", str(node1.key_file)),
        *("--peer-tls-ca", str(again.ca_file), "--cluster-tls-ca", str(again.ca_file)),
    ]


def test_every_member_runs_with_its_own_certificate(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    plans = cluster.plan_cluster(2, 1, HOST, 8081, root)
    names = [n for g in plans for n in g.member_names()]
    assert names == ["broker-0-node1", "broker-1-node1"]
    tls = cluster_tls.prepare(
        root, names, HOST, tls=True, tls_dir=None, cert_file=None, key_file=None, ca_file=None
    )
    assert tls is not None
    assert tls.ca_file == root / "tls" / "ca.crt"
    group = plans[1]
    argv = cluster.broker_argv(
        group.peers[0], group.peers, group.root, "sync", None,
        broker_name=group.broker_name, tls=tls,
    )  # fmt: skip
    cert = argv[argv.index("--tls-cert") + 1]
    assert cert == str(root / "tls" / "broker-1-node1.crt")
    assert argv[argv.index("--peer-tls-cert") + 1] == cert


def _reissue(
    tls_dir: Path, name: str, *, not_after: dt.datetime, key_file: Path | None = None
) -> None:
    """``name``'s certificate signed again by the generated CA, valid until ``not_after``."""
    ca = _cert(tls_dir / "ca.crt")
    ca_key = serialization.load_pem_private_key((tls_dir / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = serialization.load_pem_private_key(
        (key_file or tls_dir / f"{name}.key").read_bytes(), None
    )
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_after - dt.timedelta(days=2))
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (tls_dir / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _refusal(tls_dir: Path, members: tuple[str, ...] = MEMBERS) -> str:
    with pytest.raises(click.ClickException) as refused:
        cluster_pki.generated(tls_dir, members, HOST)
    return refused.value.format_message()


def test_bad_generated_files_are_named_with_what_to_do(tmp_path: Path) -> None:
    tls_dir = tmp_path / "tls"
    cluster_pki.generated(tls_dir, MEMBERS, HOST)
    node1_crt, node1_key = tls_dir / "broker-0-node1.crt", tls_dir / "broker-0-node1.key"
    good_crt = node1_crt.read_bytes()
    again = f"delete {node1_crt} and {node1_key} to have cluster up issue them again"

    node1_crt.write_text("garbage\n")
    message = _refusal(tls_dir)
    assert f"certificate {node1_crt} is not a PEM certificate" in message
    assert message.endswith(again)

    now = dt.datetime.now(dt.UTC)
    _reissue(tls_dir, "broker-0-node1", not_after=now - dt.timedelta(days=1))
    message = _refusal(tls_dir)
    assert f"{node1_crt} (CN=broker-0-node1) expired at " in message
    assert message.endswith(again)

    node1_crt.write_bytes(good_crt)
    node1_key.write_bytes((tls_dir / "broker-0-node2.key").read_bytes())
    message = _refusal(tls_dir)
    assert f"the private key {node1_key} does not belong to {node1_crt}" in message

    other = certs.authority(tmp_path, "other-ca").issue(
        tmp_path, "stranger", server=True, client=True
    )
    node1_crt.write_bytes(other.cert_file.read_bytes())
    node1_key.write_bytes(other.key_file.read_bytes())
    message = _refusal(tls_dir)
    assert f"{node1_crt} (CN=stranger, issued by CN=other-ca) was not issued by the CA" in message
    assert "(CN=gannet local cluster CA)" in message

    node1_key.unlink()
    assert _refusal(tls_dir) == f"TLS: {node1_key} is missing; {again}"


def test_a_missing_or_broken_ca_is_named_and_a_new_member_needs_the_ca_key(
    tmp_path: Path,
) -> None:
    tls_dir = tmp_path / "tls"
    cluster_pki.generated(tls_dir, MEMBERS, HOST)
    fresh = f"delete {tls_dir} to have cluster up create a new CA and certificates"
    (tls_dir / "ca.key").rename(tmp_path / "ca.key")
    cluster_pki.generated(tls_dir, MEMBERS, HOST)  # the members need no CA key
    message = _refusal(tls_dir, (*MEMBERS, "broker-0-node3"))
    assert message == (
        f"TLS: the CA key {tls_dir / 'ca.key'} is missing and broker-0-node3 needs a "
        f"certificate; restore it, or {fresh}"
    )
    (tmp_path / "ca.key").rename(tls_dir / "ca.key")
    (tls_dir / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    message = _refusal(tls_dir)
    assert f"CA certificate {tls_dir / 'ca.crt'} is not a PEM certificate" in message
    assert message.endswith(fresh)
    (tls_dir / "ca.crt").unlink()
    assert _refusal(tls_dir) == f"TLS: the CA certificate {tls_dir / 'ca.crt'} is missing; {fresh}"


def test_own_certificate_serves_every_member_when_it_fits(tmp_path: Path) -> None:
    authority = certs.authority(tmp_path, "my-ca")
    good = authority.issue(tmp_path, "local", server=True, client=True)
    tls = cluster_pki.provided(good.cert_file, good.key_file, authority.cert_file, MEMBERS, HOST)
    assert tls.ca_file == authority.cert_file
    assert {f.cert_file for f in tls.members.values()} == {good.cert_file}
    remedy = (
        "give a certificate and key issued by --tls-ca (or use --tls to have cluster up "
        "create them)"
    )

    def refusal(cert: certs.Issued, ca: Path = authority.cert_file) -> str:
        with pytest.raises(click.ClickException) as refused:
            cluster_pki.provided(cert.cert_file, cert.key_file, ca, MEMBERS, HOST)
        message = refused.value.format_message()
        assert message.endswith((remedy, "signed --tls-cert"))
        return message

    server_only = authority.issue(tmp_path, "server-only", server=True)
    assert "lacks the extended key usage clientAuth" in refusal(server_only)
    elsewhere = authority.issue(
        tmp_path, "elsewhere", server=True, client=True, dns_names=("example.com",)
    )
    assert f"does not name {HOST} in its subject alternative names" in refusal(elsewhere)
    other = certs.authority(tmp_path, "other-ca")
    assert "was not issued by the CA (CN=other-ca)" in refusal(good, other.cert_file)
    assert f"{good.cert_file} (CN=local) is not a CA certificate" in refusal(good, good.cert_file)


def test_incomplete_or_contradictory_options_are_usage_errors(tmp_path: Path) -> None:
    authority = certs.authority(tmp_path, "my-ca")
    good = authority.issue(tmp_path, "local", server=True, client=True)
    runner = CliRunner()
    root = tmp_path / "cluster"
    base = ["cluster", "up", "--data-root", str(root), "--replicas", "1"]
    partial = runner.invoke(cli.main, [*base, "--tls-cert", str(good.cert_file)])
    assert partial.exit_code == 2
    assert "need all three of --tls-cert, --tls-key and --tls-ca" in partial.output
    both = runner.invoke(
        cli.main,
        [*base, "--tls-dir", str(tmp_path / "d"), "--tls-cert", str(good.cert_file),
         "--tls-key", str(good.key_file), "--tls-ca", str(authority.cert_file)],
    )  # fmt: skip
    assert both.exit_code == 2
    assert "--tls-dir is where cluster up keeps the certificates it creates" in both.output
    tls_dir = tmp_path / "d"
    cluster_pki.generated(tls_dir, ["broker-a-node1"], HOST)
    (tls_dir / "broker-a-node1.crt").write_text("garbage\n")
    broken = runner.invoke(cli.main, [*base, "--tls-dir", str(tls_dir)])
    assert broken.exit_code == 1
    assert "is not a PEM certificate" in broken.output
    assert not (root / "node1").exists()  # refused before any member started


def test_client_env_points_gannet_and_the_official_client_at_the_cluster(tmp_path: Path) -> None:
    root = tmp_path / "my cluster"  # a space: the paths are quoted
    plans = cluster.plan_cluster(2, 1, HOST, 28081, root)
    tls = cluster_tls.prepare(
        root, ["broker-0-node1", "broker-1-node1"], HOST,
        tls=True, tls_dir=None, cert_file=None, key_file=None, ca_file=None,
    )  # fmt: skip
    root.mkdir(exist_ok=True)
    env_file = cluster.write_client_env(root, plans, tls)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GANNET_", "GRPC_"))}
    env["GANNET_TLS"] = "1"  # left over from another cluster: unset by the file
    shown = subprocess.run(
        ["bash", "-c", f'source "{env_file}" && env | grep -E "^(GANNET|GRPC)_" | sort'],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    ca = str((root / "tls" / "ca.crt").resolve())
    assert shown.splitlines() == [
        "GANNET_ENDPOINT=127.0.0.1:28081",
        f"GANNET_TLS_CA={ca}",
        f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca}",
    ]
    plain = cluster.write_client_env(root, plans, None).read_text()
    assert "GANNET_TLS_CA" not in plain.replace("unset GANNET_TLS GANNET_TLS_CA", "")
    assert "export GANNET_ENDPOINT=127.0.0.1:28081" in plain
