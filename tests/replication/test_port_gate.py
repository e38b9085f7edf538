"""The client port gate's rule (:mod:`gannet.node.broker.port_gate`), with injected times."""

from __future__ import annotations

import pytest

from gannet.node.broker.port_gate import PortGate


def test_the_port_stays_open_while_a_leader_is_known() -> None:
    gate = PortGate(close_after_s=0.5)
    for now_s in (0.0, 10.0, 100.0):
        assert gate.open(now_s, leader_known=True)
        assert gate.closes_in_s(now_s) is None


def test_an_election_shorter_than_the_grace_keeps_it_open_a_longer_gap_closes_it() -> None:
    gate = PortGate(close_after_s=0.5)
    assert gate.open(0.0, leader_known=True)
    assert gate.open(1.0, leader_known=False)  # the leader is forgotten: the grace starts
    assert gate.closes_in_s(1.2) == pytest.approx(0.3)
    assert gate.open(1.4, leader_known=False)
    assert gate.open(1.45, leader_known=True)  # the election ended in time
    assert gate.open(2.0, leader_known=False)  # a new gap starts from here
    assert not gate.open(2.5, leader_known=False)
    assert gate.closes_in_s(3.0) == 0.0
    assert not gate.open(60.0, leader_known=False)  # closed for as long as no leader is known
    assert gate.open(60.1, leader_known=True)  # and open again at once


def test_a_starting_member_keeps_it_open_until_it_has_known_a_leader() -> None:
    gate = PortGate(close_after_s=0.5)
    assert gate.open(0.0, leader_known=False)
    assert gate.open(30.0, leader_known=False)  # the first election: nothing was lost
    assert gate.closes_in_s(30.0) is None
    assert gate.open(31.0, leader_known=True)
    assert gate.open(32.0, leader_known=False)
    assert not gate.open(32.5, leader_known=False)


def test_a_negative_grace_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        PortGate(close_after_s=-1.0)


def test_a_removed_member_closes_at_once_and_opens_once_a_leader_counts_it() -> None:
    gate = PortGate(close_after_s=0.5)
    assert gate.open(0.0, leader_known=True)
    assert not gate.open(1.0, leader_known=False, removed=True)  # no grace: no election to wait
    assert gate.closes_in_s(1.0) == 0.0
    assert not gate.open(30.0, leader_known=False, removed=True)
    assert not gate.open(30.1, leader_known=False)  # no longer removed, still no leader
    assert gate.open(30.2, leader_known=True)  # added again: its leader streams to it


def test_a_member_that_starts_removed_closes_at_once() -> None:
    gate = PortGate(close_after_s=0.5)
    assert not gate.open(0.0, leader_known=False, removed=True)


def test_a_joining_member_closes_it_until_it_knows_a_leader() -> None:
    """A member started with ``--join`` knows no leader until it has been added: it must not
    hold clients meanwhile (issue 34: a Node.js consumer behind a proxy sat on one for 75 s)."""
    gate = PortGate(close_after_s=0.5, joining=True)
    assert gate.open(0.0, leader_known=False)  # the grace of any leaderless member
    assert gate.closes_in_s(0.2) == pytest.approx(0.3)
    assert not gate.open(0.5, leader_known=False)
    assert not gate.open(75.0, leader_known=False)  # waiting to be added, catching up
    assert gate.open(75.1, leader_known=True)  # added: it follows the leader
    assert gate.open(80.0, leader_known=False)  # from then on as any member
    assert not gate.open(80.5, leader_known=False)
