"""``spec.tier`` of a GannetCluster (pure): the spec read with its defaults and refusals, the
``--tier-*`` arguments of every broker group (each its own prefix), the credentials Secret
mounted as the file the broker reads, and a change rolling the pods like any template change."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gannet.operator import broker_group_manifests, manifests, specs

TIER = {
    "endpoint": "http://s3.example:8333",
    "bucket": "gannet-tier",
    "credentialsSecret": {"name": "s3-credentials"},
}


def cluster(**tier: Any) -> specs.ClusterSpec:
    return specs.cluster_spec({"replicas": 3, "tier": {**TIER, **tier}})


def broker(spec: specs.ClusterSpec, group: int = 0) -> dict[str, Any]:
    sts = manifests.stateful_set("main", "demo", "uid-1", spec, replicas=3, group=group)
    container: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def options(args: list[str]) -> dict[str, str]:
    """The ``--tier-*`` options of a container's arguments, by name."""
    return {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--tier-")}


def test_defaults_fill_every_broker_option() -> None:
    assert options(broker(cluster())["args"]) == {
        "--tier-endpoint": "http://s3.example:8333",
        "--tier-bucket": "gannet-tier",
        "--tier-prefix": "gannet/demo/main/broker-0",
        "--tier-credentials-file": "/etc/gannet/tier/credentials",
        "--tier-offload-after-s": "3600",
        "--tier-offload-disk-ratio": "0.7",
        "--tier-local-retention-bytes": "0",
        "--tier-uploads-per-pass": "4",
        "--tier-pass-interval-s": "10",
    }


def test_given_settings_reach_the_broker() -> None:
    spec = cluster(
        prefix="team-a/orders",
        region="eu-west-1",
        offloadAfterSeconds=600,
        offloadDiskRatio=0.5,
        localRetentionBytes=1 << 30,
        uploadsPerPass=2,
        passIntervalSeconds=2.5,
    )
    found = options(broker(spec)["args"])
    assert found["--tier-prefix"] == "team-a/orders/broker-0"
    assert found["--tier-region"] == "eu-west-1"
    assert found["--tier-offload-after-s"] == "600"
    assert found["--tier-offload-disk-ratio"] == "0.5"
    assert found["--tier-local-retention-bytes"] == str(1 << 30)
    assert found["--tier-uploads-per-pass"] == "2"
    assert found["--tier-pass-interval-s"] == "2.5"


def test_no_tier_no_option_and_no_volume() -> None:
    spec = specs.cluster_spec({"replicas": 3})
    container = broker(spec)
    assert not options(container["args"])
    assert all(m["name"] != "tier-credentials" for m in container["volumeMounts"])


def test_broker_groups_never_share_a_prefix() -> None:
    spec = specs.cluster_spec({"replicas": 3, "brokerGroups": 16, "tier": TIER})
    prefixes = [options(broker(spec, g)["args"])["--tier-prefix"] for g in range(16)]
    assert len(set(prefixes)) == 16
    # ...nor is one a prefix of another's keys (broker-1 vs broker-10: the keys add '/').
    for a in prefixes:
        assert not any(b != a and b.startswith(a + "/") for b in prefixes)
    # The objects of groups >= 1 carry their own prefix too.
    objects = broker_group_manifests.group_objects(
        "main", "demo", "uid-1", spec, group=3, replicas=3
    )
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert options(args)["--tier-prefix"] == "gannet/demo/main/broker-3"


def test_credentials_secret_key_is_the_file_the_broker_reads() -> None:
    spec = cluster(credentialsSecret={"name": "s3-credentials", "key": "aws"})
    sts = manifests.stateful_set("main", "demo", "uid-1", spec, replicas=3)
    pod = sts["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tier-credentials"]
    assert volume["secret"]["secretName"] == "s3-credentials"
    assert volume["secret"]["items"] == [{"key": "aws", "path": "credentials"}]
    assert volume["secret"]["defaultMode"] == 0o440  # the pod's group, read only
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": "tier-credentials", "mountPath": "/etc/gannet/tier", "readOnly": True}
    args = pod["containers"][0]["args"]
    file = options(args)["--tier-credentials-file"]
    assert file == f"{mount['mountPath']}/{volume['secret']['items'][0]['path']}"
    kubernetes_validate.validate(sts, "1.33", strict=True)


def test_a_tier_change_changes_the_pod_template() -> None:
    """The operator rolls pods whose controller revision is outdated, so a template change is
    what rolls a tier change (like every other spec change)."""
    before = manifests.stateful_set("main", "demo", "u", cluster(), replicas=3)["spec"]["template"]
    after = manifests.stateful_set(
        "main", "demo", "u", cluster(offloadAfterSeconds=60), replicas=3
    )["spec"]["template"]
    assert before != after
    assert (
        before
        == manifests.stateful_set("main", "demo", "u", cluster(), replicas=3)["spec"]["template"]
    )


@pytest.mark.parametrize(
    ("tier", "field"),
    [
        ({"endpoint": "s3.example:8333"}, "spec.tier.endpoint"),
        ({"bucket": "Bad_Bucket"}, "spec.tier.bucket"),
        ({"prefix": "a//b"}, "spec.tier.prefix"),
        ({"prefix": "a/b c"}, "spec.tier.prefix"),
        ({"credentialsSecret": {}}, "spec.tier.credentialsSecret.name"),
        ({"credentialsSecret": {"name": "s3", "key": "a/b"}}, "spec.tier.credentialsSecret.key"),
        ({"offloadDiskRatio": 0}, "spec.tier.offloadDiskRatio"),
        ({"offloadDiskRatio": 1.5}, "spec.tier.offloadDiskRatio"),
        ({"offloadAfterSeconds": -1}, "spec.tier.offloadAfterSeconds"),
        ({"uploadsPerPass": 0}, "spec.tier.uploadsPerPass"),
        ({"passIntervalSeconds": 0}, "spec.tier.passIntervalSeconds"),
        ({"localRetentionBytes": "1Gi"}, "spec.tier.localRetentionBytes"),
    ],
)
def test_bad_tier_spec_names_the_field(tier: dict[str, Any], field: str) -> None:
    with pytest.raises(specs.SpecError, match=field.replace(".", r"\.")):
        cluster(**tier)
