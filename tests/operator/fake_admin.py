"""A scriptable ``gannet.admin.v1.Admin`` server for the cluster-level operator tests.

The Raft status, membership, revive queues and cleanup answers of a real multi-member group are
hard to arrange in a unit-level test, so this server answers them from plain fields that a test
sets, and records every call it gets. Membership (``ListMembers``, ``AddMember``,
``RemoveMember``, ``TransferLeadership``) follows the contract's semantics: one group, learners
added and promoted, a promotion refused while the learner lags, removals answered at once (as
if committed), and ``refuse_remove`` turning every removal into ``FAILED_PRECONDITION`` with
the broker's message. It serves on 127.0.0.1 from a thread pool (sync gRPC), so that
kopf's cancellation of the test loop's tasks at operator exit cannot reach it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc


@dataclasses.dataclass
class FakeAdmin(admin_pb2_grpc.AdminServicer):
    leader_id: str = "1"  # Raft node ids: pod ordinal + 1
    peers: list[tuple[str, bool, int]] = dataclasses.field(default_factory=list)
    revive_active: int = 8
    revive_draining: list[int] = dataclasses.field(default_factory=list)
    calls: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    # node id -> [voter, lag_bytes, reachable]; empty: ListMembers is not implemented
    members: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    new_member_lag: int = 0  # lag of a member just added as a learner
    refuse_remove: str = ""  # FAILED_PRECONDITION message for RemoveMember
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def membership_calls(self) -> list[tuple[str, Any]]:
        names = ("AddMember", "RemoveMember", "TransferLeadership")
        return [(name, arg) for name, arg in self.calls if name in names]

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
        with self.lock:
            self.calls.append(("TransferLeadership", request.target_node_id or self.leader_id))
            others = [n for n, (voter, _, up) in self.members.items() if voter and up]
            others = [n for n in others if n != self.leader_id]
            if others:
                self.leader_id = others[0]
            return admin_pb2.TransferLeadershipResponse(leader_id=self.leader_id or "1", term=8)

    def _members(self) -> list[admin_pb2.Member]:
        return [
            admin_pb2.Member(
                node_id=node,
                voter=voter,
                lag_bytes=0 if node == self.leader_id else lag,
                match_offset=0,
                reachable=reachable,
                leader=node == self.leader_id,
            )
            for node, (voter, lag, reachable) in sorted(
                self.members.items(), key=lambda m: int(m[0])
            )
        ]

    def ListMembers(self, request: Any, context: Any) -> Any:
        with self.lock:
            if not self.members:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "ListMembers")
            return admin_pb2.ListMembersResponse(
                members=self._members(),
                leader_id=self.leader_id,
                change_in_flight=any(not voter for voter, _, _ in self.members.values()),
            )

    def AddMember(self, request: Any, context: Any) -> Any:
        with self.lock:
            node = request.node_id
            self.calls.append(("AddMember", (node, request.learner_only)))
            if node not in self.members:
                self.members[node] = [False, self.new_member_lag, True]
            if not request.learner_only:
                lag = self.members[node][1]
                if lag > 0:
                    context.abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"node {node} is {lag:,} bytes behind after 60 s; not promoted "
                        "(still a learner)",
                    )
                self.members[node][0] = True
            return admin_pb2.MemberChangeResponse(members=self._members())

    def RemoveMember(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.calls.append(("RemoveMember", request.node_id))
            if self.refuse_remove:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, self.refuse_remove)
            self.members.pop(request.node_id, None)
            return admin_pb2.MemberChangeResponse(members=self._members())

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
def serving(admin: admin_pb2_grpc.AdminServicer) -> Iterator[str]:
    """Serve ``admin`` (this module's fake or another scripted servicer); yields its
    endpoint."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    admin_pb2_grpc.add_AdminServicer_to_server(admin, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait(5)
