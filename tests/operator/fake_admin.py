"""A scriptable ``gannet.admin.v1.Admin`` server for the cluster-level operator tests.

The Raft status, revive queues and cleanup answers of a real multi-member group are hard to
arrange in a unit-level test, so this server answers them from plain fields that a test sets,
and records every call it gets. It serves on 127.0.0.1 from a thread pool (sync gRPC), so that
kopf's cancellation of the test loop's tasks at operator exit cannot reach it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from gannet.node.api.gen import admin_pb2, admin_pb2_grpc


@dataclasses.dataclass
class FakeAdmin(admin_pb2_grpc.AdminServicer):
    leader_id: str = "1"  # Raft node ids: pod ordinal + 1
    peers: list[tuple[str, bool, int]] = dataclasses.field(default_factory=list)
    revive_active: int = 8
    revive_draining: list[int] = dataclasses.field(default_factory=list)
    calls: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def GetRaftStatus(self, request: Any, context: Any) -> admin_pb2.RaftStatus:
        self.calls.append(("GetRaftStatus", None))
        return admin_pb2.RaftStatus(
            node_id=self.leader_id,
            role="leader",
            term=7,
            leader_id=self.leader_id,
            peers=[
                admin_pb2.RaftPeer(node_id=n, reachable=r, lag_bytes=lag)
                for n, r, lag in self.peers
            ],
        )

    def TransferLeadership(self, request: Any, context: Any) -> Any:
        self.calls.append(("TransferLeadership", request.target_node_id))
        return admin_pb2.TransferLeadershipResponse(leader_id="1", term=8)

    def _revive(self) -> admin_pb2.ReviveQueuesResponse:
        queues = [admin_pb2.ReviveQueue(queue_id=i) for i in range(self.revive_active)]
        queues += [admin_pb2.ReviveQueue(queue_id=i, draining=True) for i in self.revive_draining]
        return admin_pb2.ReviveQueuesResponse(active_count=self.revive_active, queues=queues)

    def GetReviveQueues(self, request: Any, context: Any) -> Any:
        return self._revive()

    def SetReviveQueueCount(self, request: Any, context: Any) -> Any:
        self.calls.append(("SetReviveQueueCount", request.count))
        old = self.revive_active
        self.revive_active = request.count
        # As the broker: queues past the count keep draining until empty, so setting the same
        # count again (a refresh timer racing the create handler) changes nothing.
        retired = set(self.revive_draining) | set(range(request.count, old))
        self.revive_draining = sorted(q for q in retired if q >= request.count)
        return self._revive()

    def Cleanup(self, request: Any, context: Any) -> Any:
        self.calls.append(("Cleanup", request.trigger))
        return admin_pb2.CleanupResponse(
            policy=admin_pb2.CleanupPolicy(file_reserved_hours=72),
            last_result=admin_pb2.CleanupResult(commitlog_files_deleted=2, bytes_freed=4096),
        )

    def count(self, name: str) -> int:
        return sum(1 for call, _ in self.calls if call == name)


@contextlib.contextmanager
def serving(admin: FakeAdmin) -> Iterator[str]:
    """Serve ``admin``; yields its endpoint."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    admin_pb2_grpc.add_AdminServicer_to_server(admin, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait(5)
