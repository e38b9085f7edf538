"""The broker's domain calls that every protocol layer shares (``docs/architecture.md``).

:mod:`committing` holds the one rule for when a write may be answered. The protocol layers
(:mod:`gannet.node.api` for gRPC v2, :mod:`gannet.node.remoting` for the RocketMQ TCP protocol)
call these and translate their domain errors into their own statuses; nothing here knows a
protocol.
"""
