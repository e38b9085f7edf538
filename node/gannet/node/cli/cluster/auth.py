"""Credentials of a local cluster: ``gannet cluster up --auth-file PATH``.

Every member gets the same auth directory, ``DATA_ROOT/auth/``: a symlink to each of the
user's credentials files (PATH itself, or the ``*.json``/``*.yaml`` files of a directory, so an
edit of them is picked up while the brokers run) and, with several broker groups, the cluster
key's credentials file :data:`ACCOUNTS_FILE`, access key :data:`ACCESS_KEY` with the ``admin``
right (the names the operator gives its cluster key). The key is created once (random secret,
owner-only file) and kept for later runs, like the peer secret. Each member signs its polls of
the other groups with it (``--cluster-access-key``; the secret goes in the environment,
``GANNET_CLUSTER_SECRET_KEY``, never on a command line). To rotate it, stop the cluster and
delete the file. docs/security.md, "Broker groups", says why the groups need it.

Called by :mod:`commands` (``cluster up`` and :func:`~commands.start_cluster`).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import click

from gannet.node.protocol import credentials

AUTH_DIR_NAME = "auth"
ACCESS_KEY = "gannet-cluster-key"
ACCOUNTS_FILE = "gannet-cluster-key.json"
SECRET_KEY_ENV = "GANNET_CLUSTER_SECRET_KEY"
SECRET_KEY_BYTES = 32


@dataclass(frozen=True, slots=True)
class ClusterAuth:
    """What every member of a local cluster runs with when ``--auth-file`` is given."""

    auth_dir: Path
    """Every member's ``--auth-file``: the user's accounts and, with groups, the cluster key."""
    secret_key: str | None
    """The cluster key's secret (several groups), else ``None``."""

    def argv(self) -> list[str]:
        """The ``gannet broker run`` options (the secret travels in :meth:`env`)."""
        key = ["--cluster-access-key", ACCESS_KEY] if self.secret_key else []
        return ["--auth-file", str(self.auth_dir), *key]

    def env(self) -> dict[str, str]:
        return {SECRET_KEY_ENV: self.secret_key} if self.secret_key else {}


def prepare(data_root: Path, auth_file: Path, *, cluster_key: bool) -> ClusterAuth:
    """Fill ``data_root/auth/`` (module docstring); ``cluster_key``: several groups.

    Raises :class:`click.ClickException` (exit 1) when the user's credentials do not load or
    use the cluster key's access key or file name."""
    try:
        users = credentials.files_of(auth_file)
        accounts = credentials.load(auth_file)
    except credentials.CredentialsError as exc:
        raise click.ClickException(f"--auth-file: {exc}") from exc
    if cluster_key and ACCESS_KEY in accounts:
        raise click.ClickException(
            f"--auth-file: access key {ACCESS_KEY!r} is the local cluster's own key "
            "(cluster up creates it); rename that account"
        )
    if any(f.name == ACCOUNTS_FILE for f in users):
        raise click.ClickException(
            f"--auth-file: {ACCOUNTS_FILE} is the name of the cluster key's file; rename it"
        )
    auth_dir = data_root / AUTH_DIR_NAME
    if auth_dir.resolve() in (auth_file.resolve(), *auth_file.resolve().parents):
        raise click.ClickException(f"--auth-file: give your own credentials, not {auth_dir}")
    auth_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in auth_dir.iterdir():  # links of an earlier run's --auth-file
        if stale.is_symlink():
            stale.unlink()
    for user_file in users:
        (auth_dir / user_file.name).symlink_to(user_file.resolve())
    key_file = auth_dir / ACCOUNTS_FILE
    if not cluster_key:
        key_file.unlink(missing_ok=True)  # one group: nothing to sign, no extra admin key
        return ClusterAuth(auth_dir, None)
    if not key_file.exists():
        _write_key_file(key_file, secrets.token_urlsafe(SECRET_KEY_BYTES))
    return ClusterAuth(auth_dir, _secret_of(key_file))


def _write_key_file(path: Path, secret_key: str) -> None:
    """The cluster key's credentials file (``admin`` on everything), owner-only."""
    document = {
        "accounts": [
            {
                "access_key": ACCESS_KEY,
                "secret_key": secret_key,
                "allow": [{"actions": ["admin"], "topics": ["*"], "groups": ["*"]}],
            }
        ]
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(document, out, sort_keys=True)
        out.write("\n")


def _secret_of(path: Path) -> str:
    try:
        accounts = credentials.load(path)
        return accounts[ACCESS_KEY].secret_key
    except (credentials.CredentialsError, KeyError) as exc:
        raise click.ClickException(
            f"{path}: not the cluster key's file ({exc}); delete it and start again"
        ) from exc
