"""The replication driver: runs one node's pure Raft core (``gannet.node.raft``) for real.

``driver.ReplicationNode`` owns a :class:`~gannet.node.raft.core.RaftCore` and supplies what the
core may not touch: the clock (ticks from the event loop), the disk (the commit log through the
store's replication hooks, ``state_files`` for term/vote and the leader-epoch file), the network
(``transport``: the ``gannet.raft.v1.Peer`` gRPC service, one stream per ordered pair of nodes)
and seeded randomness. The broker (``gannet.node.broker.serving``) starts one when its config
has a ``replication`` section. Modules: ``config`` (peers, limits), ``state_files``,
``peer_wire`` (core messages <-> protobuf), ``transport``, ``noop`` (the leader's election
record), ``driver`` (the IO), ``driver_state`` (its pure bookkeeping), ``log_io`` (log edits),
``durability`` (fsync reports), ``errors``, ``commands`` (``gannet cluster up``).
"""
