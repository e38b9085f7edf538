# Gannet developer entry points. The README gives two set-up commands: `make run`, `make test`.
# Everything is installed from scratch into .venv; nothing relies on what a machine happens to have.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= $(HOME)/.gannet/store
PYTEST_ARGS ?=
# suites under tests/ with a make target of their own (a cold build of minutes)
NOT_IN_TEST = --ignore=tests/remoting/test_go_client.py
# promtool (Debian's prometheus package) checks /metrics and the alert rules in tests/metrics.
PROMTOOL := $(shell command -v promtool 2>/dev/null || echo /usr/bin/promtool)

.PHONY: run test test-random test-load test-docs-spark lint unit java bench install clean dashboards e2e e2e-failover e2e-groups e2e-prometheus bench-full bench-standard bench-debs bench-peers bench-latency bench-report bench-remoting

# _native.c: the store's native batch encoder, built by the editable install (pyproject.toml).
# Building it needs a C compiler, Python's headers and zlib's: Debian's packages when missing.
# The virtualenv is made a second time from scratch if the first try fails (ensurepip failed
# once on a busy shared machine; the retry passed).
$(STAMP): pyproject.toml node/gannet/node/store/log/_native.c
	$(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	  && [ -e /usr/include/zlib.h ] && command -v gcc >/dev/null \
	  || { $(SUDO) apt-get update -q && $(APT_INSTALL) gcc python3-dev zlib1g-dev; }
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -e '.[dev,pipeline]'
	touch $(STAMP)

install: $(STAMP)

$(PROMTOOL):
	bash deploy/prometheus/install-promtool.sh

## run: install and start a single-node broker on $(DATA_DIR) (consumer groups are created on
## first use, as in RocketMQ, so the README's consumer runs as is); gRPC clients on 8081, RocketMQ
## remoting (4.x) clients with name server 127.0.0.1:9876 (docs/remoting.md)
run: $(STAMP)
	$(BIN)/gannet broker run --data-dir $(DATA_DIR) --auto-create-groups --remoting-port 10911 --nameserver-port 9876

## test: install, lint (ruff + mypy --strict + import layers) and run the test suite
test: lint unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p gannet.node -p gannet.operator -p gannet.pipeline
	$(BIN)/mypy tests bench
	$(BIN)/lint-imports

## test-random: the suite in a shuffled order (pytest-randomly); the seed is printed at the top,
## replay an order with SEED=<seed>. Finds tests that pass only after (or before) another.
SEED ?=
test-random: $(STAMP) $(PROMTOOL) java
	$(BIN)/pytest -q -p randomly $(if $(SEED),--randomly-seed=$(SEED)) $(NOT_IN_TEST) $(PYTEST_ARGS)

## test-load: test-random with stress-ng keeping every core busy (Debian's stress-ng): a test
## that races the clock instead of awaiting an event fails here (about twice make test's time)
test-load: $(STAMP) $(PROMTOOL) java
	command -v stress-ng >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) stress-ng; }
	stress-ng --cpu $$(nproc) --timeout 3h --quiet & hog=$$!; \
	  $(BIN)/pytest -q -p randomly $(if $(SEED),--randomly-seed=$(SEED)) $(NOT_IN_TEST) $(PYTEST_ARGS); \
	  status=$$?; kill $$hog; exit $$status

# Java runs PySpark in tests/pipeline (local[2]); tests/remoting compiles the official RocketMQ
# remoting client's test program (javac) against jars Maven fetches once.
java:
	command -v java >/dev/null && command -v javac >/dev/null && command -v mvn >/dev/null || \
	  { $(SUDO) apt-get update -q && $(APT_INSTALL) openjdk-17-jdk-headless maven; }

unit: $(STAMP) $(PROMTOOL) java cpp-clients
	command -v fusermount3 >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) fuse3; }
	$(BIN)/pytest -q --durations=25 $(NOT_IN_TEST) $(PYTEST_ARGS)

## test-docs-spark: the docs pages whose blocks start Spark (docs/pipeline.md, after the README's
## quick start; about 1.5 min), which make test skips; CI runs it after make test
test-docs-spark: $(STAMP) java
	GANNET_DOCS_SPARK=1 $(BIN)/pytest -q tests/test_readme.py -k "every_block_runs and pipeline" $(PYTEST_ARGS)

# Peer benchmark (bench/peers, bench/loadgen): the bench extra, Debian's nats-server and
# redis-server, and Apache RocketMQ and Kafka jars from Maven Central (cached in bench/peers/.cache).
# `make test` needs none of this.
BENCH_STAMP := $(VENV)/.bench-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,pipeline,bench]'
	touch $(BENCH_STAMP)

bench-debs:
	command -v nats-server >/dev/null && command -v redis-server >/dev/null || \
	  { $(SUDO) apt-get update -q && $(APT_INSTALL) nats-server redis-server; }

## bench-peers: install every peer (nats-server, redis-server, JDK + Maven, RocketMQ and Kafka jars)
bench-peers: $(BENCH_STAMP) bench-debs
	command -v java >/dev/null && command -v mvn >/dev/null || \
	  { $(SUDO) apt-get update -q && $(APT_INSTALL) openjdk-17-jre-headless maven; }
	$(BIN)/python -c 'from bench.peers import rocketmq; print(rocketmq.fetch())'
	$(BIN)/python -c 'from bench.peers import kafka; print(kafka.fetch())'

## bench-remoting: remoting send, batch send and pull with the official 4.9.8 Java client, Gannet
## beside Apache RocketMQ 5.3.3 (namesrv + broker), 20,000 messages a phase, 3 alternated
## repetitions (about 7 min on a busy machine); bench/results/REMOTING.md
bench-remoting: $(BENCH_STAMP) java
	$(BIN)/python -m bench.remoting

## bench-full: every scenario S1-S9 against Gannet, RocketMQ 5, NATS JetStream, Redis Streams, Kafka, and the fixed-rate latency runs L1K, L5K (Gannet, RocketMQ, Kafka)
bench-full: bench-peers
	$(BIN)/python -m bench.loadgen.run --scenarios all --systems gannet,rocketmq,nats,redis,kafka

## bench-standard: S1-S9 of bench-full at a fifth of the messages, medians of 3, then bench-latency (about 60 min on 2 cores: 40 + 15 min of runs, plus installing and starting the peers)
# A failed throughput run (exit 1, its line holds the error) still lets the latency runs and
# the report follow; the target fails afterwards.
bench-standard: bench-peers
	$(BIN)/python -m bench.loadgen.run --scenarios $(THROUGHPUT_SCENARIOS) \
	  --systems gannet,rocketmq,nats,redis,kafka --scale 0.2 --repetitions 3 --no-report \
	  || failed=1; $(MAKE) bench-latency && exit $${failed:-0}

THROUGHPUT_SCENARIOS := S1,S2,S3,S4,S5,S6,S7,S8,S9

## bench-latency: send→receive latency at fixed 500, 1,000 and 5,000 msgs/s, open loop (L500, L1K, L5K, medians of 3) for Gannet, RocketMQ and Kafka, then REPORT.md (about 22 min on 2 cores)
bench-latency: bench-peers
	$(BIN)/python -m bench.loadgen.run --scenarios L500,L1K,L5K --systems gannet,rocketmq,kafka \
	  --repetitions 3

## bench-report: regenerate bench/results/REPORT.md and its plots from bench/results/peers.jsonl (no runs)
bench-report: $(BENCH_STAMP)
	$(BIN)/python -m bench.loadgen.report

## bench: quick benchmarks (storage engine, Pop, SQL92 filters, Spark pipeline (also from the tier's bucket), v2 broker, replication, forwarding, broker groups, consuming from the tier, remoting vs RocketMQ 5, Gannet vs Redis S1+S3); figures go to bench/results/
bench: $(STAMP) $(BENCH_STAMP) bench-debs java
	$(BIN)/python -m bench.storage --quick
	$(BIN)/python -m bench.pop --quick
	$(BIN)/python -m bench.pop_path --rounds 100
	$(BIN)/python -m bench.sqlfilter --quick
	command -v java >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) openjdk-17-jre-headless; }
	$(BIN)/python -m bench.pipeline --quick
	$(BIN)/python -m bench.pipeline_tier --quick  # Spark export from the tier's bucket (skips without make s3-tools)
	$(BIN)/python -m bench.broker --quick
	$(BIN)/python -m bench.transactions --quick
	$(BIN)/python -m bench.metrics --quick
	$(BIN)/python -m bench.replication --quick
	$(BIN)/python -m bench.forwarding --quick
	$(BIN)/python -m bench.groups --quick
	$(BIN)/python -m bench.groups --quick --per-group
	$(BIN)/python -m bench.group_metadata --quick
	$(BIN)/python -m bench.timer_open --quick
	$(BIN)/python -m bench.remoting --quick  # remoting vs Apache RocketMQ 5.3.3 (about 3 min)
	$(MAKE) s3-tools
	$(BIN)/python -m bench.tier_consume
	$(BIN)/python -m bench.loadgen.run --quick --scenarios S1,S3 --systems gannet,redis

## e2e: replication faults on a local 3-node group of broker processes under official-client load
## (SIGKILL, SIGSTOP and a proxy partition of the leader; about 1 min; not part of `make test`)
e2e: $(STAMP)
	$(BIN)/python -m e2e.replication.scenario

## e2e-failover: leader SIGKILL x10 and SIGSTOP x10 under one official Python producer: time to
## its next acknowledged send (target <= 3 s), 0 acknowledged lost, duplicates; SIGKILL x10 under
## the official Node.js and Java producers (npm and mvn fetch them once); SIGKILL x5 with a
## SimpleConsumer and with a PushConsumer consuming all along (about 20 min)
## (every run goes on after a failed one; the target fails if any did)
e2e-failover: $(STAMP)
	status=0; \
	$(BIN)/python -m e2e.replication.failover --kills 10 --mode both || status=1; \
	$(BIN)/python -m e2e.replication.failover --kills 10 --mode kill --client node || status=1; \
	$(BIN)/python -m e2e.replication.failover --kills 10 --mode kill --client java || status=1; \
	$(BIN)/python -m e2e.replication.failover --kills 5 --mode kill --consumer simple || status=1; \
	$(BIN)/python -m e2e.replication.failover --kills 5 --mode kill --consumer push || status=1; \
	exit $$status

## e2e-remoting-failover: leader SIGKILL x10 (restarted each time) under the official 4.9.8
## remoting DefaultMQProducer (its defaults; mvn fetches it once) on a 3-member group: time to its
## next acknowledged send (target <= 3 s), 0 acknowledged lost; then x10 again with a 4.9.8
## DefaultMQPushConsumer, then a DefaultLitePullConsumer, consuming all along: the longest time
## one queue went without a delivery (target <= 3 s), every message consumed, duplicates, the
## group's offsets at the end on every member (about 10 min)
.PHONY: e2e-remoting-failover
e2e-remoting-failover: $(STAMP)
	$(BIN)/python -m e2e.replication.failover --kills 10 --mode kill --client remoting
	$(BIN)/python -m e2e.replication.failover --kills 10 --mode kill --client remoting --consumer remoting-push
	$(BIN)/python -m e2e.replication.failover --kills 10 --mode kill --client remoting --consumer remoting-lite

## e2e-silent-link: root only (ip netns, iptables): 3 broker processes in network namespaces, one
## follower cut from the leader by iptables DROP for 20 s then 60 s: time until the leader's
## /metrics says it unreachable (target <= 5 s) and from the heal until it is back in step
## (target <= 3 s); every namespace and process is removed afterwards (about 1.5 min)
.PHONY: e2e-silent-link
e2e-silent-link: $(STAMP)
	command -v iptables >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) iptables; }
	$(BIN)/python -m e2e.replication.silent_link --partition-s 20 --partition-s 60

## e2e-lossy-links: root only (ip netns, iptables): 3 broker processes in network namespaces under
## official Python client sends (50/s), every peer link losing packets at random (iptables
## statistic) for 60 s: 30 % three times (no leader change, no term rise, no acknowledged send
## lost), then 20 % and 40 % once (context); leader/term time line, the longest stretch without
## an acknowledged send, reachability flaps; seed printed (about 8 min)
.PHONY: e2e-lossy-links
e2e-lossy-links: $(STAMP)
	command -v iptables >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) iptables; }
	$(BIN)/python -m e2e.replication.lossy_links

## e2e-partition-clients: root only (ip netns, iptables): the official Python, Java and Node.js
## producers with their channel on a member cut off from the majority (leader cut from its
## followers, follower cut from its peers, bridge), 15 s each: the longest time without a
## successful send (target <= 3 s). Node.js three ways: behind a proxy that skips refusing
## members, dialing one DNS name of every member (node-dns), behind a kube-proxy-like Service
## (node-service); every namespace and process is removed afterwards (1-1.5 min per client)
.PHONY: e2e-partition-clients
e2e-partition-clients: $(STAMP)
	command -v iptables >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) iptables; }
	$(BIN)/python -m e2e.replication.partition_clients --client python --client java \
	  --client node --client node-dns --client node-service

## e2e-blackholed-clients: root only: the same clients with their channel on a member cut off
## from its peers *and* from the client (packets dropped, nothing refused): measured, not judged
## (the official clients have no keepalive; python-keepalive adds one to the Python client's
## channels: docs/architecture.md, "A blackholed channel")
.PHONY: e2e-blackholed-clients
e2e-blackholed-clients: $(STAMP)
	command -v iptables >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) iptables; }
	$(BIN)/python -m e2e.replication.partition_clients --scenario blackholed \
	  --scenario blackholed-follower --client python --client python-keepalive --client java \
	  --client node --client node-dns

## e2e-faults: root only (ip netns, iptables): RUNS (default 100) seeded runs of DURATION_S
## (default 60) s each: 3 broker processes in network namespaces under official-client sends and
## Pop consumers while a nemesis partitions, drops packets, flaps links, pauses and kills (also
## dropping what a killed member had not fsynced: a FUSE layer, Debian's fuse3); every
## run's history is checked (lost, duplicated, unexpected, offsets, replicas, store verify, Pop,
## FIFO, terms, outages). SEED=S replays from seed S (RUNS=1: that run alone); NEMESES=a,b picks
## nemeses; CLIENTS=python runs the Python workload alone (default python,java,node: the official
## Java and Node.js clients' senders and consumers too, a process each; mvn and npm fetch them once).
## Report and timelines in e2e/faults/results/report.md, or OUT=dir (about 3 min per run on a busy machine)
RUNS ?= 100
DURATION_S ?= 60
NEMESES ?= all
CLIENTS ?= python,java,node
.PHONY: e2e-faults
e2e-faults: $(STAMP)
	command -v iptables >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) iptables; }
	command -v fusermount3 >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) fuse3; }
	$(BIN)/python -m e2e.faults.runner --runs $(RUNS) --duration-s $(DURATION_S) \
	  --nemeses $(NEMESES) --clients $(CLIENTS) $(if $(SEED),--seed $(SEED)) $(if $(OUT),--out $(OUT))

## e2e-remoting-admin: a Spring Boot application with rocketmq-spring-boot-starter 2.3.3 (syncSend
## and a @RocketMQMessageListener) against a broker's name-server port: every message back once
## (about 1 min; mvn fetches the jars once; mqadmin's checks run in `make test`)
.PHONY: e2e-remoting-admin
e2e-remoting-admin: $(STAMP) java
	$(BIN)/python -m e2e.remoting_admin.spring_scenario --count 20

## go-clients: the Go RocketMQ client's harness (e2e/clients/go: rocketmq-client-go v2, remoting)
## built with go from the Go module proxy, cached in ~/.cache/gannet-go-clients (cold: ~1 CPU-min)
.PHONY: go-clients e2e-remoting-go
go-clients: $(STAMP)
	command -v go >/dev/null || { echo "go-clients: go is not on PATH"; exit 1; }
	$(BIN)/python tests/remoting/go_clients.py build

## e2e-remoting-go: the Go client against a broker, one process: sync/async/oneway/batch sends,
## delay level, push (tags), pull, orderly, transactions with check-back, offsets resumed after a
## restart, admin (about 15 s once built; tests/remoting/test_go_client.py)
e2e-remoting-go: go-clients
	$(BIN)/pytest -q -p no:randomly tests/remoting/test_go_client.py $(PYTEST_ARGS)

## cpp-clients: the official C++ RocketMQ client (rocketmq-client-cpp, in rocketmq-client-python
## 0.5.0rc2's wheel from PyPI, pinned by sha256) into ~/.cache/gannet-cpp-clients (1.3 MB, once)
.PHONY: cpp-clients e2e-remoting-cpp
cpp-clients: $(STAMP)
	$(BIN)/python tests/remoting/cpp_clients.py install

## e2e-remoting-cpp: the C++ client against a broker, one process: make test's scenarios (sends,
## push, orderly, compression, transactions, batch and pull, ACL, gRPC both ways) plus
## RECONSUME_LATER through %RETRY% to the DLQ and a 5 s delay level (about 40 s;
## tests/remoting/test_cpp_client.py)
e2e-remoting-cpp: cpp-clients
	GANNET_CPP_CLIENT_FULL=1 $(BIN)/pytest -q -p no:randomly tests/remoting/test_cpp_client.py $(PYTEST_ARGS)

## e2e-groups: 2 broker groups x 3 replicas (cluster up --groups 2): SIGKILL of group 0's leader
## under the official producer; group 1 keeps serving (gap <= 1 s), 0 acknowledged lost (about 1 min)
e2e-groups: $(STAMP)
	$(BIN)/python -m e2e.groups.scenario --after-s 10

## e2e-prometheus: a real Prometheus scrapes a local 3-node cluster under load; every dashboard
## and alert expression is evaluated through its HTTP API (about 50 s; also in `make unit`)
e2e-prometheus: $(STAMP) $(PROMTOOL)
	$(BIN)/python -m e2e.prometheus.scenario

## dashboards: rebuild charts/gannet/dashboards/*.json and the chart's alert-rules copy
dashboards: $(STAMP)
	$(BIN)/python -m deploy.dashboards.build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache

.PHONY: manifests

## manifests: re-render deploy/gannet.yaml from charts/gannet (tests check it is current)
manifests: $(STAMP)
	$(BIN)/python -m deploy.render

.PHONY: e2e-operator e2e-kind e2e-kind-drain e2e-kube kube-tools
## e2e-operator: operator and broker processes against the KMock API (also run by make test)
e2e-operator: $(STAMP)
	$(BIN)/python -m e2e.operator.scenario

## e2e-kind: Gannet as real pods: a kind cluster built offline (Debian's docker.io in its own
## network namespace, kind/kubelet/kubeadm built with go, images made with mmdebstrap, no
## registry), the image built offline, helm install, deploy/examples, the official client in a
## pod, leader and full restarts, helm upgrade/uninstall, a client outside through NodePorts.
## Cache ~/.cache/gannet-kube/v1.34.4 (cold ~25 min on 2 cores, warm a few minutes plus the
## tests); not part of `make test`
e2e-kind: $(STAMP)
	$(BIN)/python -m e2e.kind.run -q -s $(PYTEST_ARGS)

## e2e-kind-drain: make e2e-kind's cluster with a control plane and two workers (bridge CNI per
## node, host-gw routes: e2e/kind/pod_network.py): the examples Ready, the in-cluster client,
## kubectl drain of a worker under load with the PodDisruptionBudget, uncordon, 0 lost
e2e-kind-drain: $(STAMP)
	GANNET_KIND_NODES=3 $(BIN)/python -m e2e.kind.run -q -s \
		-k "examples_ready or in_cluster or node_drain" $(PYTEST_ARGS)

## kube-tools: etcd (Debian's etcd-server) and kube-apiserver + kube-controller-manager v1.34.4
## and kubectl built with go from the Go module proxy, cached in ~/.cache/gannet-kube (cold: ~20 CPU-min)
kube-tools: $(STAMP)
	command -v etcd >/dev/null || { $(SUDO) apt-get update -q && $(APT_INSTALL) etcd-server; }
	command -v go >/dev/null || { echo "kube-tools: go is not on PATH (it builds kube-apiserver)"; exit 1; }
	$(BIN)/python -m e2e.kube.tools build

## e2e-kube: the operator against a real kube-apiserver: helm install of the chart, the operator
## under its ServiceAccount token, the examples applied with kubectl, brokers as local processes
## (one with a tier at a closed port: spec.tier's StatefulSet, the TierOffload condition and Event)
e2e-kube: kube-tools
	$(BIN)/pytest -q e2e/kube $(PYTEST_ARGS)

## s3-tools: SeaweedFS's weed (Apache-2.0; its S3 gateway is the tier tests' S3 server) built with
## go from the Go module proxy, cached in ~/.cache/gannet-s3 (cold: a few CPU-min)
.PHONY: s3-tools e2e-tier
s3-tools: $(STAMP)
	$(BIN)/python -m e2e.tier.seaweedfs check 2>/dev/null || { command -v go >/dev/null || \
		{ echo "s3-tools: go is not on PATH (it builds SeaweedFS's weed)"; exit 1; }; }
	$(BIN)/python -m e2e.tier.seaweedfs build

## e2e-tier: tiered storage (docs/tiered-storage.md) against one real SeaweedFS S3 server: the S3
## edge, offloads SIGKILLed at every step of the upload protocol and resumed, ranged reads, a bucket outage (server killed and restarted),
## a MessageStore reading offloaded files (offset, pull, Pop, key/id/time; hung bucket), gannet store inspect/verify over a tier,
## a broker process SIGKILLed mid-offload, then expiring by bytes and verified from its bucket manifest copy, a 3-member group whose leader crashes mid-offload,
## GetTierStatus with refused credentials, remote retention + orphan sweep + a process SIGKILLed between expiry and deletes (measured on the busy shared 2-core machine: 106 s before the last two, 212 s with them at load 15-20),
## Spark export/verify/rebuild/data-source reads from the bucket (e2e/tier/test_pipeline.py: 4 tests, 1.5-5 min more with Spark's start)
e2e-tier: s3-tools
	$(BIN)/pytest -q -p no:randomly e2e/tier $(PYTEST_ARGS)

## sim-membership: 10,000 seeded simulations of membership changes under faults (~1 CPU-hour)
.PHONY: sim-membership
sim-membership: $(STAMP)
	GANNET_MEMBERSHIP_SIM_SEEDS=10000 GANNET_MEMBERSHIP_SIM_EVENTS=400 \
		$(BIN)/pytest -q tests/raft/test_membership_simulation.py -k under_faults $(PYTEST_ARGS)

## e2e-membership: 3 → 5 → 3 broker processes through `gannet cluster member`, a member with a
## deleted data directory replaced under a new id, the leader removed; official-client load
.PHONY: e2e-membership
e2e-membership: $(STAMP)
	$(BIN)/python -m e2e.replication.membership
