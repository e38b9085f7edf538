#!/usr/bin/env bash
# The operator on a real Kubernetes (kind) for machines with a Docker engine: `make e2e-kind`.
# Creates a kind cluster, builds and loads the image, installs deploy/gannet.yaml (the rendered
# chart), applies deploy/examples, waits for the cluster and the Topic to be Ready, produces and
# consumes through a port-forward with the official client, deletes the Topic and checks that
# the broker dropped it, then deletes the kind cluster (KEEP=1 keeps it).
# Needs: docker, kind, kubectl on PATH. Not run by CI here: this machine has no Docker engine.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER="${CLUSTER:-gannet-e2e}"
IMAGE="${IMAGE:-ghcr.io/gannet/gannet:0.1.0}"
PY="${PY:-.venv/bin/python}"
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: $tool is not installed" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine answers" >&2; exit 2; }

cleanup() {
  [[ -n "${FORWARD_PID:-}" ]] && kill "$FORWARD_PID" 2>/dev/null || true
  [[ "${KEEP:-0}" == 1 ]] || kind delete cluster --name "$CLUSTER"
}
trap cleanup EXIT

kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
docker build -f deploy/image/Dockerfile -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

kubectl apply -f deploy/gannet.yaml
kubectl -n gannet rollout status deployment/gannet-gannet-operator --timeout=180s
# One member: clients follow the routes a broker hands out, which name pod DNS names in a
# replicated group (unreachable from this host); a single broker names 127.0.0.1:8081, which
# the port-forward below serves. kind's local-path provisioner serves the volume.
sed 's/replicas: 3/replicas: 1/' deploy/examples/gannetcluster.yaml | kubectl apply -f -
kubectl -n gannet wait gannetcluster/main --for=condition=Ready --timeout=300s
kubectl apply -f deploy/examples/topic.yaml -f deploy/examples/consumergroup.yaml
kubectl -n gannet wait topic/orders consumergroup/billing --for=condition=Ready --timeout=120s

kubectl -n gannet port-forward service/main-client 8081:8081 >/dev/null 2>&1 &
FORWARD_PID=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/8081) 2>/dev/null && break; sleep 0.2; done
"$PY" - <<'PY'
from e2e.operator import scenario
sent, received = scenario.produce_and_consume("127.0.0.1:8081", "orders", "billing")
assert (sent, received) == (scenario.MESSAGES, scenario.MESSAGES), (sent, received)
print(f"official client: sent {sent}, received and acked {received}")
PY

kubectl -n gannet delete topic/orders --timeout=120s
"$PY" - <<'PY'
from e2e.operator import scenario
assert not scenario._exists("127.0.0.1:8081", "topic", "orders"), "topic survived its resource"
print("topic removed from the brokers")
PY
echo "e2e-kind: passed"
