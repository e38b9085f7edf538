"""``/readyz`` through a broker's life: 503 while the store recovers, 200 while serving, 503
while stopping, and the endpoint gone once stopped. Recovery and close are held on events, so
each phase is observed without sleeping."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import Broker
from gannet.node.metrics import http_serving

from .conftest import broker_config, http_get, metrics_port, samples, scrape, value

HOLD_S = 30.0


class _Gate:
    """Wraps a blocking call: :attr:`entered` is set when it starts; it proceeds on release."""

    def __init__(self, call) -> None:
        self._call = call
        self.entered = threading.Event()
        self._released = threading.Event()

    def __call__(self, *args, **kwargs):
        self.entered.set()
        assert self._released.wait(HOLD_S)
        return self._call(*args, **kwargs)

    def release(self) -> None:
        self._released.set()


def test_readyz_follows_the_broker_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    broker = Broker(broker_config(tmp_path))
    opening = _Gate(broker.store.open)
    closing = _Gate(broker.store.close)
    monkeypatch.setattr(broker.store, "open", opening)
    monkeypatch.setattr(broker.store, "close", closing)
    running = threads.BrokerThread(broker)
    starter = threading.Thread(target=running.begin)
    starter.start()
    try:
        assert opening.entered.wait(HOLD_S)
        port = metrics_port(running)
        assert http_get(port, "/readyz") == (503, "not ready: store recovering\n")
        assert http_get(port, "/healthz") == (200, "ok\n")
        text = scrape(port)
        assert value(text, "gannet_store_open") == 0
        assert value(text, "gannet_broker_ready") == 0
        assert ("gannet_store_max_offset_bytes", frozenset()) not in samples(text)
    finally:
        opening.release()
        starter.join()
    assert http_get(port, "/readyz") == (200, "ready\n")

    stopper = threading.Thread(target=running.stop)
    stopper.start()
    try:
        assert closing.entered.wait(HOLD_S)
        assert http_get(port, "/readyz") == (503, "not ready: stopping\n")
        assert http_get(port, "/healthz") == (200, "ok\n")
    finally:
        closing.release()
        stopper.join()
    with pytest.raises(ConnectionRefusedError):
        http_get(port, "/readyz")


def test_a_busy_metrics_port_fails_the_start_before_the_store_opens(tmp_path: Path) -> None:
    first = threads.start(broker_config(tmp_path / "a"))
    try:
        taken = f"127.0.0.1:{metrics_port(first)}"
        config = broker_config(tmp_path / "b")
        with pytest.raises(OSError, match="cannot serve metrics on"):
            threads.start(dataclasses.replace(config, metrics_listen=taken))
        assert not (tmp_path / "b" / "abort").exists()  # the store was never opened
    finally:
        first.stop()


def test_no_metrics_listen_means_no_endpoint_and_no_metrics(tmp_path: Path) -> None:
    config = broker_config(tmp_path)
    broker = Broker(dataclasses.replace(config, metrics_listen=None))
    assert broker.metrics is None
    assert broker.metrics_server is None


@pytest.mark.parametrize("listen", ["5557", "host", ":5557", "127.0.0.1:port"])
def test_bad_metrics_listen_values_are_refused(listen: str) -> None:
    with pytest.raises(ValueError, match="not host:port"):
        http_serving.parse_listen(listen)


class _Replication:
    """Stands in for a ReplicationNode: only ``leader()`` and ``knows_removed()`` are asked."""

    def __init__(self) -> None:
        self.known_leader: object | None = None
        self.removed = False

    def leader(self) -> object | None:
        return self.known_leader

    def knows_removed(self) -> bool:
        return self.removed


def test_readyz_needs_a_known_raft_leader_when_replicating(tmp_path: Path) -> None:
    broker = Broker(broker_config(tmp_path))
    broker.phase = "serving"
    assert broker.not_ready_reason() is None  # a single node has no Raft
    replication = _Replication()
    broker.replication = replication  # type: ignore[assignment]
    reason = broker.not_ready_reason()
    assert reason is not None
    assert "no Raft leader" in reason
    replication.known_leader = "node 2"
    assert broker.not_ready_reason() is None
    replication.known_leader, replication.removed = None, True  # its leader refused it
    removed = broker.not_ready_reason()
    assert removed is not None
    assert "removed from the Raft group" in removed
