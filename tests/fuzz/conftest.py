"""Shared settings of the fuzz suite: bounded, reproducible, seed printed.

Every fuzz test is decorated with :data:`FUZZ` (a fixed number of examples, no deadline, no
example database) and :data:`SEEDED` (a fixed seed, ``GANNET_FUZZ_SEED`` to change it). The
whole folder runs in well under 60 s on CI; ``GANNET_FUZZ_EXAMPLES`` scales the example counts
for a longer local run, e.g. ``GANNET_FUZZ_EXAMPLES=20`` for twenty times as many.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, seed, settings

FUZZ_SEED = int(os.environ.get("GANNET_FUZZ_SEED", "20261122"))
SCALE = max(1, int(os.environ.get("GANNET_FUZZ_EXAMPLES", "1")))


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )


SEEDED = seed(FUZZ_SEED)


@pytest.fixture(autouse=True)
def _print_seed() -> None:
    print(f"fuzz seed {FUZZ_SEED} (GANNET_FUZZ_SEED), scale {SCALE} (GANNET_FUZZ_EXAMPLES)")
