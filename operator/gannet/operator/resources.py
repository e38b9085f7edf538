"""Names the operator and its CRDs share: API group, plurals, finalizer, labels, ports.

Imported by every operator module; the CRD YAML in ``charts/gannet/crds/`` spells the same names
(``tests/operator/test_crds.py`` checks that they agree).
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "gannet.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

CLUSTER_KIND: Final = "GannetCluster"
TOPIC_KIND: Final = "Topic"
GROUP_KIND: Final = "ConsumerGroup"
PLURALS: Final = {
    CLUSTER_KIND: "gannetclusters",
    TOPIC_KIND: "topics",
    GROUP_KIND: "consumergroups",
}

# Put on Topic and ConsumerGroup resources so that broker-side state is released on delete.
FINALIZER: Final = "gannet.io/finalizer"
# `gannet.io/managed: "false"` leaves the broker alone (no create, update or delete).
MANAGED_ANNOTATION: Final = "gannet.io/managed"
# `gannet.io/pause-reconciliation: "true"` stops changes while keeping status fresh.
PAUSE_ANNOTATION: Final = "gannet.io/pause-reconciliation"

CLIENT_PORT: Final = 8081
PEER_PORT: Final = 8091
METRICS_PORT: Final = 5557
REMOTING_PORT: Final = 10911
NAMESERVER_PORT: Final = 9876
EXTERNAL_REMOTING_PORT: Final = 10912
"""The remoting listener for clients outside (``--external-remoting-port``)."""

NAME_LABEL: Final = "app.kubernetes.io/name"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
