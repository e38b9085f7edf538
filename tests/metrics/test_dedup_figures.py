"""The send deduplicator's figures on a live broker's ``/metrics``: retries answered with the
original receipt (``gannet_send_duplicates_dropped_total``) and index lookups
(``gannet_send_dedup_log_lookups_total``) follow the broker's counters."""

from __future__ import annotations

from gannet.node.broker import threads

from .conftest import create_topic, metrics_port, scrape, value


def test_the_duplicate_and_lookup_counters_are_exported(
    broker: threads.BrokerThread, admin
) -> None:
    messaging = broker.broker.messaging
    assert messaging is not None
    checker = messaging.dedup
    port = metrics_port(broker)
    before = scrape(port)
    assert value(before, "gannet_send_dedup_log_lookups_total") == checker.log_lookups_total
    assert value(before, "gannet_send_duplicates_dropped_total") == checker.duplicates_total
    topic = create_topic(admin)
    assert checker._in_log((topic, "NEVER-SENT")) is None  # one lookup, as a send makes it
    after = scrape(port)
    assert value(after, "gannet_send_dedup_log_lookups_total") == checker.log_lookups_total
    assert checker.log_lookups_total == value(before, "gannet_send_dedup_log_lookups_total") + 1
