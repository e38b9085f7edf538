"""Real processes for the Prometheus end-to-end check: Gannet brokers (``gannet broker run``),
a Prometheus server (Debian's ``prometheus`` binary, installed by
``deploy/prometheus/install-promtool.sh``) scraping them every second, and its HTTP API.

Everything listens on 127.0.0.1 on free ports and lives under one work directory. The
Prometheus config attaches ``cluster`` to every target (the label the dashboards filter on)
and loads ``deploy/prometheus/gannet-rules.yml``. :class:`Cluster` is a list of broker
metrics endpoints plus one client endpoint, so a 3-node cluster (``gannet cluster up``, once
it exists) plugs in the same way as the single broker started here.

Used by :mod:`e2e.prometheus.scenario` (``make e2e-prometheus``, tests/metrics) and
:mod:`e2e.prometheus.render` (the pictures of docs/metrics.md).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from e2e.processes import free_port
from gannet.node.cli.cluster.commands import ensure_secret
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.testing import small_stores

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "gannet-rules.yml"
START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0
SCRAPE_INTERVAL_S = 1


def http_get(host_port: str, path: str) -> tuple[int, bytes]:
    host, _, port = host_port.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HTTP_TIMEOUT_S)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 0.1 s (a process we do not control has no event to await)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def _answers(host_port: str, path: str) -> bool:
    try:
        return http_get(host_port, path)[0] == 200
    except OSError:
        return False


@dataclass
class BrokerProcess:
    name: str
    process: subprocess.Popen[bytes]
    client_endpoint: str
    metrics_endpoint: str
    log_path: Path

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=START_TIMEOUT_S)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()


def gannet_command() -> list[str]:
    found = Path(sys.executable).parent / "gannet"
    return [str(found)] if found.exists() else [sys.executable, "-m", "gannet.node.cli"]


def start_broker(
    workdir: Path,
    name: str = "broker-a",
    cluster: str = "e2e",
    *,
    client: str | None = None,
    raft: list[str] | None = None,
    wait: bool = True,
    broker_name: str | None = None,
) -> BrokerProcess:
    """``gannet broker run`` on free ports; ``raft``: extra ``--node-id``/``--peers`` args;
    ``broker_name`` (default ``name``): the broker group, shared by a Raft group's members."""
    data = workdir / name
    data.mkdir(parents=True, exist_ok=True)
    client = client or f"127.0.0.1:{free_port()}"
    metrics = f"127.0.0.1:{free_port()}"
    log_path = workdir / f"{name}.log"
    command = [
        *gannet_command(),
        "broker",
        "run",
        "--data-dir",
        str(data),
        "--listen",
        client,
        "--metrics-listen",
        metrics,
        "--file-size-mb",
        "64",
        *small_stores.INDEX_ARGS,
        "--broker-name",
        broker_name or name,
        "--cluster",
        cluster,
        "--flush",
        "sync",
        *(raft or []),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    broker = BrokerProcess(name, process, client, metrics, log_path)
    if wait:
        wait_ready(broker)
    return broker


def wait_ready(broker: BrokerProcess) -> None:
    try:
        wait_for(
            lambda: _alive_and(broker.process, broker.metrics_endpoint, "/readyz"),
            START_TIMEOUT_S,
            f"{broker.name} ready",
        )
    except BaseException:
        broker.kill()
        raise


def _alive_and(process: subprocess.Popen[bytes], host_port: str, path: str) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"process exited with {process.returncode} before {path} answered")
    return _answers(host_port, path)


@dataclass
class Cluster:
    """What the scenario needs of a running cluster: one client endpoint and every broker's
    metrics endpoint (a single node now; a 3-node cluster has three)."""

    client_endpoint: str
    metrics_endpoints: list[str]
    brokers: list[BrokerProcess] = field(default_factory=list)
    name: str = "e2e"
    broker_name: str = "broker-a"
    """The broker group of every member (their ``broker`` label)."""

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()


def start_single_node(workdir: Path) -> Cluster:
    broker = start_broker(workdir)
    return Cluster(broker.client_endpoint, [broker.metrics_endpoint], [broker])


def raft_leader(endpoints: list[str]) -> str | None:
    """The client endpoint of the node that says it leads, or None."""
    for endpoint in endpoints:
        with grpc.insecure_channel(endpoint) as channel:
            admin = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                status = admin.GetRaftStatus(admin_pb2.GetRaftStatusRequest(), timeout=5)
            except grpc.RpcError:
                continue
            if status.role == "leader":
                return endpoint
    return None


GROUP_NAME = "broker-0"  # the three nodes' broker group, as `gannet cluster up --groups` names it


def start_three_nodes(workdir: Path) -> Cluster:
    """A local 3-node Raft group (``--node-id``/``--peers``); the client endpoint is the
    leader's once one is elected. Brokers are listed followers first, leader last."""
    clients = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    peers = [free_port() for _ in range(3)]
    members = ",".join(
        f"{i + 1}=127.0.0.1:{peers[i]}/{clients[i].rpartition(':')[2]}" for i in range(3)
    )
    brokers = []
    workdir.mkdir(parents=True, exist_ok=True)  # the shared peer secret is written there first
    secret = ensure_secret(workdir)
    try:
        for i in range(3):
            raft = ["--node-id", str(i + 1), "--peers", members]
            raft += ["--peer-listen", f"127.0.0.1:{peers[i]}", "--peer-secret-file", str(secret)]
            brokers.append(
                start_broker(
                    workdir,
                    f"broker-{i + 1}",
                    client=clients[i],
                    raft=raft,
                    wait=False,
                    broker_name=GROUP_NAME,
                )
            )
        for broker in brokers:
            wait_ready(broker)
        found: list[str] = []

        def elected() -> bool:
            leader = raft_leader(clients)
            found[:] = [leader] if leader else []
            return bool(found)

        wait_for(elected, START_TIMEOUT_S, "a Raft leader")
    except BaseException:
        for broker in brokers:
            broker.kill()
        raise
    brokers.sort(key=lambda b: b.client_endpoint == found[0])
    return Cluster(found[0], [b.metrics_endpoint for b in brokers], brokers, broker_name=GROUP_NAME)


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None
    )
    if found is None:
        raise FileNotFoundError(
            "the prometheus server is missing; run deploy/prometheus/install-promtool.sh "
            "(Debian's prometheus package ships both promtool and the server)"
        )
    return found


def prometheus_config(
    targets: list[str], cluster: str, rules: Path, operator_targets: list[str] | None = None
) -> str:
    """The scrape config: jobs ``gannet-broker`` (and ``gannet-operator``) every second,
    label ``cluster``."""
    document = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
        },
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "gannet-broker",
                "static_configs": [{"targets": targets, "labels": {"cluster": cluster}}],
            }
        ],
    }
    if operator_targets:
        document["scrape_configs"].append(  # type: ignore[attr-defined]
            {
                "job_name": "gannet-operator",
                "static_configs": [{"targets": operator_targets, "labels": {"cluster": cluster}}],
            }
        )
    return json.dumps(document, indent=2)  # YAML is a superset of JSON


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    address: str
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _api(self, path: str, params: dict[str, str]) -> Any:
        status, body = http_get(self.address, f"{path}?{urllib.parse.urlencode(params)}")
        document = json.loads(body)
        if status != 200 or document.get("status") != "success":
            raise ValueError(f"Prometheus refused {params}: {document.get('error', body[:300])}")
        return document["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The instant vector (or scalar as one sample) of ``expr`` now or at ``at``."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._api("/api/v1/query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_range(
        self, expr: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}"}
        return list(self._api("/api/v1/query_range", params)["result"])

    def targets_up(self) -> int:
        return sum(float(s["value"][1]) == 1 for s in self.query('up{job="gannet-broker"}'))


def start_prometheus(
    workdir: Path,
    targets: list[str],
    *,
    cluster: str = "e2e",
    rules: Path = RULES,
    operator_targets: list[str] | None = None,
) -> Prometheus:
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(prometheus_config(targets, cluster, rules, operator_targets))
    address = f"127.0.0.1:{free_port()}"
    log_path = workdir / "prometheus.log"
    command = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address={address}",
        "--storage.tsdb.retention.time=1h",
        "--query.lookback-delta=5s",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    prometheus = Prometheus(process, address, log_path)
    try:
        wait_for(lambda: _alive_and(process, address, "/-/ready"), START_TIMEOUT_S, "Prometheus")
    except BaseException:
        prometheus.stop()
        raise
    return prometheus
