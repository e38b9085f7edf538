"""The Raft core must stay pure: no module of ``gannet.node.raft`` may import IO, clocks,
threads or randomness (``docs/design.md`` §1). Parsed with ``ast``, so a forbidden
import fails here even inside a function body."""

from __future__ import annotations

import ast
from pathlib import Path

RAFT_DIR = Path(__file__).resolve().parents[2] / "node" / "gannet" / "node" / "raft"
FORBIDDEN = {"asyncio", "os", "time", "socket", "grpc", "random", "threading"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_raft_package_exists() -> None:
    assert (RAFT_DIR / "core.py").is_file()


def test_no_io_clock_thread_or_random_imports() -> None:
    offenders = {
        path.name: sorted(imported_roots(path) & FORBIDDEN)
        for path in sorted(RAFT_DIR.glob("*.py"))
        if imported_roots(path) & FORBIDDEN
    }
    assert offenders == {}


def test_raft_imports_only_itself_and_the_standard_library() -> None:
    allowed = {"__future__", "bisect", "collections", "dataclasses", "enum", "typing", "gannet"}
    for path in sorted(RAFT_DIR.glob("*.py")):
        assert imported_roots(path) <= allowed, path.name
