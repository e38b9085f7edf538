"""Expiry and renewal of a local cluster's TLS certificates (``gannet cluster up --tls`` and
``gannet cluster certs list|renew``).

**Reports** (:func:`inspect_dir`, :func:`inspect_cluster`): one :class:`CertReport` per
certificate — the CA first, then each member — with subject, SANs, serial, dates, whole days
left, whether the CA issued it, the problem that would stop ``cluster up`` (unreadable, key not
matching, another CA's, not a CA) and a state for a threshold of ``warn_days``: ``ok``,
``expiring`` (valid, but ends within the threshold), ``expired``, ``not yet valid`` or
``invalid``.

**Warnings** (:func:`warnings`, pure): one sentence per ``expiring`` certificate naming file,
subject, date and what to do, which depends on whose it is. The cluster's own members are
re-issued (below), so a warning about one says why it was not. The cluster CA is never replaced
by itself: members and clients trust it, so the warning says to renew it explicitly
(``gannet cluster certs renew --ca``: same key, so certificates and clients of the old one keep
working) or start over. The user's own files (``--tls-cert/--tls-key/--tls-ca``) are never
rewritten, only warned about.

**Renewal** (:func:`renew_members`): a member certificate in the TLS folder that the cluster CA
issued and that expires within the threshold (every one with ``force``) gets a new key and a
new certificate from the same CA, with the same subject and SANs, :data:`MEMBER_VALID_DAYS`
(:mod:`pki`, capped at the CA's expiry), written as the other files are (temporary files
with their modes, 0600 for keys, then renames). Skipped, with the reason, when the CA key is
missing or does not match, or when the CA itself expires within the threshold (a new
certificate could not outlive it: renew the CA first). :func:`renew_ca` re-signs the CA
certificate with its own key (:func:`pki.reissue_ca`).

Members pick renewed files up without a restart: both server ports reload certificate, key and
CA at a TLS handshake when the files changed (checked at most every 2 s,
:class:`gannet.node.protocol.tls.ReloadingServerCredentials`), and peer senders rebuild their
credentials when they reconnect. ``cluster up`` renews before it starts any member.

Called by :func:`tls.prepare` (``cluster up``) and :mod:`cert_commands`.
Imports ``cryptography``: loaded only when TLS is asked for (see :mod:`tls`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gannet.node.cli import output
from gannet.node.cli.cluster import pki as cluster_pki
from gannet.node.cli.cluster.certs import ClusterTls, MemberFiles

CA_MEMBER = "CA"
"""The member column of a CA certificate."""
EVERY_MEMBER = "every member"
"""The member column of the user's own certificate (one serves every member)."""
GENERATED = "generated"
PROVIDED = "provided"
STATES = ("ok", "expiring", "expired", "not yet valid", "invalid")
DAY = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class CertReport:
    """What one certificate file says about itself, checked against the CA, at one time."""

    member: str
    """A member name, :data:`CA_MEMBER` or :data:`EVERY_MEMBER`."""
    file: Path
    source: str
    """:data:`GENERATED` (``cluster up`` made it) or :data:`PROVIDED` (``--tls-cert/--tls-ca``)."""
    state: str
    """One of :data:`STATES`."""
    subject: str | None = None
    sans: tuple[str, ...] = ()
    serial: str | None = None
    not_before: dt.datetime | None = None
    not_after: dt.datetime | None = None
    days_left: int | None = None
    """Whole days until ``not_after``, rounded towards zero (negative once expired)."""
    ca_ok: bool | None = None
    """Member: issued by the CA. CA: a CA certificate. None: unreadable."""
    problem: str | None = None

    def document(self) -> dict[str, Any]:
        """The JSON/YAML form (ISO-8601 UTC times)."""
        return {
            "member": self.member,
            "file": str(self.file),
            "source": self.source,
            "subject": self.subject,
            "sans": list(self.sans),
            "serial": self.serial,
            "not_before": _iso(self.not_before),
            "not_after": _iso(self.not_after),
            "days_left": self.days_left,
            "ca_ok": self.ca_ok,
            "state": self.state,
            "problem": self.problem,
        }


@dataclass(frozen=True, slots=True)
class Renewal:
    """One certificate re-issued: which, and its serials and expiries before and after."""

    member: str
    cert_file: Path
    serial_before: str
    serial_after: str
    not_after_before: dt.datetime
    not_after_after: dt.datetime


@dataclass(frozen=True, slots=True)
class Renewals:
    renewed: list[Renewal] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Member → why it was due but not renewed."""


def inspect_dir(tls_dir: Path, *, warn_days: int, now: dt.datetime) -> list[CertReport]:
    """The CA and every member certificate (``<member>.crt`` with its ``.key``) in a folder
    ``cluster up`` made, sorted by member."""
    ca_file = tls_dir / cluster_pki.CA_CERT
    ca_reports, cas = _inspect_cas(ca_file, GENERATED, warn_days, now)
    members = sorted(p for p in tls_dir.glob("*.crt") if p.name != cluster_pki.CA_CERT)
    return ca_reports + [
        _inspect_member(
            p.stem, MemberFiles(p, p.with_suffix(".key")), cas, GENERATED, warn_days, now
        )
        for p in members
    ]


def inspect_cluster(
    tls: ClusterTls, source: str, *, warn_days: int, now: dt.datetime
) -> list[CertReport]:
    """The CA and the certificate of each member ``cluster up`` runs (one row for the user's
    own certificate, which serves every member)."""
    reports, cas = _inspect_cas(tls.ca_file, source, warn_days, now)
    if source == PROVIDED:
        files = next(iter(tls.members.values()))
        return [*reports, _inspect_member(EVERY_MEMBER, files, cas, source, warn_days, now)]
    return reports + [
        _inspect_member(name, files, cas, source, warn_days, now)
        for name, files in tls.members.items()
    ]


def _inspect_cas(
    ca_file: Path, source: str, warn_days: int, now: dt.datetime
) -> tuple[list[CertReport], list[x509.Certificate]]:
    try:
        cas = x509.load_pem_x509_certificates(_read(ca_file))
    except (OSError, ValueError) as exc:
        return [_unreadable(CA_MEMBER, ca_file, source, exc)], []
    reports = []
    for ca in cas:
        try:
            is_ca = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        problem = None if is_ca else "not a CA certificate"
        reports.append(_report(CA_MEMBER, ca_file, source, ca, is_ca, problem, warn_days, now))
    return reports, cas


def _inspect_member(
    member: str,
    files: MemberFiles,
    cas: Sequence[x509.Certificate],
    source: str,
    warn_days: int,
    now: dt.datetime,
) -> CertReport:
    try:
        chain = x509.load_pem_x509_certificates(_read(files.cert_file))
    except (OSError, ValueError) as exc:
        return _unreadable(member, files.cert_file, source, exc)
    leaf = chain[0]
    issued = bool(cas) and cluster_pki.issued_by_one_of(chain, cas)
    problem = None if issued else f"not issued by the CA (issuer {leaf.issuer.rfc4514_string()})"
    try:
        key = serialization.load_pem_private_key(_read(files.key_file), password=None)
    except (OSError, ValueError, TypeError) as exc:
        problem = f"key {files.key_file}: {_reason(exc)}"
    else:
        if cluster_pki.public_der(key.public_key()) != cluster_pki.public_der(leaf.public_key()):
            problem = f"the key {files.key_file} does not belong to it"
    return _report(member, files.cert_file, source, leaf, issued, problem, warn_days, now)


def _report(
    member: str,
    path: Path,
    source: str,
    cert: x509.Certificate,
    ca_ok: bool,
    problem: str | None,
    warn_days: int,
    now: dt.datetime,
) -> CertReport:
    not_after = cert.not_valid_after_utc
    if problem is not None:
        state = "invalid"
    elif now > not_after:
        state = "expired"
    elif now < cert.not_valid_before_utc:
        state = "not yet valid"
    elif not_after - now < warn_days * DAY:
        state = "expiring"
    else:
        state = "ok"
    return CertReport(
        member,
        path,
        source,
        state,
        subject=cluster_pki.subject_text(cert),
        sans=_sans(cert),
        serial=f"{cert.serial_number:x}",
        not_before=cert.not_valid_before_utc,
        not_after=not_after,
        days_left=int((not_after - now) / DAY),
        ca_ok=ca_ok,
        problem=problem,
    )


def _unreadable(member: str, path: Path, source: str, exc: Exception) -> CertReport:
    return CertReport(member, path, source, "invalid", problem=_reason(exc))


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return f"not PEM ({exc})"


def _read(path: Path) -> bytes:
    if path.stat().st_size > cluster_pki.PEM_BYTES_MAX:
        raise ValueError(f"larger than {cluster_pki.PEM_BYTES_MAX} bytes")
    return path.read_bytes()


def _sans(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(getattr(n, "value", n)) for n in names)


def _iso(when: dt.datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def _day(when: dt.datetime | None) -> str:
    return f"{when:%Y-%m-%d %H:%M} UTC" if when is not None else "-"


def warnings(
    reports: Sequence[CertReport], *, tls_dir: Path | None, skipped: dict[str, str] | None = None
) -> list[str]:
    """One sentence per ``expiring`` certificate: file, subject, expiry, what to do (pure).
    ``tls_dir``: the folder ``cluster up`` keeps its files in (None: the user's own files);
    ``skipped``: why ``cluster up`` did not renew a member (:class:`Renewals`)."""
    found = []
    for r in reports:
        if r.state != "expiring":
            continue
        what = "CA certificate" if r.member == CA_MEMBER else "certificate"
        days = r.days_left or 0
        left = "within a day" if days < 1 else f"in {days} day{'s' if days > 1 else ''}"
        head = (
            f"TLS warning: the {what} {r.file} ({r.subject}) expires on {_day(r.not_after)}, {left}"
        )
        found.append(f"{head}; {_remedy(r, tls_dir, skipped or {})}")
    return found


def failure_lines(reports: Sequence[CertReport]) -> list[str]:
    """One sentence per certificate ``cluster up`` would refuse (pure)."""
    lines = []
    for r in reports:
        line = f"TLS: {r.file} ({r.subject or r.member}) is {r.state}"
        if r.problem:
            line += f": {r.problem}"
        elif r.state == "expired":
            line += f" since {_day(r.not_after)}"
        elif r.state == "not yet valid":
            line += f" before {_day(r.not_before)} (check the clock)"
        lines.append(line)
    return lines


def _remedy(r: CertReport, tls_dir: Path | None, skipped: dict[str, str]) -> str:
    if tls_dir is None or r.source == PROVIDED:
        if r.member == CA_MEMBER:
            return (
                "it is your own --tls-ca, which gannet never rewrites: have it renewed with the "
                "same key (or every certificate re-issued by a new CA) and replace the file"
            )
        return (
            "it is your own --tls-cert, which gannet never rewrites: have its CA issue a new "
            "one and replace the certificate and key files (running members pick them up at "
            "their next TLS handshake)"
        )
    where = f" --tls-dir {tls_dir}"
    if r.member == CA_MEMBER:
        return (
            "gannet does not replace its CA by itself (every member and client trusts it): "
            f"run `gannet cluster certs renew --ca{where}` (same key: members and clients of "
            f"the old CA keep working) and give clients the new {r.file} before the old one "
            f"expires, or delete {tls_dir} to start over with a new CA"
        )
    why = skipped.get(r.member)
    renew = f"`gannet cluster certs renew{where}` re-issues it from the cluster CA"
    if why is not None:
        return f"not renewed: {why}"
    return (
        f"{renew} now (running members pick it up at their next TLS handshake), as does the "
        "next `gannet cluster up --tls`"
    )


def renew_members(
    tls_dir: Path,
    members: Sequence[str] | None,
    *,
    warn_days: int,
    force: bool,
    now: dt.datetime,
) -> Renewals:
    """Re-issue the member certificates of ``tls_dir`` that the cluster CA issued and that
    expire within ``warn_days`` (all of ``members`` with ``force``; ``members`` None: every
    ``<member>.crt`` of the folder). Files that are missing, unreadable or from another CA are
    left alone (:func:`pki.generated` refuses them with what to do)."""
    out = Renewals()
    ca_file, ca_key_file = tls_dir / cluster_pki.CA_CERT, tls_dir / cluster_pki.CA_KEY
    try:
        ca = x509.load_pem_x509_certificates(_read(ca_file))[0]
    except (OSError, ValueError):
        return out  # first run (no CA yet) or a broken CA: pki names it
    if members is None:
        members = sorted(p.stem for p in tls_dir.glob("*.crt") if p.name != ca_file.name)
    ca_key: ec.EllipticCurvePrivateKey | str | None = None
    for name in members:
        files = MemberFiles(tls_dir / f"{name}.crt", tls_dir / f"{name}.key")
        try:
            old = x509.load_pem_x509_certificates(_read(files.cert_file))[0]
        except (OSError, ValueError) as exc:
            if force and files.cert_file.exists():
                out.skipped[name] = f"{files.cert_file}: {_reason(exc)}"
            continue
        if not (force or old.not_valid_after_utc - now < warn_days * DAY):
            continue
        if not cluster_pki.signed_by(old, ca):
            out.skipped[name] = f"{files.cert_file} was not issued by the cluster CA {ca_file}"
            continue
        if not force and ca.not_valid_after_utc - now < warn_days * DAY:
            out.skipped[name] = (
                f"the cluster CA {ca_file} itself expires on {_day(ca.not_valid_after_utc)} and "
                "a certificate cannot outlive it: renew the CA first "
                f"(`gannet cluster certs renew --ca --tls-dir {tls_dir}`)"
            )
            continue
        if ca_key is None:
            ca_key = _load_ca_key(ca_key_file, ca)
        if isinstance(ca_key, str):
            out.skipped[name] = ca_key
            continue
        out.renewed.append(_reissue(name, files, old, ca, ca_key))
    return out


def _load_ca_key(ca_key_file: Path, ca: x509.Certificate) -> ec.EllipticCurvePrivateKey | str:
    """The CA key, or why it cannot sign (a sentence)."""
    again = "restore it and renew again"
    try:
        key = serialization.load_pem_private_key(_read(ca_key_file), password=None)
    except (OSError, ValueError, TypeError) as exc:
        return f"the CA key {ca_key_file}: {_reason(exc)}; {again}"
    if not isinstance(key, ec.EllipticCurvePrivateKey) or cluster_pki.public_der(
        key.public_key()
    ) != cluster_pki.public_der(ca.public_key()):
        return f"the CA key {ca_key_file} does not belong to the CA certificate; {again}"
    return key


def _reissue(
    name: str,
    files: MemberFiles,
    old: x509.Certificate,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
) -> Renewal:
    try:
        sans = list(old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        sans = [x509.DNSName(n) for n in ("localhost", name)]
    key, cert = cluster_pki.issue_member(name, sans, ca, ca_key)
    cluster_pki.write_member_pair(files, key, cert)
    return Renewal(
        name,
        files.cert_file,
        f"{old.serial_number:x}",
        f"{cert.serial_number:x}",
        old.not_valid_after_utc,
        cert.not_valid_after_utc,
    )


def renew_ca(tls_dir: Path) -> Renewal:
    """Re-sign the cluster CA certificate with its own key for :data:`CA_VALID_DAYS`
    (:func:`pki.reissue_ca`); :class:`click.ClickException` when the CA or its key
    cannot be used."""
    ca_file, ca_key_file = tls_dir / cluster_pki.CA_CERT, tls_dir / cluster_pki.CA_KEY
    fresh = f"delete {tls_dir} to have cluster up create a new CA and certificates"
    [old, *_] = cluster_pki.certificates(ca_file, "CA certificate", fresh)
    key = _load_ca_key(ca_key_file, old)
    if isinstance(key, str):
        raise click.ClickException(f"TLS: {key}, or {fresh}")
    cert = cluster_pki.reissue_ca(old, key)
    cluster_pki.write_certificate(ca_file, cert)
    return Renewal(
        CA_MEMBER,
        ca_file,
        f"{old.serial_number:x}",
        f"{cert.serial_number:x}",
        old.not_valid_after_utc,
        cert.not_valid_after_utc,
    )


def renewal_lines(renewals: Sequence[Renewal], *, running: bool) -> list[str]:
    """What each renewal did, and when the members use it (pure)."""
    members_use = (
        "running members serve it from their next TLS handshake (files checked at most every "
        "2 s) and present it to peers when they reconnect; no restart needed"
        if running
        else "the members start with it"
    )
    lines = []
    for r in renewals:
        if r.member == CA_MEMBER:
            what = f"the CA certificate {r.cert_file} (same key"
            use = (
                "certificates it issued stay valid under it, and clients that trust the old "
                "one keep working until that expires: give them the new file before then"
            )
        else:
            what = f"the certificate of {r.member}, {r.cert_file} (new key"
            use = members_use
        lines.append(
            f"TLS: renewed {what}, serial {r.serial_after}, was {r.serial_before}): valid until "
            f"{_day(r.not_after_after)} (was {_day(r.not_after_before)}); {use}"
        )
    return lines


def announce(lines: Sequence[str], *, style: str) -> None:
    """Each line on stderr (plain text: file names are never read as markup)."""
    for line in lines:
        output.err_console.print(line, style=style, markup=False, highlight=False)


def check_up(tls: ClusterTls, renewals: Renewals, *, tls_dir: Path | None, warn_days: int) -> None:
    """``cluster up``: print what was renewed and warn about what still expires soon."""
    now = dt.datetime.now(dt.UTC)
    announce(renewal_lines(renewals.renewed, running=False), style="green")
    source = GENERATED if tls_dir is not None else PROVIDED
    reports = inspect_cluster(tls, source, warn_days=warn_days, now=now)
    announce(warnings(reports, tls_dir=tls_dir, skipped=renewals.skipped), style="yellow")
