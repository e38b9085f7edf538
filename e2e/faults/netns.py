"""Network namespaces on a bridge, and iptables rules inside them (root only).

:class:`Namespaces` makes ``ctl`` (a bridge, address ``<net>.254``) and one namespace per
member (``<net>.<i>``, a veth on the bridge) under names unique to the run, and deletes them
(their veths and bridge go with them). Everything lives in 10.213.0.0/16 inside those namespaces,
so nothing reaches the host's network. The measuring process runs inside ``ctl``
(:meth:`Namespaces.exec_argv`); a member's process runs inside its own namespace.

:func:`drop_between` and friends add or delete iptables rules in a member's namespace: rules on
INPUT and OUTPUT of its ``filter`` table, matched on the other side's address. ``iptables -F``
(:func:`flush`) heals every rule of a namespace at once.

Used by :mod:`e2e.faults.runner` (``make e2e-faults``) and :mod:`e2e.replication.silent_link`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

SUBNET_PREFIX = "10.213"
CTL_HOST = 254
COMMAND_TIMEOUT_S = 30
INNER_STOP_TIMEOUT_S = 20.0


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)


class Namespaces:
    """``ctl`` with a bridge, one namespace per member with one veth each; unique names."""

    def __init__(self, size: int, prefix: str = "gsl") -> None:
        self.tag = secrets.token_hex(2)
        self.third_octet = int(self.tag[:2], 16)
        self.prefix = f"{prefix}{self.tag}"
        self.ctl = f"{self.prefix}c"
        self.nodes = [f"{self.prefix}n{i}" for i in range(1, size + 1)]
        self.made: list[str] = []

    @property
    def net(self) -> str:
        return f"{SUBNET_PREFIX}.{self.third_octet}"

    def address(self, node_index: int) -> str:
        return f"{self.net}.{node_index}"

    @property
    def ctl_address(self) -> str:
        return f"{self.net}.{CTL_HOST}"

    def create(self) -> None:
        for ns in [self.ctl, *self.nodes]:
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        bridge = f"{self.prefix}br"
        run("ip", "-n", self.ctl, "link", "add", bridge, "type", "bridge")
        run("ip", "-n", self.ctl, "addr", "add", f"{self.ctl_address}/24", "dev", bridge)
        run("ip", "-n", self.ctl, "link", "set", bridge, "up")
        for i, ns in enumerate(self.nodes, start=1):
            outside, inside = f"{self.prefix}h{i}", f"{self.prefix}v{i}"
            run("ip", "-n", self.ctl, "link", "add", outside, "type", "veth", "peer", inside,
                "netns", ns)  # fmt: skip
            run("ip", "-n", self.ctl, "link", "set", outside, "master", bridge, "up")
            run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inside)
            run("ip", "-n", ns, "link", "set", inside, "up")

    def delete(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "delete", ns], check=False, capture_output=True)
        self.made = []

    def exec_argv(self, ns: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]


def _rules(ns: str, flag: str, other: str, extra: tuple[str, ...]) -> None:
    run("ip", "netns", "exec", ns, "iptables", flag, "INPUT", "-s", other, *extra, "-j", "DROP")
    run("ip", "netns", "exec", ns, "iptables", flag, "OUTPUT", "-d", other, *extra, "-j", "DROP")


def drop_between(ns: str, other: str) -> None:
    """Drop every packet between namespace ``ns`` and address ``other``, both ways."""
    _rules(ns, "-A", other, ())


def undrop_between(ns: str, other: str) -> None:
    _rules(ns, "-D", other, ())


def drop_incoming_at_random(ns: str, other: str, probability: float) -> None:
    """Drop each packet from ``other`` into ``ns`` with ``probability``
    (``-m statistic --mode random``)."""
    run("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-s", other,
        "-m", "statistic", "--mode", "random", "--probability", f"{probability:.3f}",
        "-j", "DROP")  # fmt: skip


def sysctl_setting(text: str) -> str:
    """``text`` if it is ``NAME=VALUE`` with a network sysctl name (``net.``), else ValueError."""
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("net.") or not value:
        raise ValueError(f"not a network sysctl NAME=VALUE (net.ipv4.x=1): {text!r}")
    return text


def set_sysctl(ns: str, setting: str) -> None:
    """Set ``setting`` (:func:`sysctl_setting`, e.g. ``net.ipv4.tcp_rto_max_ms=1000``) in
    ``ns`` only; a name this kernel lacks or does not keep per namespace fails here, with
    sysctl's words."""
    argv = ("ip", "netns", "exec", ns, "sysctl", "-q", "-w", sysctl_setting(setting))
    done = subprocess.run(argv, check=False, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{setting} in {ns}: {done.stderr.strip() or done.returncode}")


def flush(ns: str) -> None:
    """Remove every rule of ``ns``'s filter table."""
    run("ip", "netns", "exec", ns, "iptables", "-F")


def available() -> str | None:
    """Why namespaces and iptables cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, iptables)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"no {tool} command"
    return None


@contextlib.contextmanager
def inner_process(
    spaces: Namespaces, module: str, spec: dict[str, object], log: IO[bytes] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m <module> --inner <spec as JSON>`` inside ``spaces.ctl``, in a session of its
    own; on leaving, that session is stopped (SIGTERM, then SIGKILL after
    ``INNER_STOP_TIMEOUT_S``: brokers it started and left behind go with it)."""
    argv = spaces.exec_argv(spaces.ctl, [sys.executable, "-m", module, "--inner", json.dumps(spec)])
    process = subprocess.Popen(argv, start_new_session=True, stdout=log, stderr=log)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(INNER_STOP_TIMEOUT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
