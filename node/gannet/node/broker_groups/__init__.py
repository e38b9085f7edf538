"""Broker groups of a cluster, the domain part: the views one member keeps of the other
groups (:mod:`views`) and the poller that keeps them fresh (:mod:`polling`).

Used by the v2 protocol layer (:mod:`gannet.node.api.broker_groups`,
:mod:`gannet.node.api.cluster_admin`) and wired by :mod:`gannet.node.broker.serving` and
:mod:`gannet.node.cli`; ``docs/architecture.md`` places it between them and
:mod:`gannet.node.domain`.
"""
