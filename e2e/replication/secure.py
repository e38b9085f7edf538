"""Authentication and TLS for the e2e replication group: one access key with every right,
a cluster CA, and per node a certificate used on the client port (TLS-only) and between peers
(mutual TLS). The CA and the certificates are made by the product's own writer,
:func:`gannet.node.cli.cluster.pki.generated` (what ``gannet cluster up --tls`` runs with:
``serverAuth`` and ``clientAuth``, SANs ``localhost``, ``127.0.0.1``, ``::1`` and the node name).

Used by :class:`e2e.replication.harness.ProcessGroup` (``security=``) for the ``kill-secure``
scenario of :mod:`e2e.replication.scenario`: brokers run with ``--auth-file``, ``--tls-cert``,
``--tls-key`` and ``--peer-tls-cert/--peer-tls-key/--peer-tls-ca``; the harness's admin calls
go through :func:`gannet.node.protocol.auth.client_channel` (signed, TLS); the official Producer
signs with ``Credentials(ak, sk)`` and sets ``tls_enable=True``. The official client trusts
only the default roots, read once per process, so :meth:`Security.trust_in_this_process` points
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` at the cluster CA before the first TLS client starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from rocketmq import Credentials

from gannet.node.cli.cluster import pki as cluster_pki
from gannet.node.cli.cluster.certs import MemberFiles
from gannet.node.protocol import auth

ACCESS_KEY = "e2e-admin"
SECRET_KEY = "e2e-admin-secret"


@dataclass(frozen=True)
class Security:
    auth_file: Path
    ca_file: Path
    node_files: dict[int, MemberFiles]

    @classmethod
    def make(cls, directory: Path, ids: list[int]) -> Security:
        directory.mkdir(parents=True, exist_ok=True)
        pki = cluster_pki.generated(directory / "tls", [f"node{i}" for i in ids], "127.0.0.1")
        nodes = {i: pki.members[f"node{i}"] for i in ids}
        allow = [{"actions": ["pub", "sub", "admin"], "topics": ["*"], "groups": ["*"]}]
        accounts = {
            "accounts": [{"access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "allow": allow}]
        }
        auth_file = directory / "accounts.json"
        auth_file.write_text(json.dumps(accounts))
        return cls(auth_file, pki.ca_file, nodes)

    def broker_args(self, node_id: int) -> list[str]:
        node = self.node_files[node_id]
        return [
            "--auth-file", str(self.auth_file),
            "--tls-cert", str(node.cert_file), "--tls-key", str(node.key_file),
            "--peer-tls-cert", str(node.cert_file), "--peer-tls-key", str(node.key_file),
            "--peer-tls-ca", str(self.ca_file),
        ]  # fmt: skip

    def client_security(self) -> auth.ClientSecurity:
        return auth.ClientSecurity(ACCESS_KEY, SECRET_KEY, tls_ca=self.ca_file)

    @contextmanager
    def channel(self, endpoint: str) -> Iterator[grpc.Channel]:
        opened, raw = auth.client_channel(endpoint, self.client_security())
        with raw:
            yield opened

    @staticmethod
    def credentials() -> Credentials:
        return Credentials(ACCESS_KEY, SECRET_KEY)

    def trust_in_this_process(self) -> None:
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(self.ca_file)
