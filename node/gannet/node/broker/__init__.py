"""The broker process: one store served over gRPC on the client port.

* :mod:`serving` — :class:`serving.Broker`: open the store, serve ``MessagingService`` and
  ``gannet.admin.v1.Admin`` with grpc.aio, stop gracefully (drain, flush, checkpoint);
* :mod:`threads` — run a broker on its own event-loop thread (tests, embedding).

Called by ``gannet broker run`` (:mod:`gannet.node.cli`) and the tests.
"""
