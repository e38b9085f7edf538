"""The pure Raft core of a Gannet replication group.

The commit log *is* the Raft log (``docs/design.md`` §3): a log position is a commit-log
byte offset, terms are kept as a leader-epoch list of ``(term, start_offset)``, and the core
never holds message bytes for longer than one ``Ready``. The core is a deterministic state
machine in the style of etcd-io/raft: the driver (``gannet.node.replication``) feeds it
messages (``step``), time (``tick``), proposals (``propose``) and disk acknowledgements
(``report_durable``), and executes what ``ready()`` returns before calling ``advance``.

Nothing in this package performs IO, reads a clock or draws random numbers: those come from
the driver (``tests/raft/test_purity.py`` enforces the import ban). That is what lets
``tests/raft`` run transcripts and whole-cluster simulations deterministically.

Modules: ``messages`` (wire messages and id types), ``config`` (limits, restart state),
``epochs`` (the log model),
``progress`` (per-follower replication state), ``quorum`` (majority arithmetic), ``ready``
(the output contract), ``core`` (``RaftCore``: inputs, output, dispatch), ``node_state`` (the
state and its invariants), ``election``, ``appending`` (appends, commit, transfer),
``leases`` (check-quorum, leader stickiness); the crash-on-bug helper is ``gannet.node.invariants``.
"""
