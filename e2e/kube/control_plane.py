"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and kube-controller-manager.

Started and stopped by the session fixture of ``e2e/kube/conftest.py`` (binaries from
:mod:`e2e.kube.tools`). No kubelet: Pods are created by the controllers (StatefulSet,
ReplicaSet) and garbage-collected, but never run; brokers run as local processes instead.

What it sets up in its work directory:

- ``pki/``: a CA, the API server's serving certificate (127.0.0.1, localhost), the
  ``system:masters`` client certificate of ``admin.kubeconfig`` (used by the tests, kubectl,
  helm and the controller manager) and the service-account signing key, so the TokenRequest
  API issues tokens the server accepts (the operator runs under such a token).
- ``audit.log``: every request at level Metadata (JSON lines: user, verb, URI, response
  code), which the tests read for 403/409/422/5xx answers.
- etcd with automatic compaction off and kube-apiserver with ``--watch-cache=false``: watches
  then read from etcd directly, so compacting etcd (:meth:`ControlPlane.compact`) makes a
  watch that resumes from an older resourceVersion get ``410 Gone`` as it would after a long
  disconnection on a busy cluster.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import json
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from e2e.kube import tools
from e2e.processes import free_port

START_TIMEOUT_S = 120.0  # a cold kube-apiserver on a busy 2-core machine takes ~10-30 s

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""


def _pem_key(key: Any) -> bytes:
    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _certificate(
    subject: x509.Name,
    key: Any,
    issuer: tuple[x509.Name, Any] | None,
    *,
    ca: bool = False,
    server_names: tuple[str, ...] = (),
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server_names:
        import ipaddress  # noqa: PLC0415

        alt: list[x509.GeneralName] = []
        for name in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    if client:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def make_pki(root: Path) -> Pki:
    root.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gannet-e2e-kube-ca")])
    ca_cert = _certificate(ca_name, ca_key, None, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        server_key,
        (ca_name, ca_key),
        server_names=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default"),
    )
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _certificate(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "e2e-admin"),
            ]
        ),
        admin_key,
        (ca_name, ca_key),
        client=True,
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(
        ca=root / "ca.crt",
        server_cert=root / "apiserver.crt",
        server_key=root / "apiserver.key",
        admin_cert=root / "admin.crt",
        admin_key=root / "admin.key",
        sa_key=root / "sa.key",
        sa_pub=root / "sa.pub",
    )
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pki.server_key.write_bytes(_pem_key(server_key))
    pki.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    pki.admin_key.write_bytes(_pem_key(admin_key))
    pki.sa_key.write_bytes(_pem_key(sa_key))
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path, server: str, ca: Path, *, user: dict[str, str], namespace: str = "default"
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [
            {"name": "e2e", "context": {"cluster": "e2e", "user": "e2e", "namespace": namespace}}
        ],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def _process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        running = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield running
    finally:
        running.send_signal(signal.SIGTERM)
        try:
            running.wait(20)
        except subprocess.TimeoutExpired:
            running.kill()
            running.wait()


@dataclasses.dataclass
class ControlPlane:
    workdir: Path
    server: str
    etcd_url: str
    pki: Pki
    admin_kubeconfig: Path
    audit_log: Path
    controller_manager: bool

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One admin call to the API server (JSON in and out)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        call = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(call, context=self.ssl_context(), timeout=30) as answer:
            return json.loads(answer.read() or b"null")

    def audit(self) -> list[dict[str, Any]]:
        """Every audit event so far (ResponseComplete stage, one JSON object a line)."""
        events = []
        for line in self.audit_log.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
        return events

    def etcd_revision(self) -> int:
        answer = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        return int(answer["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd to its current revision: every older resourceVersion is gone (410)."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict[str, Any]) -> Any:
        call = urllib.request.Request(
            self.etcd_url + path, data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(call, timeout=10) as answer:
            return json.loads(answer.read())


def _wait_ready(plane: ControlPlane, processes: dict[str, subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        for what, running in processes.items():
            if running.poll() is not None:
                log = (plane.workdir / f"{what}.log").read_text()[-4000:]
                raise RuntimeError(f"{what} exited with {running.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(
                plane.server + "/readyz", context=plane.ssl_context(), timeout=10
            ) as answer:
                if answer.read().strip() == b"ok":
                    return
        except (OSError, ValueError) as exc:  # not listening yet, or a 500 while starting
            last = str(exc)
            if isinstance(exc, urllib.error.HTTPError):
                last = exc.read().decode(errors="replace")[-2000:]
        time.sleep(0.25)  # another process: there is nothing to await
    raise TimeoutError(f"kube-apiserver not ready in {START_TIMEOUT_S} s: {last}")


def _wait_for_default_service_account(plane: ControlPlane) -> None:
    """The controller manager creates each namespace's ``default`` ServiceAccount; pods need it."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            plane.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        time.sleep(0.25)
    raise TimeoutError("kube-controller-manager made no default ServiceAccount")


@contextlib.contextmanager
def running(workdir: Path, *, controller_manager: bool = True) -> Iterator[ControlPlane]:
    """Start etcd, kube-apiserver (and kube-controller-manager); stop them on the way out."""
    problems = tools.missing()
    if problems:
        raise FileNotFoundError("; ".join(problems))
    etcd = tools.etcd()
    assert etcd is not None
    workdir.mkdir(parents=True, exist_ok=True)
    pki = make_pki(workdir / "pki")
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    policy = workdir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    admin = write_kubeconfig(
        workdir / "admin.kubeconfig",
        server,
        pki.ca,
        user={
            "client-certificate-data": _b64(pki.admin_cert),
            "client-key-data": _b64(pki.admin_key),
        },
    )
    plane = ControlPlane(
        workdir=workdir,
        server=server,
        etcd_url=f"http://127.0.0.1:{etcd_port}",
        pki=pki,
        admin_kubeconfig=admin,
        audit_log=workdir / "audit.log",
        controller_manager=controller_manager,
    )
    etcd_command = [
        str(etcd),
        "--name=e2e",
        f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls={plane.etcd_url}",
        f"--advertise-client-urls={plane.etcd_url}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=e2e=http://127.0.0.1:{peer_port}",
        "--auto-compaction-retention=0",
        "--quota-backend-bytes=1073741824",
        "--unsafe-no-fsync",  # test data: a lost etcd dies with the session anyway
    ]
    apiserver_command = [
        str(tools.kube_binary("kube-apiserver")),
        f"--etcd-servers={plane.etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={api_port}",
        f"--cert-dir={workdir / 'certs'}",
        f"--tls-cert-file={pki.server_cert}",
        f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--authorization-mode=RBAC",
        f"--audit-policy-file={policy}",
        f"--audit-log-path={plane.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxbackup=0",
        "--watch-cache=false",
        "--etcd-compaction-interval=0",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        "--endpoint-reconciler-type=none",
    ]
    manager_command = [
        str(tools.kube_binary("kube-controller-manager")),
        f"--kubeconfig={admin}",
        f"--authentication-kubeconfig={admin}",
        f"--authorization-kubeconfig={admin}",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        "--leader-elect=false",
        f"--root-ca-file={pki.ca}",
        f"--service-account-private-key-file={pki.sa_key}",
        "--use-service-account-credentials=false",
        "--concurrent-gc-syncs=5",
        "--profiling=false",
    ]
    with contextlib.ExitStack() as stack:
        processes = {"etcd": stack.enter_context(_process(etcd_command, workdir / "etcd.log"))}
        processes["kube-apiserver"] = stack.enter_context(
            _process(apiserver_command, workdir / "kube-apiserver.log")
        )
        _wait_ready(plane, processes)
        if controller_manager:
            processes["kube-controller-manager"] = stack.enter_context(
                _process(manager_command, workdir / "kube-controller-manager.log")
            )
            _wait_for_default_service_account(plane)
        yield plane
