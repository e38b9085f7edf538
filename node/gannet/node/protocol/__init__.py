"""What every layer of Gannet speaks: the wire protocols and the security shared by both ends.

The bottom of the import layers (``.importlinter``): it imports nothing else of Gannet, and the
broker's front door (:mod:`gannet.node.api`), the replication layer, the CLI and the operator
import from it.

* :mod:`gen` — the generated code of ``gannet.admin.v1`` (the admin API) and ``gannet.raft.v1``
  (the Raft peer API), from ``protos/``; :mod:`generating` regenerates it (a test checks it is
  current). The ``apache.rocketmq.v2`` stubs come from the pinned ``rocketmq-python-client``.
* :mod:`statuses` — v2 ``Code`` values and :class:`~statuses.ApiError`, the one refusal type;
* :mod:`tls` — TLS credentials from PEM files, with rotation, for client and peer ports;
* :mod:`signing`, :mod:`grants`, :mod:`credentials`, :mod:`auth` — ``MQv2-HMAC-SHA1`` request
  signatures (checked by the broker, made by Gannet's own clients), rights, credentials files,
  and the client channel of Gannet's own clients (CLI, operator).
"""
