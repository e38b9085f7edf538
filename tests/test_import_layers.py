"""The import layers of ``.importlinter`` hold, and every package of Gannet stands in one.

``lint-imports`` (import-linter) reads every import of the three source roots, those inside
functions and under ``TYPE_CHECKING`` included, so an import that runs back up (the store
importing the CLI, the operator importing the store, a new circle) fails ``make test`` as well
as ``make lint``.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"gannet.node": REPO / "node/gannet/node"}
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _layers() -> list[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [name.strip() for line in lines for name in line.split("|") if name.strip()]


def test_contracts_hold() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / ".importlinter"), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_node_package_and_module_is_in_a_layer() -> None:
    layers = set(_layers())
    node = ROOTS["gannet.node"]
    children = {
        f"gannet.node.{p.stem if p.is_file() else p.name}"
        for p in node.iterdir()
        if (p.is_file() and p.suffix == ".py" and p.name != "__init__.py")
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert children - layers == set(), "place the new package in a layer of .importlinter"
    assert {"gannet.operator", "gannet.pipeline"} <= layers
