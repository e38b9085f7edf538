"""``gannet.pipeline.register``: on a local master the data source runs under the interpreter
that registered it (Spark would otherwise start ``python3`` from PATH, which need not have
Gannet: ``ModuleNotFoundError: No module named 'gannet'`` in every worker). The end-to-end
check is the Spark block of docs/pipeline.md in ``tests/test_readme.py``."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import pytest

import gannet.pipeline


@dataclass
class FakeContext:
    master: str
    pythonExec: str = "python3"  # noqa: N815 — pyspark's attribute name


@dataclass
class FakeSession:
    sparkContext: FakeContext  # noqa: N815 — pyspark's attribute name
    seen: list[str] = field(default_factory=list)

    @property
    def dataSource(self) -> FakeSession:
        return self

    def register(self, source: type) -> None:
        assert source.name() == "gannet"  # type: ignore[attr-defined]
        self.seen.append(self.sparkContext.pythonExec)


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]"])
def test_local_master_registers_with_this_interpreter(
    master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session = FakeSession(FakeContext(master))
    gannet.pipeline.register(session)
    assert session.seen == [sys.executable]
    assert session.sparkContext.pythonExec == "python3", "the session's default must stay"


def test_pyspark_python_and_cluster_masters_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    session = FakeSession(FakeContext("local[*]", "/opt/python/bin/python3"))
    gannet.pipeline.register(session)
    assert session.seen == ["/opt/python/bin/python3"]
    monkeypatch.delenv("PYSPARK_PYTHON")
    remote = FakeSession(FakeContext("spark://host:7077"))
    gannet.pipeline.register(remote)
    assert remote.seen == ["python3"]


def test_worker_python_rule() -> None:
    assert gannet.pipeline.worker_python("local[4]", None) == sys.executable
    assert gannet.pipeline.worker_python("local[4]", "python3.12") is None
    assert gannet.pipeline.worker_python("yarn", None) is None
    assert gannet.pipeline.worker_python("localhost", None) is None
