"""Pods across kind nodes without kindnetd: the bridge CNI per node plus host-gw routes.

The node image carries a static bridge CNI config for ``10.244.0.0/24`` (``files/``), enough for
one node. With several (``files/cluster-3.yaml``), every worker joins with the taint
:data:`TAINT` so that no pod lands on it before :func:`connect`:

1. reads every node's ``spec.podCIDR`` (kube-controller-manager allocates one /24 per node out
   of kind's ``10.244.0.0/16``) and InternalIP;
2. writes each worker's ``/etc/cni/net.d/10-bridge.conflist`` with its own podCIDR (containerd
   reloads the directory); the control plane keeps the image's, which must be its podCIDR;
3. adds on every node a route to every other node's podCIDR via that node's address (host-gw:
   the nodes share the kind Docker network);
4. removes the taint.
The bridge's ipMasq masquerades traffic leaving a node's podCIDR, so peers see node addresses
as sources; nothing here relies on pod source addresses (no NetworkPolicy is enforced).
"""

from __future__ import annotations

import json
from typing import Any

from e2e.kind import engine, tools
from e2e.kube.harness import Kubectl

TAINT = "gannet.io/pod-network"
IMAGE_SUBNET = "10.244.0.0/24"
CONFIG = tools.FILES / "10-bridge.conflist"


def _nodes(kubectl: Kubectl) -> list[dict[str, Any]]:
    return list(kubectl.json("get", "nodes")["items"])


def _address(node: dict[str, Any]) -> str:
    for address in node["status"]["addresses"]:
        if address["type"] == "InternalIP":
            return str(address["address"])
    raise AssertionError(f"node {node['metadata']['name']} has no InternalIP")


def _config(subnet: str) -> str:
    config = json.loads(CONFIG.read_text())
    config["plugins"][0]["ipam"]["ranges"] = [[{"subnet": subnet}]]
    return json.dumps(config, indent=2) + "\n"


def connect(kubectl: Kubectl) -> dict[str, str]:
    """Give every node its pod network (module docstring); returns node name -> podCIDR."""
    nodes = _nodes(kubectl)
    cidrs = {n["metadata"]["name"]: str(n["spec"].get("podCIDR") or "") for n in nodes}
    missing = [name for name, cidr in cidrs.items() if not cidr]
    assert not missing, f"nodes without a podCIDR (is --allocate-node-cidrs on?): {missing}"
    addresses = {n["metadata"]["name"]: _address(n) for n in nodes}
    for node in nodes:
        name = node["metadata"]["name"]
        tainted = any(t["key"] == TAINT for t in node["spec"].get("taints") or ())
        if not tainted:
            assert cidrs[name] == IMAGE_SUBNET, (
                f"{name} runs pods on the image's {IMAGE_SUBNET} but owns {cidrs[name]}"
            )
            continue
        engine.docker(
            "exec", "-i", name, "sh", "-c", "cat > /etc/cni/net.d/10-bridge.conflist",
            input=_config(cidrs[name]),
        )  # fmt: skip
    for name in cidrs:
        for other, cidr in cidrs.items():
            if other != name:
                engine.docker("exec", name, "ip", "route", "replace", cidr, "via", addresses[other])
    for node in nodes:
        if any(t["key"] == TAINT for t in node["spec"].get("taints") or ()):
            kubectl.run("taint", "nodes", node["metadata"]["name"], f"{TAINT}-")
    return cidrs
