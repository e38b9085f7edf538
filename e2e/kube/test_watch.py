"""A watch of the operator expires (410 Gone) on the real server and the operator resumes: the
change made while its watch was gone is reconciled. The operator runs behind
:class:`e2e.kube.proxy.ExpiringProxy`, which drops its Topic watch and holds the next one until
etcd has been compacted past the resourceVersion it resumes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e.kube import harness
from e2e.kube.control_plane import ControlPlane, write_kubeconfig
from e2e.kube.harness import NAMESPACE, Kubectl, Process, ready, resource, wait_for
from e2e.kube.proxy import ExpiringProxy, resource_version_of


def test_watch_expired_410_is_listed_again_and_resumed(
    plane: ControlPlane,
    admin: Kubectl,
    running_operator: Process,
    release: dict[str, Any],
    operator_kubeconfig: Path,
    broker: tuple[Process, str],
    credentials: dict[str, str],
    workdir: Path,
) -> None:
    admin.apply(resource("Topic", "expiring", {"cluster": "main", "queues": 2}))
    assert wait_for(plane, "Topic", "expiring", ready) is not None
    token = json.loads(operator_kubeconfig.read_text())["users"][0]["user"]["token"]
    running_operator.stop()  # one operator at a time: the proxied one takes over
    held: list[tuple[int, int]] = []

    def change_then_compact(url: str) -> None:
        resumes_from = resource_version_of(url)
        admin.apply(resource("Topic", "expiring", {"cluster": "main", "queues": 4}))
        admin.run("annotate", "topic", "expiring", "-n", NAMESPACE, "e2e/touched=yes")
        held.append((resumes_from, plane.compact()))

    try:
        with ExpiringProxy(plane).running() as proxy:
            kubeconfig = write_kubeconfig(
                workdir / "operator-proxied.kubeconfig",
                proxy.url,
                plane.pki.ca,
                user={"token": token},
                namespace=NAMESPACE,
            )
            proxied = harness.operator_process(
                workdir,
                harness.operator_args(release),
                kubeconfig=kubeconfig,
                broker=broker[1],
                credentials=credentials,
                log_name="operator-proxied.log",
            )
            with harness.started(proxied):
                proxy.watches.clear()
                proxy.arm("/topics", change_then_compact)
                done = wait_for(
                    plane,
                    "Topic",
                    "expiring",
                    lambda o: ready(o) and (o or {})["status"]["queues"] == 4,
                )
            assert done is not None
            (resumes_from, compacted), *_ = held
            assert compacted > resumes_from + 1, "etcd was not compacted past the watch"
            assert proxy.expired, f"no watch got 410 Gone; watches: {proxy.watches}"
            # After the 410 the operator listed the topics again and watched from there.
            assert any(resource_version_of(w) >= compacted for w in proxy.watches[1:])
    finally:
        running_operator.start()
    assert harness.broker_topic(broker[1], credentials, "expiring").queues == 4
    admin.run("delete", "topic", "expiring", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
