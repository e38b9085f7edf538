"""Keep gRPC C-core's own log lines off the ``gannet`` command's stderr unless asked for.

gRPC's C core logs through absl straight to file descriptor 2: a malformed target prints
``E0000 ... dns_resolver_ares.cc`` lines, a port in use or a TLS handshake with a plaintext
peer prints ``ssl_transport_security.cc`` and ``WARNING: All log messages before
absl::InitializeLog() ...`` before Gannet's own one-line message. The core reads
``GRPC_VERBOSITY`` once, when the ``grpc`` package loads, so :func:`quiet_unless_asked` must
run before anything imports ``grpc``: :mod:`gannet.node.cli` imports this module first, and
in the ``gannet`` command's own process (``gannet``, ``gannet-node``, ``python -m
gannet.node[.cli]``; not in a program or test that merely imports the CLI) the import sets
``GRPC_VERBOSITY=NONE`` unless the user set ``GRPC_VERBOSITY`` themselves or passed
``-v/--verbose`` (then gRPC's default, errors, applies). Child processes (``cluster up``'s
brokers) inherit the setting.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

VERBOSE_FLAGS = frozenset({"-v", "--verbose"})
COMMAND_PATHS = ("gannet", "gannet-node", "gannet/node/cli/__main__.py", "gannet/node/__main__.py")
"""How ``sys.argv[0]`` ends in the gannet command's process."""


def quiet_unless_asked(argv: Sequence[str]) -> None:
    """Set ``GRPC_VERBOSITY=NONE`` unless it is set or ``argv`` asks for verbose output."""
    if "GRPC_VERBOSITY" in os.environ or VERBOSE_FLAGS.intersection(argv):
        return
    os.environ["GRPC_VERBOSITY"] = "NONE"


def is_gannet_command(argv0: str) -> bool:
    return argv0.replace("\\", "/").endswith(COMMAND_PATHS)


if sys.argv and is_gannet_command(sys.argv[0]):
    quiet_unless_asked(sys.argv[1:])
