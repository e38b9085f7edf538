"""The broker's gRPC front door: ``apache.rocketmq.v2.MessagingService`` and ``gannet.admin.v1``.

Modules, one concept each:

* :mod:`statuses` — v2 ``Code`` values, :class:`statuses.ApiError` and store-error mapping;
* :mod:`resources` — topic / group / queue names of requests, checked and looked up;
* :mod:`sending` — SendMessage validation and conversion into store records;
* :mod:`routes` — QueryRoute / QueryAssignment answers built from topic configs;
* :mod:`client_settings` — Telemetry settings replies and the registry of connected clients;
* :mod:`offsets` — GetOffset / UpdateOffset / QueryOffset;
* :mod:`messaging` — the ``MessagingService`` servicer (grpc.aio), Pop handlers pluggable;
* :mod:`wire` — servicer registration that answers undecodable requests instead of crashing;
* :mod:`admin` — the ``gannet.admin.v1.Admin`` servicer, with :mod:`admin_converting` and
  :mod:`admin_querying`; ``protos/`` holds its proto, ``gen/`` the generated code;
* :mod:`generating` — regenerates ``gen/`` from ``protos/`` (a test checks it is current);
* :mod:`commands`, :mod:`message_commands` — the ``gannet topic|group|message|status`` CLI.

Called by :mod:`gannet.node.broker` (which owns the server and the store) and by the CLI.
"""
