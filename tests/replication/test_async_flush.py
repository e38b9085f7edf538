"""A Raft group whose stores flush asynchronously commits on a majority's writes.

In ASYNC_FLUSH no fsync may come for seconds (at least 4 dirty pages, or the thorough flush),
so a commit that waited for fsyncs would time out; written on a majority is the flush mode's
promise. Regression: ``gannet cluster up --flush async`` answered every send with a commit
timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.store.config import FlushMode

from .conftest import Cluster

CLIENT_ID = (("x-mq-client-id", "async-flush-test"),)


@pytest.fixture
def async_cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path, 3, flush_mode=FlushMode.ASYNC_FLUSH)
    yield made
    made.stop_all()


@pytest.mark.timeout(120)
def test_small_sends_commit_without_waiting_for_an_fsync(async_cluster: Cluster) -> None:
    async_cluster.start_all()
    leader = async_cluster.leader()
    topic = "AsyncRep"
    async_cluster.create_topic(topic)
    with grpc.insecure_channel(async_cluster.endpoint(leader)) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for i in range(5):
            request = service_pb2.SendMessageRequest(
                messages=[
                    definition_pb2.Message(
                        topic=definition_pb2.Resource(name=topic),
                        system_properties=definition_pb2.SystemProperties(
                            message_id=f"01ASYNC{i:025d}",
                            body_encoding=definition_pb2.IDENTITY,
                            message_type=definition_pb2.NORMAL,
                        ),
                        body=b"small",
                    )
                ]
            )
            # Well under the commit timeout (5 s) and the thorough-flush interval.
            response = stub.SendMessage(request, metadata=CLIENT_ID, timeout=4)
            assert response.status.code == definition_pb2.OK, response.status.message
    end = async_cluster.raft(leader).status().commit_offset
    async_cluster.wait_replicated(end)
