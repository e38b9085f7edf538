"""Prometheus metrics and health endpoints of a broker (port 5557 by default).

* :mod:`broker_metrics` — one :class:`~broker_metrics.BrokerMetrics` per broker: its own
  registry (never the process-global one, so a test process can run several brokers), the
  hot-path counters for sends, the RPC histograms and the store/cleanup collectors.
* :mod:`tallies` — lock-free counts and histograms for the hot path (single writer: the
  event-loop thread), turned into metric families at scrape time.
* :mod:`store_collecting` — gauges read from ``MessageStore.statistics()`` at scrape time and
  the running totals of cleanup runs.
* :mod:`consumer_collecting` — lag, ready, in-flight, retries and DLQ per (topic, group),
  computed at scrape time from consumer offsets, consume queues and Pop's checkpoints.
* :mod:`pop_collecting` — Pop's buffer merge, long polls and revive queues at scrape time.
* :mod:`raft_collecting` — ``gannet_raft_*`` from a ``raft_status()`` callable.
* :mod:`instrumenting` — wraps a gRPC servicer so every RPC is timed and counted in flight.
* :mod:`labelling` — the ``broker`` label added to every sample served (the broker group).
* :mod:`http_serving` — the bounded HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``.

Wired together by :mod:`gannet.node.broker.serving`; names follow ``docs/design.md`` §5
(prefix ``gannet_``, base units, counters end in ``_total``).
"""
