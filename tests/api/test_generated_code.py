"""The committed admin API code in gen/ is what protoc makes of protos/ today."""

from __future__ import annotations

from pathlib import Path

from gannet.node.protocol import generating


def test_committed_generated_code_is_current(tmp_path: Path) -> None:
    written = generating.generate(tmp_path)
    assert [p.name for p in written] == list(generating.GENERATED_NAMES)
    for path in written:
        committed = generating.GEN_DIR / path.name
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `.venv/bin/python -m gannet.node.protocol.generating`"
        )
