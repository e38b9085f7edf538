"""The broker's gRPC front door: ``apache.rocketmq.v2.MessagingService`` and ``gannet.admin.v1``.

Modules, one concept each:

* :mod:`store_statuses` — store errors answered as v2 statuses (the codes and
  :class:`~gannet.node.protocol.statuses.ApiError` are in :mod:`gannet.node.protocol`);
* :mod:`resources` — topic / group / queue names of requests, checked and looked up;
* :mod:`sending` — SendMessage validation and conversion into store records;
* :mod:`routes` — QueryRoute / QueryAssignment answers built from topic configs;
* :mod:`client_settings` — Telemetry settings replies and the registry of connected clients;
* :mod:`offsets` — GetOffset / UpdateOffset / QueryOffset;
* :mod:`messaging` — the ``MessagingService`` servicer (grpc.aio), Pop handlers pluggable
  (:mod:`plugs`: what a plugged handler sees of the servicer);
* :mod:`wire` — servicer registration that answers undecodable requests instead of crashing;
* :mod:`admin` — the ``gannet.admin.v1.Admin`` servicer, with :mod:`admin_converting` and
  :mod:`admin_querying`; its proto and generated code are in :mod:`gannet.node.protocol`.

Called by :mod:`gannet.node.broker` (which owns the server and the store) and by the CLI
(:mod:`gannet.node.cli`); imports the layers below it only (``.importlinter``).
"""
