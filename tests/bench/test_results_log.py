"""``bench.results_log``: every benchmark appends its records as JSON lines to
``bench/results/<name>.jsonl``, creating the folder, never rewriting earlier runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import results_log


def test_append_adds_one_line_per_record_after_earlier_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "results"
    monkeypatch.setattr(results_log, "RESULTS", folder)
    path = results_log.append("demo", {"scenario": "a", "rate": 1.5})
    assert path == folder / "demo.jsonl"
    results_log.append("demo", {"scenario": "b"}, {"scenario": "c", "nested": {"x": [1]}})
    with results_log.appending("demo") as out:
        out.write(json.dumps({"scenario": "d"}) + "\n")
    lines = path.read_text().splitlines()
    assert [json.loads(line)["scenario"] for line in lines] == ["a", "b", "c", "d"]
    assert json.loads(lines[2])["nested"] == {"x": [1]}
