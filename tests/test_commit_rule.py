"""The broker decides in one place when a write may be answered: ``domain/committing.py``.

No other module of the broker above the store and the replication driver proposes what it
appended (``propose_local``), waits for the commit point (``wait_committed``) or waits for a
flush (``durable_waiters``, ``wait_flushed``): every write path calls ``Committer.commit``.
Parsed with ``ast``, so a call hidden in a nested function is found too.
"""

from __future__ import annotations

import ast
from pathlib import Path

NODE = Path(__file__).resolve().parents[1] / "node" / "gannet" / "node"
RULE = {"propose_local", "wait_committed", "durable_waiters", "wait_flushed"}
OWNERS = {"domain/committing.py"}
"""Where the rule is written."""
BELOW = ("replication/", "store/", "raft/", "testing/")
"""The layers that implement what the rule calls (and the test helpers that drive them)."""


def _calls(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in RULE
        ):
            found.add(node.func.attr)
    return found


def test_the_commit_rule_is_written_once() -> None:
    offenders: dict[str, list[str]] = {}
    owners_seen: set[str] = set()
    for path in sorted(NODE.rglob("*.py")):
        name = path.relative_to(NODE).as_posix()
        calls = _calls(path)
        if name in OWNERS:
            if calls:
                owners_seen.add(name)
            continue
        if name.startswith(BELOW):
            continue
        if calls:
            offenders[name] = sorted(calls)
    assert offenders == {}, "call Committer.commit (domain/committing.py) instead"
    assert owners_seen == OWNERS, "the rule itself must call what it decides with"
