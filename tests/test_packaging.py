"""The explicit package list in pyproject.toml must name every folder that holds an
``__init__.py`` under the three source roots (setuptools cannot discover a namespace that
spans several roots)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("node", "operator", "pipeline")


def test_package_list_matches_the_source_tree() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for root in ROOTS:
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / root)
            found.add(".".join(rel.parts))
    assert listed == found


def test_namespace_roots_have_no_init() -> None:
    for root in ROOTS:
        assert not (REPO / root / "gannet" / "__init__.py").exists()


def test_stdlib_operator_is_not_shadowed() -> None:
    import operator

    assert hasattr(operator, "add")
