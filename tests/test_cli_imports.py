"""The ``gannet`` command loads only what the invoked command needs.

Scripts and ``make test`` run ``gannet`` hundreds of times; importing the whole broker for
``gannet topic list`` or ``--help`` cost seconds under load. Each check runs in a fresh
interpreter (``sys.modules`` of this one already holds everything) and reads which modules got
imported: no timing, nothing to wait for.
"""

from __future__ import annotations

import json
import subprocess
import sys

LAZY_MODULES = (
    "gannet.node.broker.serving",
    "gannet.node.cli.broker_options",
    "gannet.node.store.message_store",
    "gannet.node.store.querying",
    "gannet.node.api",
    "boto3",
    "rocketmq",
    "gannet.node.protocol.signing",
)
"""Loaded only by the commands that run a broker, open a store or a bucket, or call a broker
(request signing and the RocketMQ protocol package)."""

HELP_ARGS = (
    ["--help"],
    ["topic", "--help"],
    ["topic", "list", "--help"],
    ["broker", "run", "--help"],
    ["store", "get", "--help"],
    ["cluster", "--help"],
)

_PROBE = """
import importlib.util, json, sys
from click.testing import CliRunner
lazy, help_args = json.loads(sys.argv[1])
missing = [m for m in lazy if importlib.util.find_spec(m) is None]
import gannet.node.cli.root as root
seen = {"import": [m for m in lazy if m in sys.modules]}
for args in help_args:
    result = CliRunner().invoke(root.main, args)
    assert result.exit_code == 0, (args, result.output)
    seen[" ".join(args)] = [m for m in lazy if m in sys.modules]
import gannet.node.cli.broker_options
control = "gannet.node.broker.serving" in sys.modules
print(json.dumps({"missing": missing, "seen": seen, "control": control}))
"""


def test_cli_and_help_load_no_broker_or_store_engine() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps([LAZY_MODULES, HELP_ARGS])],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["missing"] == [], "a lazy module was renamed: the guard would check nothing"
    assert found["control"], "importing broker_options must load the broker (the probe works)"
    assert found["seen"] == {"import": [], **{" ".join(a): [] for a in HELP_ARGS}}
