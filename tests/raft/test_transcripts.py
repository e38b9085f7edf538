"""Transcript tests of the pure Raft core (etcd-io/raft's data-driven style).

Each ``testdata/*.txt`` file is a sequence of blocks separated by blank lines. A block is
optional ``#`` comment lines, one command, a line ``----``, and the expected output (never
blank; a command with nothing to report prints ``ok``). The commands are documented in
``gannet.node.testing.raft_script``.

To regenerate the expected output after a deliberate change, run

    GANNET_REWRITE_TRANSCRIPTS=1 .venv/bin/pytest -q tests/raft/test_transcripts.py

and review the diff with ``git diff tests/raft/testdata``: commit it only if you understand
every changed line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gannet.node.testing.raft_script import Script

TESTDATA = Path(__file__).parent / "testdata"
REWRITE = os.environ.get("GANNET_REWRITE_TRANSCRIPTS") == "1"


def parse_blocks(text: str) -> list[tuple[list[str], str, str]]:
    """(comment lines, command, expected output) per block."""
    blocks = []
    for chunk in text.strip("\n").split("\n\n"):
        lines = chunk.split("\n")
        separator = lines.index("----")
        head = lines[:separator]
        comments = [line for line in head if line.startswith("#")]
        commands = [line for line in head if not line.startswith("#")]
        assert len(commands) == 1, f"one command per block: {head}"
        blocks.append((comments, commands[0], "\n".join(lines[separator + 1 :])))
    return blocks


def render(blocks: list[tuple[list[str], str, str]]) -> str:
    return "\n\n".join("\n".join([*c, command, "----", out]) for c, command, out in blocks) + "\n"


@pytest.mark.parametrize("path", sorted(TESTDATA.glob("*.txt")), ids=lambda p: p.stem)
def test_transcript(path: Path) -> None:
    blocks = parse_blocks(path.read_text())
    script = Script()
    actual = []
    for comments, command, expected in blocks:
        output = script.run(command)
        actual.append((comments, command, output))
        if not REWRITE:
            assert output == expected, f"{path.name}: `{command}`\n--- got ---\n{output}"
    if REWRITE:
        path.write_text(render(actual))
