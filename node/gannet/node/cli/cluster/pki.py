"""The certificates of a local cluster's TLS (:mod:`tls`): made and checked with the
``cryptography`` library.

Generated (``--tls``): ``DATA_ROOT/tls/`` (or ``--tls-dir``) holds a cluster CA (:data:`CA_CERT`,
its key :data:`CA_KEY`) and one certificate per member, ``<member>.crt``/``<member>.key``
(member ``broker-a-node1``, or ``broker-<g>-node<i>`` with several groups), made with the
``cryptography`` library: EC P-256 keys, SHA-256 signatures, ``serverAuth`` and ``clientAuth``
(a Raft peer is both server and client of its peers), SANs ``localhost``, the member's name,
``127.0.0.1``, ``::1`` and ``--host``. Private keys are written owner-only (0600), every file
through a temporary file and a rename, so an interrupted run leaves no half file. Everything is
created once and reused by the next ``up``; a member added by a larger ``--replicas`` or
``--groups`` gets its certificate from the same CA. Each member runs with its certificate on the
client port (TLS only) and on the peer port (mutual TLS, cluster CA), and trusts the CA when it
calls the other groups (``--cluster-tls-ca``).

Own files (``--tls-cert/--tls-key/--tls-ca``): one certificate serves every member (they all
listen on ``--host``), so it needs ``--host`` in its SANs and both ``serverAuth`` and
``clientAuth``.

Before anything starts, every file is checked (:func:`check_member`): readable PEM, key
matching certificate, issued by the CA, valid now, SAN naming the host. A failure raises
:class:`click.ClickException` naming the file, the problem and what to do next.

Called by :func:`tls.prepare` (``cluster up``) and the tests.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import click
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gannet.node.cli.cluster.certs import ClusterTls, MemberFiles

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
CA_NAME = "gannet local cluster CA"
CA_VALID_DAYS = 3650
MEMBER_VALID_DAYS = 825
BACKDATE = dt.timedelta(minutes=5)
"""Certificates start a little in the past, so a clock a few minutes behind accepts them."""
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
PEM_BYTES_MAX = 1024 * 1024


def generated(tls_dir: Path, members: Sequence[str], host: str) -> ClusterTls:
    """The CA and the certificates of ``members`` in ``tls_dir``: those missing are created,
    those present are checked (module docstring)."""
    tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_file, ca_key_file = tls_dir / CA_CERT, tls_dir / CA_KEY
    fresh = f"delete {tls_dir} to have cluster up create a new CA and certificates"
    if not ca_file.exists() and not ca_key_file.exists():
        _write_ca(ca_file, ca_key_file)
    elif not ca_file.exists():
        raise click.ClickException(f"TLS: the CA certificate {ca_file} is missing; {fresh}")
    resign = (
        f"run `gannet cluster certs renew --ca --tls-dir {tls_dir}` to re-sign it with its own "
        f"key (the member certificates stay valid under it), or {fresh}"
    )
    [ca] = _check_ca(ca_file, remedy=fresh, dates_remedy=resign)
    ca_key: ec.EllipticCurvePrivateKey | None = None
    found: dict[str, MemberFiles] = {}
    for name in members:
        files = MemberFiles(tls_dir / f"{name}.crt", tls_dir / f"{name}.key")
        again = f"delete {files.cert_file} and {files.key_file} to have cluster up issue them again"
        if not files.cert_file.exists() and not files.key_file.exists():
            if ca_key is None:
                ca_key = load_ca_key(ca_key_file, ca, name, fresh)
            _write_member(files, name, host, ca, ca_key)
        for path in (files.cert_file, files.key_file):
            if not path.exists():
                raise click.ClickException(f"TLS: {path} is missing; {again}")
        check_member(files, (ca,), host, remedy=again)
        found[name] = files
    return ClusterTls(ca_file, found)


def provided(
    cert_file: Path, key_file: Path, ca_file: Path, members: Sequence[str], host: str
) -> ClusterTls:
    """The user's own certificate for every member, checked against the CA (module docstring)."""
    files = MemberFiles(cert_file, key_file)
    cas = _check_ca(ca_file, remedy="give the PEM file of the CA that signed --tls-cert")
    check_member(
        files,
        cas,
        host,
        remedy="give a certificate and key issued by --tls-ca (or use --tls to have cluster "
        "up create them)",
    )
    return ClusterTls(ca_file, dict.fromkeys(members, files))


def check_member(
    files: MemberFiles, cas: Sequence[x509.Certificate], host: str, *, remedy: str
) -> None:
    """Raise :class:`click.ClickException` naming the file, the problem and ``remedy`` unless
    ``files`` hold a certificate (chain) issued by one of ``cas``, valid now, usable as server
    and client, naming ``host``, and its matching private key."""

    def refuse(problem: str) -> click.ClickException:
        return click.ClickException(f"TLS: {problem}; {remedy}")

    chain = certificates(files.cert_file, "certificate", remedy)
    key = private_key(files.key_file, remedy)
    leaf = chain[0]
    if public_der(leaf.public_key()) != public_der(key.public_key()):
        raise refuse(f"the private key {files.key_file} does not belong to {files.cert_file}")
    for cert in chain:
        _check_dates(cert, files.cert_file, refuse)
    if not issued_by_one_of(chain, cas):
        raise refuse(
            f"{files.cert_file} ({subject_text(leaf)}, issued by "
            f"{leaf.issuer.rfc4514_string()}) was not issued by the CA "
            f"({', '.join(subject_text(c) for c in cas)})"
        )
    usages = _extended_usages(leaf)
    if usages is not None:
        missing = [
            name
            for oid, name in (
                (ExtendedKeyUsageOID.SERVER_AUTH, "serverAuth"),
                (ExtendedKeyUsageOID.CLIENT_AUTH, "clientAuth"),
            )
            if oid not in usages
        ]
        if missing:
            raise refuse(
                f"{files.cert_file} lacks the extended key usage {' and '.join(missing)} (a "
                "member serves clients and peers and dials its peers: it needs both)"
            )
    if not _names(leaf, host):
        raise refuse(f"{files.cert_file} does not name {host} in its subject alternative names")


def _check_ca(
    ca_file: Path, *, remedy: str, dates_remedy: str | None = None
) -> list[x509.Certificate]:
    """The certificates of ``ca_file``, each a CA valid now (``dates_remedy``: what to do
    about an expired or not yet valid one, default ``remedy``)."""

    def refuse(problem: str) -> click.ClickException:
        return click.ClickException(f"TLS: {problem}; {remedy}")

    def refuse_dates(problem: str) -> click.ClickException:
        return click.ClickException(f"TLS: {problem}; {dates_remedy or remedy}")

    cas = certificates(ca_file, "CA certificate", remedy)
    for ca in cas:
        _check_dates(ca, ca_file, refuse_dates)
        try:
            is_ca = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise refuse(f"{ca_file} ({subject_text(ca)}) is not a CA certificate")
    return cas


def certificates(path: Path, what: str, remedy: str) -> list[x509.Certificate]:
    data = _read(path, what, remedy)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise click.ClickException(
            f"TLS: {what} {path} is not a PEM certificate ({exc}); {remedy}"
        ) from None
    return certs


def private_key(path: Path, remedy: str) -> PrivateKeyTypes:
    data = _read(path, "private key", remedy)
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise click.ClickException(
            f"TLS: private key {path} is not an unencrypted PEM private key ({exc}); {remedy}"
        ) from None


def _read(path: Path, what: str, remedy: str) -> bytes:
    try:
        size = path.stat().st_size
        if size > PEM_BYTES_MAX:
            raise click.ClickException(
                f"TLS: {what} {path} is {size} bytes, at most {PEM_BYTES_MAX}; {remedy}"
            )
        return path.read_bytes()
    except OSError as exc:
        raise click.ClickException(
            f"TLS: cannot read {what} {path}: {exc.strerror or exc}; {remedy}"
        ) from None


def _check_dates(
    cert: x509.Certificate, path: Path, refuse: Callable[[str], click.ClickException]
) -> None:
    now = dt.datetime.now(dt.UTC)
    if now > cert.not_valid_after_utc:
        raise refuse(
            f"{path} ({subject_text(cert)}) expired at "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    if now < cert.not_valid_before_utc:
        raise refuse(
            f"{path} ({subject_text(cert)}) is not valid before "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (check the clock)"
        )


def issued_by_one_of(chain: list[x509.Certificate], cas: Sequence[x509.Certificate]) -> bool:
    """Each certificate of ``chain`` issued by the next, the last by (or equal to) a CA."""
    for cert, issuer in itertools.pairwise(chain):
        if not signed_by(cert, issuer):
            return False
    last = chain[-1]
    return any(last == ca or signed_by(last, ca) for ca in cas)


def signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _extended_usages(cert: x509.Certificate) -> x509.ExtendedKeyUsage | None:
    try:
        return cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return None


def _names(cert: x509.Certificate, host: str) -> bool:
    """Whether ``cert`` names ``host`` (an IP or DNS SAN, or the CN when it has no SANs)."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return any(
            a.value == host for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.lower() in (n.lower() for n in sans.get_values_for_type(x509.DNSName))
    return address in sans.get_values_for_type(x509.IPAddress)


def subject_text(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string()


def public_der(key: object) -> bytes:
    public_bytes = getattr(key, "public_bytes", None)
    if public_bytes is None:
        return b""
    der: bytes = public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der


def load_ca_key(
    ca_key_file: Path, ca: x509.Certificate, member: str, fresh: str
) -> ec.EllipticCurvePrivateKey:
    if not ca_key_file.exists():
        raise click.ClickException(
            f"TLS: the CA key {ca_key_file} is missing and {member} needs a certificate; "
            f"restore it, or {fresh}"
        )
    key = private_key(ca_key_file, f"restore it, or {fresh}")
    if not isinstance(key, ec.EllipticCurvePrivateKey) or public_der(key.public_key()) != (
        public_der(ca.public_key())
    ):
        raise click.ClickException(
            f"TLS: the CA key {ca_key_file} does not belong to the CA certificate; {fresh}"
        )
    return key


def _write_ca(ca_file: Path, ca_key_file: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    cert = (
        _builder(subject, subject, key, CA_VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_file(ca_key_file, _key_pem(key), 0o600)  # the key first: a cert without it is refused
    _write_file(ca_file, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _write_member(
    files: MemberFiles,
    name: str,
    host: str,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
) -> None:
    key, cert = issue_member(name, _san(name, host), ca, ca_key)
    write_member_pair(files, key, cert)


def issue_member(
    name: str,
    sans: Sequence[x509.GeneralName],
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and a certificate for member ``name`` signed by the CA, for
    :data:`MEMBER_VALID_DAYS` but never past the CA's own expiry (a certificate cannot outlive
    the CA that vouches for it). Also the renewal of :mod:`cert_expiry`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(subject, ca.subject, key, MEMBER_VALID_DAYS, ca.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def reissue_ca(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    """The CA certificate again, with the same subject, key and extensions, a new serial and
    :data:`CA_VALID_DAYS` from now. Certificates the old one issued verify against it (same
    issuer name, same key), and the old one still verifies what it issues until it expires."""
    builder = _builder(ca.subject, ca.subject, ca_key, CA_VALID_DAYS)
    for extension in ca.extensions:
        builder = builder.add_extension(extension.value, critical=extension.critical)
    return builder.sign(ca_key, hashes.SHA256())


def write_member_pair(
    files: MemberFiles, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> None:
    """Both files written and synced as temporary files first, then renamed key first, cert
    right after: a broker that reloads its files (every 2 s at most) sees a mismatched pair
    for microseconds at worst, and its next check picks up the matching one."""
    key_temp = _write_temp(files.key_file, _key_pem(key), 0o600)
    cert_temp = _write_temp(files.cert_file, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    os.replace(key_temp, files.key_file)
    os.replace(cert_temp, files.cert_file)


def _san(name: str, host: str) -> list[x509.GeneralName]:
    found: list[x509.GeneralName] = []
    for text in (*LOCAL_NAMES, name, host):
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(text))
        except ValueError:
            entry = x509.DNSName(text)
        if entry not in found:
            found.append(entry)
    return found


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    days: int,
    not_after_max: dt.datetime | None = None,
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    not_after = now + dt.timedelta(days=days)
    if not_after_max is not None:
        not_after = min(not_after, not_after_max)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """``data`` into ``path`` through a temporary file with ``mode`` from its creation, fsync
    and rename (no half file, no moment where a key is readable by others)."""
    os.replace(_write_temp(path, data, mode), path)


def _write_temp(path: Path, data: bytes, mode: int) -> Path:
    """``data`` in ``.<name>.tmp`` beside ``path``, created with ``mode``, synced."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.unlink(missing_ok=True)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return temp


def write_certificate(path: Path, cert: x509.Certificate) -> None:
    """A certificate (public, 0644) through a temporary file and a rename."""
    _write_file(path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
