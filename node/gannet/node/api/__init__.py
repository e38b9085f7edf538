"""The broker's gRPC front door: ``apache.rocketmq.v2.MessagingService`` and ``gannet.admin.v1``.

Modules, one concept each:

* :mod:`statuses` — v2 ``Code`` values, :class:`statuses.ApiError` and store-error mapping;
* :mod:`sending` — SendMessage validation and conversion into store records;
* :mod:`routes` — QueryRoute / QueryAssignment answers built from topic configs;
* :mod:`client_settings` — Telemetry settings replies and the registry of connected clients;
* :mod:`messaging` — the ``MessagingService`` servicer (grpc.aio);
* :mod:`admin` — the ``gannet.admin.v1.Admin`` servicer; :mod:`admin_client` its sync client;
* :mod:`generating` — regenerates ``gen/`` from ``protos/`` (a test checks it is current);
* :mod:`commands` — the ``gannet topic|group|message|status`` CLI built on the admin API.

Called by :mod:`gannet.node.broker` (which owns the server and the store) and by the CLI.
"""
