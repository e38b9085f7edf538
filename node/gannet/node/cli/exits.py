"""Exit codes of the ``gannet`` command, one table for every subcommand, and :func:`fail`.

Scripts can rely on them (also in ``gannet --help`` and docs/cli.md): 0 success; 1 the check
failed or nothing was found; 2 wrong usage (click: unknown option, bad value, malformed endpoint
or message id; ``cluster status``: the members do not agree on one leader); 3 the store could
not be opened; 4 the broker (or a tiered store's bucket) could not be reached; 5 the broker (or
the bucket) refused the request.

Used by every command module of :mod:`gannet.node.cli`.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from gannet.node.cli.output import err_console

EXIT_CHECK_FAILED = 1
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_NO_AGREED_LEADER = 2
EXIT_STORE_UNAVAILABLE = 3
EXIT_UNREACHABLE = 4
EXIT_REFUSED = 5

EXIT_CODES = (
    (0, "success"),
    (1, "check failed or nothing found"),
    (2, "wrong usage: unknown option, bad value, malformed endpoint or message id"),
    (3, "store unavailable: not a store directory, held by a running broker, unreadable"),
    (4, "broker unreachable (or a tiered store's bucket)"),
    (
        5,
        "broker refused the request: bad or reserved name, exists, not allowed; or the tier "
        "bucket refused the credentials or the request",
    ),
)
EXIT_CODES_HELP = "\b\nExit codes:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES)


def fail(message: str, code: int) -> NoReturn:
    """Print ``message`` (rich markup; escape values) on one stderr line and exit ``code``."""
    err_console.print(message, highlight=False)
    sys.exit(code)
