"""The store host of records a remoting pull answers (:mod:`gannet.node.remoting.store_hosts`):
this member's remoting address, in place of the gRPC address the store keeps, so that the C++
client's CONSUMER_SEND_MSG_BACK (sent to a message's store host) reaches the remoting port."""

from __future__ import annotations

import pytest

from gannet.node.remoting import store_hosts
from gannet.node.store.log import records

REMOTING = ("127.0.0.1", 10911)


def record(store_host: tuple[str, int], born_host: tuple[str, int] = ("10.0.0.9", 4711)) -> bytes:
    message = records.Message(
        topic="T",
        body=b"body",
        queue_id=3,
        queue_offset=7,
        physical_offset=1234,
        properties={"KEYS": "k"},
        born_host=born_host,
        store_host=store_host,
        store_timestamp_ms=1_700_000_000_123,
        reconsume_times=2,
    )
    return bytes(records.encode(message, body_size_max_bytes=1 << 20))


@pytest.mark.parametrize("born", [("10.0.0.9", 4711), ("fd00::9", 4711)])
def test_an_ipv4_store_host_becomes_the_remoting_address_and_nothing_else_changes(
    born: tuple[str, int],
) -> None:
    stored = record(("192.168.1.5", 8081), born)
    served = store_hosts.with_store_host(stored, store_hosts.encoded_host(*REMOTING))
    assert len(served) == len(stored)
    before, after = records.decode(stored), records.decode(served)
    assert after.store_host == REMOTING
    assert after.born_host == before.born_host == born
    assert (after.topic, after.body, after.queue_offset, after.physical_offset) == (
        before.topic, before.body, before.queue_offset, before.physical_offset,
    )  # fmt: skip
    assert after.properties == before.properties
    assert after.reconsume_times == before.reconsume_times == 2
    assert after.store_timestamp_ms == before.store_timestamp_ms == 1_700_000_000_123


def test_an_ipv6_store_host_becomes_an_ipv6_remoting_address() -> None:
    stored = record(("fd00::5", 8081))
    served = store_hosts.with_store_host(stored, store_hosts.encoded_host("fd00::1", 10911))
    assert records.decode(served).store_host == ("fd00::1", 10911)


def test_another_address_family_is_served_as_stored() -> None:
    stored = record(("fd00::5", 8081))
    assert store_hosts.with_store_host(stored, store_hosts.encoded_host(*REMOTING)) == stored


def test_a_record_cut_short_is_served_as_stored() -> None:
    host = store_hosts.encoded_host(*REMOTING)
    for cut in (b"", record(("192.168.1.5", 8081))[:60]):
        assert store_hosts.with_store_host(cut, host) == cut


def test_a_pull_body_names_the_host_in_every_record() -> None:
    stored = [record(("192.168.1.5", 8081)), record(("192.168.1.6", 8082))]
    body = store_hosts.served(stored, store_hosts.encoded_host(*REMOTING))
    first = records.decode(body[: len(stored[0])])
    second = records.decode(body[len(stored[0]) :])
    assert first.store_host == second.store_host == REMOTING


@pytest.mark.parametrize(("host", "port"), [("broker-0.gannet", 10911), ("127.0.0.1", 70000)])
def test_a_name_or_a_bad_port_is_no_store_host(host: str, port: int) -> None:
    with pytest.raises(ValueError, match=r"does not appear|outside"):
        store_hosts.encoded_host(host, port)
