"""Test certificates made with ``cryptography``: CAs and leaf certificates for 127.0.0.1.

Used by the TLS tests of the client port, the peer port, the CLI clients, the operator and
rotation. They need what the product's own writer (:func:`gannet.node.cli.cluster.pki.generated`,
one CA named ``gannet local cluster CA`` and ``serverAuth`` + ``clientAuth`` member certificates
in one directory) does not make: several CAs in one directory, each with its own name (the
refusals the tests check quote it: ``CN=other-ca``), server-only and client-only leaves, leaves
naming other hosts, and a CA key in hand to issue more later. Where a whole cluster's good
certificates are all that is needed (the e2e replication group), the product's writer is used.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class Authority:
    name: str
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_file: Path

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        server: bool,
        client: bool = False,
        dns_names: tuple[str, ...] | None = None,
    ) -> Issued:
        """``server``: serverAuth; ``client`` (or not ``server``): clientAuth — a Raft peer,
        both server and client of its peers, needs both. ``dns_names``: the only names the
        certificate carries (default: localhost, 127.0.0.1 and ::1)."""
        names: list[x509.GeneralName] = (
            [x509.DNSName(n) for n in dns_names]
            if dns_names is not None
            else [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1")),
            ]
        )
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        if client or not server:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            _base(name, key, self.cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
        )
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(
            _write(directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            _write(directory / f"{name}.key", _key_pem(key)),
        )


def authority(directory: Path, name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _base(name, key, subject)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .sign(key, hashes.SHA256())
    )
    cert_file = _write(directory / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM))
    return Authority(name, cert, key, cert_file)


def resign(
    cert_file: Path, issuer: x509.Certificate, key: ec.EllipticCurvePrivateKey, *, days: float
) -> x509.Certificate:
    """``cert_file``'s certificate signed again by ``key`` (same subject, public key and
    extensions; issuer ``issuer``), valid until ``days`` from now (negative: expired), written
    back: short validity without waiting."""
    old = x509.load_pem_x509_certificate(cert_file.read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(issuer.subject)
        .public_key(old.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - (2 + abs(days)) * day)
        .not_valid_after(now + days * day)
    )
    for extension in old.extensions:
        builder = builder.add_extension(extension.value, critical=extension.critical)
    cert = builder.sign(key, hashes.SHA256())
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def _base(name: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
