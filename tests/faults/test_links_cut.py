"""The links each partition cuts (:func:`e2e.faults.nemesis.links_cut`, pure), with and
without a member added during the run."""

from __future__ import annotations

import pytest

from e2e.faults.nemesis import links_cut

SLOTS = {1: 1, 2: 2, 3: 3}


def test_halves_puts_a_joined_member_on_the_larger_side() -> None:
    """Seed 1439: member 2 alone on one side still heard member 4, added before the cut."""
    params = {"small": [2], "client_with_small": False}
    assert links_cut("halves", params, SLOTS, [1, 2, 3], 0) == {(1, 2), (2, 3), (0, 2)}
    assert links_cut("halves", params, SLOTS, [1, 2, 3, 4], 0) == {
        (1, 2), (2, 3), (2, 4), (0, 2)
    }  # fmt: skip
    with_client = {"small": [2], "client_with_small": True}
    assert links_cut("halves", with_client, SLOTS, [1, 2, 3, 4], 0) == {
        (1, 2), (2, 3), (2, 4), (0, 1), (0, 3), (0, 4)
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["leader-peers", "follower-cut", "minority"])
def test_a_member_cut_from_its_peers_is_cut_from_a_joined_one(kind: str) -> None:
    assert links_cut(kind, {"members": [2, 1, 3]}, SLOTS, [1, 2, 3, 4], 2) == {
        (1, 2), (2, 3), (2, 4)
    }  # fmt: skip


def test_leader_isolated_also_cuts_the_client() -> None:
    assert links_cut("leader-isolated", {}, SLOTS, [1, 2, 3, 4], 3) == {
        (1, 3), (2, 3), (3, 4), (0, 3)
    }  # fmt: skip


def test_bridge_cuts_one_link_between_the_slots_holders() -> None:
    replaced = {1: 1, 2: 5, 3: 3}  # node 5 took slot 2
    assert links_cut("bridge", {"members": [1, 2, 3]}, replaced, [1, 3, 5], 1) == {(3, 5)}


def test_ring_takes_a_joined_member_after_the_slots() -> None:
    slots = {i: i for i in range(1, 6)}
    five = links_cut("ring", {"order": [1, 3, 5, 2, 4]}, slots, [1, 2, 3, 4, 5], 0)
    assert five == {(1, 2), (1, 5), (2, 3), (3, 4), (4, 5)}  # each sees its two neighbours
    six = links_cut("ring", {"order": [1, 3, 5, 2, 4]}, slots, [1, 2, 3, 4, 5, 6], 0)
    heard = {n: {m for m in range(1, 7) if m != n and (min(n, m), max(n, m)) not in six}
             for n in range(1, 7)}  # fmt: skip
    assert heard[6] == {4, 1}
    assert all(len(neighbours) == 2 for neighbours in heard.values()), heard
