"""Validate custom resources against the CRD schemas in ``charts/gannet/crds`` (the single
source of the CRDs), the way the API server would for ``spec``.

The CRDs use OpenAPI v3.0 schemas, whose ``exclusiveMinimum`` is a boolean as in JSON Schema
draft 4, so draft 4 is the validator; ``x-kubernetes-*`` keywords are ignored by it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

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


def errors(document: dict[str, Any]) -> list[str]:
    """Schema violations of one resource ("" path means the root)."""
    kind = document.get("kind")
    if kind not in crds():
        return [f"kind {kind!r} has no CRD"]
    validator = jsonschema.Draft4Validator(schema(kind))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
