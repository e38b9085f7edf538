"""Transactional messages, the domain part: the book of open half messages (:mod:`book`) and
the records a transaction writes to the commit log (:mod:`records`).

Called by the protocol layers (:mod:`gannet.node.api.transactions` for gRPC v2,
:mod:`gannet.node.remoting.transactions`) and wired by :mod:`gannet.node.broker.serving`;
``docs/architecture.md`` places it between them and :mod:`gannet.node.domain`.
"""
