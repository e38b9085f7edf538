"""Gannet's Kubernetes operator (kopf): GannetCluster, Topic and ConsumerGroup resources.

Entry point ``gannet operator run`` (:mod:`gannet.node.cli.kube_operator` → :mod:`running`). Pure
planning lives in :mod:`specs`, :mod:`topic_planning`, :mod:`consumer_group_planning`,
:mod:`claims`, :mod:`cluster_planning`, :mod:`schedules`, :mod:`manifests` and :mod:`conditions`;
IO lives in :mod:`brokers` (admin gRPC API), :mod:`kube` (Kubernetes API) and :mod:`metrics`
(/metrics, /healthz); :mod:`handlers` and :mod:`cluster_handling` glue them to kopf.
docs/operator.md describes the resources and the reconcile rules.
"""
