"""Validate custom resources against the CRD schemas in ``charts/gannet/crds`` (the single
source of the CRDs), the way the API server would for ``spec``.

The CRDs use OpenAPI v3.0 schemas, whose ``exclusiveMinimum`` is a boolean as in JSON Schema
draft 4, so draft 4 is the validator; ``x-kubernetes-*`` keywords are ignored by it.

Structural schemas may not say ``additionalProperties: false`` next to ``properties`` (the API
server rejects such a CRD); unknown fields are instead pruned, or refused by strict field
validation (``kubectl apply``'s default). :func:`strict` adds the refusal to every object
schema that lists its properties and does not preserve unknown fields, as that validation does.
``x-kubernetes-validations`` CEL rules are evaluated with cel-python (:func:`rule_violations`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import celpy
import celpy.adapter
import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "charts" / "gannet" / "crds"


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    """CRD documents by kind."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        found[document["spec"]["names"]["kind"]] = document
    return found


def schema(kind: str) -> dict[str, Any]:
    version = crds()[kind]["spec"]["versions"][0]
    result: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return result


def strict(node: Any) -> Any:
    """A copy of a schema in which listed-properties objects refuse unknown fields."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: strict(value) for key, value in node.items()}
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        result["additionalProperties"] = False
    return result


def structural_problems(node: Any, path: str = "") -> list[str]:
    """Places where a schema breaks a structural-schema rule the API server enforces."""
    if isinstance(node, list):
        return [p for i, item in enumerate(node) for p in structural_problems(item, f"{path}[{i}]")]
    if not isinstance(node, dict):
        return []
    found = []
    if "properties" in node and "additionalProperties" in node:
        found.append(f"{path}: additionalProperties beside properties")
    if node.get("x-kubernetes-int-or-string") and "type" in node:
        found.append(f"{path}: int-or-string with a type")
    if "properties" in node and node.get("type") != "object":
        found.append(f"{path}: properties without type: object")
    for key, value in node.items():
        found += structural_problems(value, f"{path}.{key}")
    return found


def rule_violations(node: Any, value: Any, path: str = "") -> list[str]:
    """Messages of the ``x-kubernetes-validations`` CEL rules that ``value`` breaks, evaluated
    with cel-python after the API server's defaulting of each object's direct properties."""
    if not isinstance(node, dict) or not isinstance(value, dict):
        return []
    properties = node.get("properties") or {}
    defaulted = {
        **{k: p["default"] for k, p in properties.items() if "default" in p},
        **value,
    }
    found: list[str] = []
    for rule in node.get("x-kubernetes-validations") or ():
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.adapter.json_to_cel(defaulted)}):
            found.append(f"{path}: {rule['message']}")
    for key, child in properties.items():
        found += rule_violations(child, defaulted.get(key), f"{path}.{key}")
    return found


def errors(document: dict[str, Any]) -> list[str]:
    """Schema violations of one resource ("" path means the root), CEL rules included."""
    kind = document.get("kind")
    if kind not in crds():
        return [f"kind {kind!r} has no CRD"]
    validator = jsonschema.Draft4Validator(strict(schema(kind)))
    found = [
        f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(document)
    ]
    return found or rule_violations(schema(kind), document)


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
