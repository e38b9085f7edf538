"""Fixtures of the Pop tests; the harness itself is in :mod:`tests.pop.pop_harness`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.pop.config import PopConfig
from tests.pop.pop_harness import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "store", PopConfig())
    h.setup()
    yield h
    h.close()
