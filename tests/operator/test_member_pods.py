"""The roster ConfigMap (pure): what each pod starts with, and the stored record read back."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.operator import broker_group_manifests, manifests, member_pods
from gannet.operator import membership_planning as mp


def test_a_new_group_bootstraps_with_its_first_members_then_everyone_joins() -> None:
    roster = mp.bootstrap_roster(3)
    cm = member_pods.config_map("main", "demo", "uid-1", roster)
    assert cm["metadata"]["name"] == "main-members"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    line = cm["data"]["main-1"]
    assert shlex.split(line) == [
        "--node-id",
        "2",
        "--data-dir",
        "/var/lib/gannet/node-2",
        "--peers",
        "1=main-0.main-peers.demo.svc:8091/8081,2=main-1.main-peers.demo.svc:8091/8081,"
        "3=main-2.main-peers.demo.svc:8091/8081",
    ]
    sealed = mp.apply(roster, mp.Seal())
    data = member_pods.config_map("main", "demo", "uid-1", sealed)["data"]
    assert data["main-1"] == (
        "--node-id 2 --data-dir /var/lib/gannet/node-2 --join "
        "--peers 2=main-1.main-peers.demo.svc:8091/8081"
    )


def test_the_entrypoint_reads_the_pods_key() -> None:
    command = manifests.BROKER_COMMAND
    assert command[:2] == ["/bin/sh", "-c"]
    # Kubernetes turns `$$` into `$`: the shell sees $POD_NAME and $(cat "$f").
    script = command[2].replace("$$", "$")
    assert 'f="/etc/gannet/members/$POD_NAME"' in script
    assert 'exec gannet broker run $(cat "$f") "$@"' in script


def test_the_entrypoint_runs_the_broker_with_the_pods_key_then_the_common_arguments(
    tmp_path: Path,
) -> None:
    """The container's command run by a real /bin/sh, as the kubelet would start it (`$$`
    unescaped as Kubernetes does), with a stand-in `gannet` that prints its arguments."""
    roster = mp.bootstrap_roster(3)
    line = member_pods.config_map("main", "demo", "uid-1", roster)["data"]["main-1"]
    members_dir = tmp_path / "members"
    members_dir.mkdir()
    (members_dir / "main-1").write_text(line)
    printed = _run_entrypoint(tmp_path / "bin", members_dir, None, {"POD_NAME": "main-1"})
    assert printed == [
        "broker",
        "run",
        *shlex.split(line),
        "--listen",
        "0.0.0.0:8081",
    ]


@given(
    st.lists(
        st.tuples(st.sampled_from(["", "scale-down", "replace"]), st.text("abc-0123", max_size=8)),
        min_size=1,
        max_size=9,
    ),
    st.integers(1, 99),
    st.booleans(),
)
def test_the_roster_reads_back_as_written(
    rows: list[tuple[str, str]], extra: int, sealed: bool
) -> None:
    records = tuple(
        mp.Record(
            i,
            str(i + extra),
            "join",
            mp.node_data_dir(str(i + extra)),
            leaving,  # type: ignore[arg-type]
            volume,
        )
        for i, (leaving, volume) in enumerate(rows)
    )
    roster = mp.Roster(records, next_node_id=len(rows) + extra, sealed=sealed)
    data = member_pods.config_map("c", "ns", "u", roster)["data"]
    assert member_pods.decode(data) == roster


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "malformed"),
        (
            '{"nextNodeId": 2, "members": [{"ordinal": 1, "nodeId": "1", "mode": "join", '
            '"dataDir": "/d"}]}',
            "ordinals are not 0..0",
        ),
        (
            '{"nextNodeId": 2, "members": [{"ordinal": 0, "nodeId": "x", "mode": "join", '
            '"dataDir": "/d"}]}',
            "bad member",
        ),
    ],
)
def test_a_broken_roster_is_named(text: str, problem: str) -> None:
    with pytest.raises(member_pods.RosterError, match=problem):
        member_pods.decode({member_pods.ROSTER_KEY: text})
    assert member_pods.decode({}) is None


def test_arguments_the_shell_would_expand_are_refused() -> None:
    roster = mp.bootstrap_roster(1)
    bad = dataclasses.replace(roster.records[0], data_dir="/var/lib/$(reboot)")
    with pytest.raises(member_pods.RosterError, match="shell would expand"):
        member_pods.pod_args("main", "demo", roster, bad)


def test_pods_are_found_by_roster_and_by_advertised_address() -> None:
    roster = mp.Roster((mp.Record(0, "1", "join", "/d"), mp.Record(1, "7", "join", "/d")), 8)
    assert member_pods.ordinal_of(roster, "7") == 1
    assert member_pods.ordinal_of(roster, "2") == -1
    assert member_pods.ordinal_of(None, "2") == 1  # before rosters: id - 1
    assert member_pods.pod_of_node("main", roster, "7") == "main-1"
    assert member_pods.pod_of_node("main", roster, "9") == "node 9"
    assert member_pods.ordinal_of_endpoint("main", "main-3.main-peers.demo.svc:8081") == 3
    assert member_pods.ordinal_of_endpoint("main", "other-3.other-peers.demo.svc:8081") == -1
    assert member_pods.ordinal_of_endpoint("main", "") == -1
    assert (
        json.loads(member_pods.config_map("main", "d", "u", roster)["data"]["roster.json"])[
            "nextNodeId"
        ]
        == 8
    )


def test_the_entrypoint_passes_its_groups_seeds_when_the_operator_wrote_them(
    tmp_path: Path,
) -> None:
    """The seeds file of the pod's broker name (ConfigMap ``<cluster>-groups``) becomes
    ``--cluster-seeds``; a 1-group cluster has no such file and runs without it."""
    roster = mp.bootstrap_roster(1)
    line = member_pods.config_map("main-g1", "demo", "uid-1", roster)["data"]["main-g1-0"]
    members_dir, groups_dir, bin_dir = tmp_path / "members", tmp_path / "groups", tmp_path / "bin"
    for folder in (members_dir, groups_dir, bin_dir):
        folder.mkdir()
    (members_dir / "main-g1-0").write_text(line)
    seeds = broker_group_manifests.groups_config_map("main", "demo", "uid-1", 2)["data"]["broker-1"]
    (groups_dir / "broker-1").write_text(seeds)
    printed = _run_entrypoint(
        bin_dir,
        members_dir,
        groups_dir,
        {"POD_NAME": "main-g1-0", "GANNET_BROKER_NAME": "broker-1"},
    )
    assert printed == [
        "broker",
        "run",
        *shlex.split(line),
        "--cluster-seeds",
        "main-client.demo.svc:8081",
        "--listen",
        "0.0.0.0:8081",
    ]


def _run_entrypoint(
    bin_dir: Path, members_dir: Path, groups_dir: Path | None, env: dict[str, str]
) -> list[str]:
    """The container's command run by a real /bin/sh, as the kubelet would start it (`$$`
    unescaped as Kubernetes does, the roster and seeds folders moved under the test's), with a
    stand-in `gannet` that prints its arguments; returns them."""
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "gannet"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    script = manifests.BROKER_COMMAND[2].replace("$$", "$")
    script = script.replace(manifests.MEMBERS_DIR, str(members_dir))
    if groups_dir is not None:
        script = script.replace(manifests.GROUPS_DIR, str(groups_dir))
    command = [*manifests.BROKER_COMMAND[:2], script, *manifests.BROKER_COMMAND[3:]]
    done = subprocess.run(
        [*command, "--listen", "0.0.0.0:8081"],
        env={**os.environ, **env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split("\n")[:-1]
