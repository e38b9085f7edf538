"""The installed Gannet's version, as the broker reports it: in the admin API's broker info and
in the ``gannet_broker_info`` metric. Read from the package metadata; ``unknown`` when Gannet runs
from a tree that was not installed.

Called by :mod:`gannet.node.api.admin` and :mod:`gannet.node.metrics.broker_metrics`.
"""

from __future__ import annotations

from importlib import metadata


def gannet_version() -> str:
    """The version of the installed ``gannet`` distribution, or ``unknown``."""
    try:
        return metadata.version("gannet")
    except metadata.PackageNotFoundError:
        return "unknown"
