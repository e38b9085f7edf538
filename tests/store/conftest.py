"""Store test fixtures: ``put_path`` runs a test on the native batch encoder and on the Python
path (:mod:`gannet.node.store.log.native`).

Modules that exercise the put path (records, commit log, index, queue numbering) use it for
every test (``pytestmark = pytest.mark.usefixtures("put_path")``); the rest of the suite runs on
the default path (native when built). ``GANNET_NATIVE=0`` runs everything on the Python path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gannet.node.store.log import native


@pytest.fixture(params=["native", "python"])
def put_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Switch the store's put path for one test; the native variant is skipped when the
    extension is not built (``make install`` builds it)."""
    module, _ = native.load() if request.param == "native" else (None, "")
    if request.param == "native" and module is None:
        reason = f"native encoder not in use: {native.load()[1]}"
        if os.environ.get("CI") == "true" and os.environ.get("GANNET_NATIVE") != "0":
            pytest.fail(f"{reason} (CI builds it with make install; a skip would hide that)")
        pytest.skip(reason)
    saved = native.codec
    native.codec = module
    try:
        yield str(request.param)
    finally:
        native.codec = saved
