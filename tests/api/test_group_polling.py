"""The broker-group poller when its seeds change while a poll round is asking them
(``broker_groups.polling``): an answer asked for under the old seeds is not taken, and a
``SetClusterSeeds`` waits for a round of the new seeds, not the one already under way."""

from __future__ import annotations

import asyncio

import pytest

from gannet.node.broker_groups.polling import GroupPoller
from gannet.node.protocol.gen import admin_pb2

OTHER = "127.0.0.1:9101"
THIRD = "127.0.0.1:9102"


class HeldAnswers:
    """``GroupPoller._ask`` answering each endpoint as its group, only once released."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.asking = asyncio.Event()
        self.release = asyncio.Event()

    async def ask(self, endpoint: str, known_version: str) -> admin_pb2.BrokerGroup:
        self.asked.append(endpoint)
        self.asking.set()
        await self.release.wait()
        name = {OTHER: "broker-1", THIRD: "broker-2"}[endpoint]
        return admin_pb2.BrokerGroup(
            broker_name=name, member_endpoints=[endpoint], leader_endpoint=endpoint
        )


def _poller(monkeypatch: pytest.MonkeyPatch, seeds: list[str]) -> tuple[GroupPoller, HeldAnswers]:
    poller = GroupPoller("broker-0", seeds)
    answers = HeldAnswers()
    monkeypatch.setattr(poller, "_ask", answers.ask)
    monkeypatch.setattr(poller, "start", lambda: None)  # the test runs every round itself
    return poller, answers


async def _seeds_changed_mid_round(
    poller: GroupPoller, answers: HeldAnswers, seeds: list[str]
) -> asyncio.Task[None]:
    """A round started, its first question held while ``seeds`` replace the seeds, then
    answered; the waiter for the new seeds' round is returned (started before the answer)."""
    answers.release.clear()
    answers.asking.clear()
    round_ = asyncio.create_task(poller.poll_once())
    await answers.asking.wait()
    poller.set_seeds(seeds)
    waiting = asyncio.create_task(poller.wait_round_of_current_seeds())
    answers.release.set()
    await round_
    await asyncio.sleep(0)
    return waiting


def test_a_group_dropped_from_the_seeds_mid_round_is_not_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def run() -> None:
        poller, answers = _poller(monkeypatch, [OTHER])
        answers.release.set()
        await poller.poll_once()
        assert set(poller.views) == {"broker-1"}
        waiting = await _seeds_changed_mid_round(poller, answers, [])  # the group was drained
        assert poller.views == {}, "the answer of a dropped group came back into the view"
        waiting.cancel()
        await poller.stop()

    asyncio.run(run())


def test_an_unowned_seed_dropped_mid_round_is_neither_learned_nor_blamed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def run() -> None:
        poller, answers = _poller(monkeypatch, [OTHER])
        waiting = await _seeds_changed_mid_round(poller, answers, [THIRD])
        assert "broker-1" not in poller.views
        assert poller.unowned_seeds() == {THIRD: ""}  # not asked yet, and OTHER blamed for nothing
        waiting.cancel()
        await poller.stop()

    asyncio.run(run())


def test_waiting_for_the_new_seeds_does_not_count_the_round_under_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def run() -> None:
        poller, answers = _poller(monkeypatch, [OTHER])
        waiting = await _seeds_changed_mid_round(poller, answers, [THIRD])
        assert not waiting.done(), "a round of the old seeds answered for the new ones"
        await poller.poll_once()  # only a round of the new seeds ends the wait
        await asyncio.wait_for(waiting, 5)
        assert set(poller.views) == {"broker-2"}
        assert answers.asked == [OTHER, THIRD]
        await poller.stop()

    asyncio.run(run())
