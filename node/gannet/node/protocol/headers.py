"""The v2 call metadata Gannet reads by name: the client id header (``x-mq-client-id``) that
every official client sends, and :func:`client_id_of`, which reads it from a call.

Called by the v2 servicers (:mod:`gannet.node.api.messaging`, :mod:`gannet.node.api.receiving`),
the broker's wire rules (:mod:`gannet.node.broker.serving`) and the CLI, which sends it.
"""

from __future__ import annotations

import grpc.aio

CLIENT_ID_HEADER = "x-mq-client-id"


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    """The call's client id; "" when it has none."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return str(value)
    return ""
