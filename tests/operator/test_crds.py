"""The CRDs: names agree with the operator's, every kind has status (GannetCluster also scale),
printer columns and short names; the example resources validate; bad ones are rejected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gannet.operator import resources, specs
from tests.operator import crd_schemas

EXAMPLES = sorted((crd_schemas.ROOT / "deploy" / "examples").glob("*.yaml"))
BAD = crd_schemas.load_all(Path(__file__).parent / "data" / "bad-resources.yaml")
# Unknown fields and quantity syntax are the schema's job alone; the operator checks the rest.
BAD_FOR_OPERATOR = [d for d in BAD if d["metadata"]["name"] not in ("typo", "size")]


def test_short_names_are_unambiguous() -> None:
    """``kubectl get X`` must mean one thing: no short name equals a category (``kubectl get
    gannet`` lists all three kinds) or a name of another kind (plural, singular, kind)."""
    found = crd_schemas.crds()
    categories = {c for crd in found.values() for c in crd["spec"]["names"].get("categories", [])}
    assert categories == {"gannet"}
    owners: dict[str, set[str]] = {}
    for kind, crd in found.items():
        names = crd["spec"]["names"]
        assert names["shortNames"], kind
        for name in [names["plural"], names["singular"], names["kind"].lower()]:
            owners.setdefault(name, set()).add(kind)
        for short in names["shortNames"]:
            assert short not in categories, f"{kind} short name {short!r} is also a category"
            owners.setdefault(short, set()).add(kind)
    shared = {name: sorted(kinds) for name, kinds in owners.items() if len(kinds) > 1}
    assert not shared, f"names used by more than one kind: {shared}"
    assert found["GannetCluster"]["spec"]["names"]["shortNames"] == ["gc"]


def test_crds_match_the_operator_names() -> None:
    found = crd_schemas.crds()
    assert set(found) == set(resources.PLURALS)
    for kind, crd in found.items():
        plural = resources.PLURALS[kind]
        assert crd["metadata"]["name"] == f"{plural}.{resources.GROUP}"
        assert crd["spec"]["group"] == resources.GROUP
        assert crd["spec"]["names"]["plural"] == plural
        assert crd["spec"]["names"]["shortNames"]
        (version,) = crd["spec"]["versions"]
        assert version["name"] == resources.VERSION
        assert version["served"]
        assert version["storage"]
        assert "status" in version["subresources"]
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert "Ready" in columns
        assert "Age" in columns
        assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["type"] == "object"
        schema = version["schema"]["openAPIV3Schema"]
        assert crd_schemas.structural_problems(schema) == [], kind
    scale = found["GannetCluster"]["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_the_crds(path: Path) -> None:
    documents = crd_schemas.load_all(path)
    assert documents
    for document in documents:
        assert crd_schemas.errors(document) == [], document["metadata"]["name"]
        # ...and the operator reads them without complaint.
        spec, name = document["spec"], document["metadata"]["name"]
        if document["kind"] == "Topic":
            specs.topic_spec(name, spec)
        elif document["kind"] == "ConsumerGroup":
            specs.group_spec(name, spec)
        else:
            specs.cluster_spec(spec)


@pytest.mark.parametrize("document", BAD, ids=lambda d: d["metadata"]["name"])
def test_bad_resources_are_rejected_by_the_schema(document: dict[str, Any]) -> None:
    problems = crd_schemas.errors(document)
    assert problems, document["metadata"]["annotations"]["reject"]


@pytest.mark.parametrize("document", BAD_FOR_OPERATOR, ids=lambda d: d["metadata"]["name"])
def test_bad_resources_are_rejected_by_the_operator_too(document: dict[str, Any]) -> None:
    spec, name = document["spec"], document["metadata"]["name"]
    parse: Callable[[], object] = {
        "Topic": lambda: specs.topic_spec(name, spec),
        "ConsumerGroup": lambda: specs.group_spec(name, spec),
        "GannetCluster": lambda: specs.cluster_spec(spec),
    }[document["kind"]]
    with pytest.raises(specs.SpecError, match=r"spec\.") as caught:
        parse()
    assert str(caught.value)
