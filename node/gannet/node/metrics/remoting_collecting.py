"""Pop over the remoting protocol (5.x remoting clients) at scrape time.

gRPC Pop calls are counted per method by :mod:`instrumenting`
(``gannet_rpc_duration_seconds{rpc="ReceiveMessage" | "AckMessage" |
"ChangeInvisibleDuration"}``); remoting requests reach the same v2 servicer methods directly,
not through that wrapper, so they are counted here from the remoting layer's own tallies
(:class:`gannet.node.remoting.popping.RemotingPop`):

* ``gannet_remoting_pop_requests_total{request}`` — requests served, by request:
  ``pop`` (POP_MESSAGE), ``ack`` (ACK_MESSAGE), ``batch_ack`` (BATCH_ACK_MESSAGE),
  ``change_invisible_time`` (CHANGE_MESSAGE_INVISIBLETIME);
* ``gannet_remoting_pop_messages_total{result}`` — messages ``popped``, ``acked`` (by single
  and batch acks) and ``invisible_time_changed``.

Bounded: four and three label values. Registered by the broker
(:mod:`gannet.node.broker.serving`) with a callable returning the :class:`RemotingPopFigures`
of the moment, or None while the remoting port is not served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.core import Metric

from gannet.node.metrics.figures_collecting import FiguresCollector, counter_by

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RemotingPopFigures:
    requests_by_name: dict[str, int]
    popped_total: int
    acked_total: int
    changed_total: int


RemotingPopSource = Callable[[], RemotingPopFigures | None]


def families(figures: RemotingPopFigures) -> list[Metric]:
    return [
        counter_by(
            "gannet_remoting_pop_requests",
            "Pop requests served over the remoting protocol, by request.",
            "request",
            figures.requests_by_name,
        ),
        counter_by(
            "gannet_remoting_pop_messages",
            "Messages popped, acked and whose invisible time changed over the remoting protocol.",
            "result",
            {
                "popped": figures.popped_total,
                "acked": figures.acked_total,
                "invisible_time_changed": figures.changed_total,
            },
        ),
    ]


class RemotingPopCollector(FiguresCollector[RemotingPopFigures]):
    def __init__(self, source: RemotingPopSource) -> None:
        super().__init__(source, families, what="remoting Pop figures", log=log)
