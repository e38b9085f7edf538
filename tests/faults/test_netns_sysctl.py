"""What ``--sysctl`` accepts (:func:`e2e.faults.netns.sysctl_setting`, pure)."""

from __future__ import annotations

import pytest

from e2e.faults import netns


def test_a_network_sysctl_is_taken_as_given() -> None:
    assert netns.sysctl_setting("net.ipv4.tcp_rto_max_ms=1000") == "net.ipv4.tcp_rto_max_ms=1000"


@pytest.mark.parametrize("text", ["net.ipv4.tcp_rto_max_ms", "kernel.pid_max=9", "net.x=", "=1"])
def test_anything_else_is_refused_with_the_form_expected(text: str) -> None:
    with pytest.raises(ValueError, match="not a network sysctl NAME=VALUE"):
        netns.sysctl_setting(text)
