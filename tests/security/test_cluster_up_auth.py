"""``gannet cluster up --auth-file``: every member requires signed requests, and with several
broker groups the members poll each other with the cluster key ``cluster up`` creates.

The auth directory's contents (the user's files linked, the key file owner-only with ``admin``,
kept across runs, clashes refused) are checked directly; then 2 groups x 1 replica run as real
processes (:func:`cluster.start_cluster`, as ``cluster up`` starts them): each member's view of
the other group fills in with no poll error, and an unsigned admin call is refused.
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import click
import grpc
import pytest

from e2e.groups.harness import free_base_port
from e2e.processes import wait_for
from gannet.node.cli.cluster import auth as cluster_auth
from gannet.node.cli.cluster import commands as cluster
from gannet.node.protocol import credentials
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.testing import small_stores

from .conftest import ADMIN, Signed, write_accounts

START_TIMEOUT_S = 90.0


def test_auth_dir_links_the_users_files_and_keeps_one_cluster_key(tmp_path: Path) -> None:
    users = write_accounts(tmp_path / "accounts.json")
    root = tmp_path / "cluster"
    auth = cluster_auth.prepare(root, users, cluster_key=True)
    key_file = auth.auth_dir / cluster_auth.ACCOUNTS_FILE
    assert (auth.auth_dir / "accounts.json").resolve() == users.resolve()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    accounts = credentials.load(auth.auth_dir)
    assert set(accounts) == {cluster_auth.ACCESS_KEY, *credentials.load(users)}
    key = accounts[cluster_auth.ACCESS_KEY]
    assert key.secret_key == auth.secret_key
    assert [g.actions for g in key.grants] == [frozenset({"admin"})]
    again = cluster_auth.prepare(root, users, cluster_key=True)
    assert again.secret_key == auth.secret_key  # kept across runs
    argv = cluster.broker_argv(
        cluster.plan(1, "127.0.0.1", 8081)[0], cluster.plan(1, "127.0.0.1", 8081), root,
        "sync", None, auth=auth,
    )  # fmt: skip
    assert argv[-4:] == [
        "--auth-file",
        str(auth.auth_dir),
        "--cluster-access-key",
        "gannet-cluster-key",
    ]
    assert auth.secret_key not in " ".join(argv)  # the secret goes in the environment
    assert auth.env() == {"GANNET_CLUSTER_SECRET_KEY": auth.secret_key}
    one = cluster_auth.prepare(root, users, cluster_key=False)  # one group: no extra key
    assert one.secret_key is None
    assert not key_file.exists()
    assert one.argv() == ["--auth-file", str(auth.auth_dir)]


def test_auth_file_clashing_with_the_cluster_key_is_refused(tmp_path: Path) -> None:
    users = tmp_path / "accounts.json"
    account = {"access_key": cluster_auth.ACCESS_KEY, "secret_key": "s", "allow": []}
    users.write_text(json.dumps({"accounts": [account]}))
    with pytest.raises(click.ClickException, match="local cluster's own key"):
        cluster_auth.prepare(tmp_path / "cluster", users, cluster_key=True)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(click.ClickException, match="--auth-file: "):
        cluster_auth.prepare(tmp_path / "cluster", broken, cluster_key=True)


@pytest.mark.timeout(180)
def test_two_groups_with_auth_poll_each_other_with_the_cluster_key(tmp_path: Path) -> None:
    users = write_accounts(tmp_path / "accounts.json")
    root = tmp_path / "cluster"
    plans = cluster.plan_cluster(2, 1, "127.0.0.1", free_base_port(2, seed=22), root)
    auth = cluster_auth.prepare(root, users, cluster_key=True)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        cluster.start_cluster(
            plans,
            "sync",
            0,
            processes,
            file_size_mb=16,
            index_hash_slots=small_stores.INDEX_HASH_SLOTS,
            auth=auth,
        )
        for group in plans:
            endpoint = group.peers[0].client_endpoint
            other = next(g.broker_name for g in plans if g is not group)
            signed = grpc.intercept_channel(grpc.insecure_channel(endpoint), Signed(*ADMIN))
            admin = admin_pb2_grpc.AdminStub(signed)  # type: ignore[no-untyped-call]

            def sees_other(admin: admin_pb2_grpc.AdminStub = admin, other: str = other) -> bool:
                try:
                    view = admin.GetClusterView(admin_pb2.GetClusterViewRequest(), timeout=2)
                except grpc.RpcError:
                    return False  # still starting
                states = {s.group.broker_name: s for s in view.groups}
                state = states.get(other)
                return state is not None and not state.last_error and state.age_seconds < 10

            wait_for(sees_other, START_TIMEOUT_S, f"{group.broker_name} to see {other}")
            unsigned = admin_pb2_grpc.AdminStub(grpc.insecure_channel(endpoint))  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as refused:
                unsigned.GetClusterView(admin_pb2.GetClusterViewRequest(), timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        cluster._stop_all(processes)
