"""Expiry of ``gannet cluster up --tls`` certificates: warnings before they expire, renewal of
the cluster's own member certificates from the same CA (on ``up`` and with ``gannet cluster
certs renew``), the CA renewed only when asked (same key: old certificates and clients keep
working), the user's own files never rewritten, and ``gannet cluster certs list`` (table, JSON,
exit codes). Short validity is made by re-signing with ``cryptography`` at chosen dates: no
sleeps. A running broker serves a renewed certificate at its next handshake.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import stat
import threading
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli import root as cli
from gannet.node.cli.cluster import pki as cluster_pki
from gannet.node.cli.cluster import tls as cluster_tls
from gannet.node.store.config import FlushMode, StoreConfig

from . import certs

MEMBERS = ("broker-a-node1", "broker-a-node2", "broker-a-node3")
HOST = "127.0.0.1"
DAY = dt.timedelta(days=1)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _ca_key(tls_dir: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key((tls_dir / "ca.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def _expire_member(tls_dir: Path, name: str, *, days: float) -> x509.Certificate:
    return certs.resign(
        tls_dir / f"{name}.crt", _cert(tls_dir / "ca.crt"), _ca_key(tls_dir), days=days
    )


def _expire_ca(tls_dir: Path, *, days: float) -> x509.Certificate:
    return certs.resign(tls_dir / "ca.crt", _cert(tls_dir / "ca.crt"), _ca_key(tls_dir), days=days)


def _prepare(tls_dir: Path, **kwargs: object) -> None:
    found = cluster_tls.prepare(
        tls_dir.parent, MEMBERS, HOST, tls=False, tls_dir=tls_dir,
        cert_file=None, key_file=None, ca_file=None, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    assert found is not None


def _files(tls_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(tls_dir.iterdir())}


def _days_left(cert: x509.Certificate) -> float:
    return (cert.not_valid_after_utc - dt.datetime.now(dt.UTC)) / DAY


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    found = tmp_path / "tls"
    cluster_pki.generated(found, MEMBERS, HOST)
    return found


def test_up_renews_due_member_certificates_from_the_same_ca(
    tls_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = _cert(tls_dir / "ca.crt")
    soon = _expire_member(tls_dir, "broker-a-node1", days=5)
    gone = _expire_member(tls_dir, "broker-a-node2", days=-1)  # expired: renewed, not refused
    before = _files(tls_dir)
    _prepare(tls_dir)
    err = capsys.readouterr().err
    after = _files(tls_dir)
    for name, old in (("broker-a-node1", soon), ("broker-a-node2", gone)):
        new = _cert(tls_dir / f"{name}.crt")
        new.verify_directly_issued_by(ca)  # the same CA
        assert new.serial_number != old.serial_number
        assert new.subject == old.subject
        assert new.extensions.get_extension_for_class(x509.SubjectAlternativeName) == (
            old.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        )
        assert after[f"{name}.key"] != before[f"{name}.key"]  # a new key
        assert stat.S_IMODE((tls_dir / f"{name}.key").stat().st_mode) == 0o600
        assert 824 < _days_left(new) <= cluster_pki.MEMBER_VALID_DAYS
        assert f"TLS: renewed the certificate of {name}, {tls_dir / name}.crt (new key, " in err
    for name in ("broker-a-node3.crt", "broker-a-node3.key", "ca.crt", "ca.key"):
        assert after[name] == before[name]  # not due: untouched
    assert not [p for p in tls_dir.iterdir() if p.name.endswith(".tmp")]
    assert f"was {gone.serial_number:x}): valid until " in err
    assert "the members start with it" in err
    assert "TLS warning" not in err


def test_the_threshold_is_an_option_and_renew_certs_renews_all(
    tls_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _expire_member(tls_dir, "broker-a-node1", days=5)
    before = _files(tls_dir)
    _prepare(tls_dir, warn_days=3)  # 5 days left: neither renewed nor warned about
    assert _files(tls_dir) == before
    assert capsys.readouterr().err == ""
    _prepare(tls_dir, warn_days=3, renew=True)
    after = _files(tls_dir)
    assert all(after[f"{m}.crt"] != before[f"{m}.crt"] for m in MEMBERS)
    assert after["ca.crt"] == before["ca.crt"]
    assert capsys.readouterr().err.count("TLS: renewed the certificate of") == 3


def test_a_ca_near_expiry_is_warned_about_and_renewed_only_when_asked(
    tls_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_ca = _expire_ca(tls_dir, days=10)
    _expire_member(tls_dir, "broker-a-node1", days=5)
    before = _files(tls_dir)
    _prepare(tls_dir)
    err = capsys.readouterr().err
    assert _files(tls_dir) == before  # nothing rewritten: the CA first
    assert (
        f"TLS warning: the CA certificate {tls_dir / 'ca.crt'} (CN=gannet local cluster CA) "
        f"expires on {old_ca.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, in 9 days; gannet does "
        "not replace its CA by itself" in err
    )
    assert f"run `gannet cluster certs renew --ca --tls-dir {tls_dir}`" in err
    assert f"the certificate {tls_dir / 'broker-a-node1.crt'} (CN=broker-a-node1) expires on" in err
    assert "not renewed: the cluster CA" in err
    assert "a certificate cannot outlive it: renew the CA first" in err

    result = _invoke(["cluster", "certs", "renew", "--ca", "--tls-dir", str(tls_dir)])
    assert result.exit_code == 0, result.output
    new_ca = _cert(tls_dir / "ca.crt")
    assert new_ca.serial_number != old_ca.serial_number
    assert new_ca.subject == old_ca.subject
    assert cluster_pki.public_der(new_ca.public_key()) == cluster_pki.public_der(
        old_ca.public_key()
    )
    assert _days_left(new_ca) > cluster_pki.CA_VALID_DAYS - 1
    assert "TLS: renewed the CA certificate" in result.stdout
    assert "TLS: renewed the certificate of broker-a-node1" in result.stdout  # now it can
    assert "no restart needed" in result.stdout
    # Certificates of the old CA certificate verify under the new one, and the other way:
    # running members and clients keep trusting each other.
    _cert(tls_dir / "broker-a-node2.crt").verify_directly_issued_by(new_ca)
    _cert(tls_dir / "broker-a-node1.crt").verify_directly_issued_by(old_ca)
    old_ca_file = tls_dir.parent / "old-ca.crt"
    old_ca_file.write_bytes(old_ca.public_bytes(serialization.Encoding.PEM))
    assert _handshake(tls_dir, "broker-a-node2", tls_dir / "ca.crt") == "CN=broker-a-node2"
    assert _handshake(tls_dir, "broker-a-node1", old_ca_file) == "CN=broker-a-node1"
    cluster_pki.generated(tls_dir, MEMBERS, HOST)  # cluster up accepts the lot

    _expire_ca(tls_dir, days=-1)  # an expired CA: cluster up says how to keep it
    with pytest.raises(click.ClickException) as refused:
        cluster_pki.generated(tls_dir, MEMBERS, HOST)
    assert refused.value.format_message().endswith(
        f"run `gannet cluster certs renew --ca --tls-dir {tls_dir}` to re-sign it with its own "
        f"key (the member certificates stay valid under it), or delete {tls_dir} to have "
        "cluster up create a new CA and certificates"
    )
    assert _invoke(["cluster", "certs", "renew", "--ca", "--tls-dir", str(tls_dir)]).exit_code == 0
    cluster_pki.generated(tls_dir, MEMBERS, HOST)


def _handshake(tls_dir: Path, member: str, trusted_ca: Path) -> str:
    """A real TLS handshake (OpenSSL): a server with ``member``'s files, a client trusting
    only ``trusted_ca``; the subject the client verified."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tls_dir / f"{member}.crt", tls_dir / f"{member}.key")
    client_context = ssl.create_default_context(cafile=str(trusted_ca))
    left, right = socket.socketpair()
    with left, right:
        server = server_context.wrap_socket(left, server_side=True, do_handshake_on_connect=False)
        accepting = threading.Thread(target=server.do_handshake)
        accepting.start()
        client = client_context.wrap_socket(right, server_hostname=HOST)
        accepting.join()
        der = client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def test_your_own_certificates_are_warned_about_and_never_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    authority = certs.authority(tmp_path, "my-ca")  # valid for one day
    own = authority.issue(tmp_path, "local", server=True, client=True)
    before = _files(tmp_path)
    found = cluster_tls.prepare(
        tmp_path / "cluster", MEMBERS, HOST, tls=False, tls_dir=None,
        cert_file=own.cert_file, key_file=own.key_file, ca_file=authority.cert_file,
    )  # fmt: skip
    assert found is not None
    err = capsys.readouterr().err
    assert _files(tmp_path) == before
    assert f"TLS warning: the certificate {own.cert_file} (CN=local) expires on " in err
    assert "it is your own --tls-cert, which gannet never rewrites" in err
    assert f"TLS warning: the CA certificate {authority.cert_file} (CN=my-ca)" in err
    assert "it is your own --tls-ca" in err
    with pytest.raises(click.UsageError, match="--renew-certs re-issues the certificates"):
        cluster_tls.prepare(
            tmp_path / "cluster", MEMBERS, HOST, tls=False, tls_dir=None, renew=True,
            cert_file=own.cert_file, key_file=own.key_file, ca_file=authority.cert_file,
        )  # fmt: skip
    assert _files(tmp_path) == before
    result = _invoke(
        ["cluster", "certs", "list", "-o", "json", "--tls-cert", str(own.cert_file),
         "--tls-key", str(own.key_file), "--tls-ca", str(authority.cert_file)]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["certificates"]
    assert [(r["member"], r["source"], r["state"], r["days_left"]) for r in rows] == [
        ("CA", "provided", "expiring", 0),
        ("every member", "provided", "expiring", 0),
    ]


def test_up_options_renew_certs_and_warn_days(tmp_path: Path) -> None:
    base = ["cluster", "up", "--data-root", str(tmp_path / "c"), "--replicas", "1"]
    result = _invoke([*base, "--renew-certs"])
    assert result.exit_code == 2
    assert "--renew-certs renews the certificates of --tls; add --tls" in result.output
    result = _invoke([*base, "--tls", "--tls-warn-days", "-1"])
    assert result.exit_code == 2
    assert not (tmp_path / "c" / "node1").exists()


def _invoke(argv: list[str]) -> Result:
    return CliRunner().invoke(cli.main, argv)


def test_certs_list_shows_every_certificate_with_exit_codes_scripts_can_trust(
    tls_dir: Path,
) -> None:
    base = ["cluster", "certs", "list", "--data-root", str(tls_dir.parent)]
    fine = _invoke(base)
    assert fine.exit_code == 0, fine.output
    for text in ("member", "SANs", "not after (UTC)", "days left", "CA ok", "broker-a-node3"):
        assert text in fine.stdout
    assert fine.stderr == ""

    _expire_member(tls_dir, "broker-a-node1", days=5.5)
    listed = _invoke([*base, "-o", "json"])
    assert listed.exit_code == 0  # expiring is a warning
    document = json.loads(listed.stdout)
    assert document["tls_dir"] == str(tls_dir)
    assert document["warn_days"] == 30
    rows = {r["member"]: r for r in document["certificates"]}
    assert list(rows) == ["CA", *MEMBERS]
    node1 = rows["broker-a-node1"]
    assert (node1["state"], node1["days_left"], node1["ca_ok"]) == ("expiring", 5, True)
    assert node1["file"] == str(tls_dir / "broker-a-node1.crt")
    assert node1["subject"] == "CN=broker-a-node1"
    assert node1["sans"] == ["localhost", "127.0.0.1", "::1", "broker-a-node1"]
    assert node1["not_after"].startswith(
        f"{_cert(tls_dir / 'broker-a-node1.crt').not_valid_after_utc:%Y-%m-%dT%H:%M}"
    )
    assert rows["broker-a-node2"]["state"] == "ok"
    assert "TLS warning: the certificate" in listed.stderr
    assert f"`gannet cluster certs renew --tls-dir {tls_dir}`" in listed.stderr
    assert _invoke([*base, "--strict"]).exit_code == 1  # monitoring: expiring fails
    assert _invoke([*base, "--warn-days", "5", "--strict"]).exit_code == 0

    _expire_member(tls_dir, "broker-a-node2", days=-1)
    stranger = certs.authority(tls_dir.parent, "other-ca").issue(
        tls_dir.parent, "stranger", server=True, client=True
    )
    (tls_dir / "broker-a-node3.crt").write_bytes(stranger.cert_file.read_bytes())
    (tls_dir / "broker-a-node3.key").write_bytes(stranger.key_file.read_bytes())
    broken = _invoke([*base, "-o", "json"])
    assert broken.exit_code == 1
    rows = {r["member"]: r for r in json.loads(broken.stdout)["certificates"]}
    assert (rows["broker-a-node2"]["state"], rows["broker-a-node2"]["days_left"]) == (
        "expired",
        -1,
    )
    assert rows["broker-a-node3"]["state"] == "invalid"
    assert rows["broker-a-node3"]["ca_ok"] is False
    assert rows["broker-a-node3"]["problem"] == "not issued by the CA (issuer CN=other-ca)"
    assert f"TLS: {tls_dir / 'broker-a-node2.crt'} (CN=broker-a-node2) is expired since" in (
        broken.stderr
    )
    (tls_dir / "broker-a-node1.key").write_text("garbage\n")
    rows = {r["member"]: r for r in json.loads(_invoke([*base, "-o", "json"]).stdout)[
        "certificates"
    ]}  # fmt: skip
    assert rows["broker-a-node1"]["problem"].startswith(
        f"key {tls_dir / 'broker-a-node1.key'}: not PEM"
    )

    missing = _invoke(["cluster", "certs", "list", "--data-root", str(tls_dir.parent / "none")])
    assert missing.exit_code == 1
    assert "no certificates in" in missing.stderr
    assert "`gannet cluster up --tls` creates them there" in missing.stderr


def test_certs_renew_named_all_or_due_and_says_why_not(tls_dir: Path) -> None:
    base = ["cluster", "certs", "renew", "--tls-dir", str(tls_dir)]
    before = _files(tls_dir)
    nothing = _invoke(base)
    assert nothing.exit_code == 0
    assert "nothing renewed" in nothing.stderr
    assert _files(tls_dir) == before
    named = _invoke([*base, "broker-a-node2"])
    assert named.exit_code == 0, named.output
    after = _files(tls_dir)
    assert [n for n in after if after[n] != before[n]] == [
        "broker-a-node2.crt",
        "broker-a-node2.key",
    ]
    unknown = _invoke([*base, "broker-a-node9"])
    assert unknown.exit_code == 2
    assert "no certificate" in unknown.output
    (tls_dir / "ca.key").unlink()
    without_key = _invoke([*base, "--all"])
    assert without_key.exit_code == 1
    assert f"broker-a-node1 not renewed: the CA key {tls_dir / 'ca.key'}: cannot read" in (
        without_key.stderr
    )
    assert _files(tls_dir) == {n: b for n, b in after.items() if n != "ca.key"}


def test_a_running_broker_serves_the_renewed_certificate(tls_dir: Path) -> None:
    files = tls_dir / "broker-a-node1"
    store = StoreConfig.for_tests(tls_dir.parent / "store", flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(
        store=store,
        listen_port=0,
        tls_cert=files.with_suffix(".crt"),
        tls_key=files.with_suffix(".key"),
        tls_reload_interval_s=0.0,
    )
    running = threads.start(config)
    try:
        host, port = running.endpoint.rsplit(":", 1)
        served = _served_serial(host, int(port), tls_dir / "ca.crt")
        assert served == _cert(files.with_suffix(".crt")).serial_number
        result = _invoke(["cluster", "certs", "renew", "--tls-dir", str(tls_dir), "--all"])
        assert result.exit_code == 0, result.output
        renewed = _cert(files.with_suffix(".crt")).serial_number
        assert renewed != served
        assert _served_serial(host, int(port), tls_dir / "ca.crt") == renewed
    finally:
        running.stop()


def _served_serial(host: str, port: int, ca_file: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as wrapped,
    ):
        der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number
