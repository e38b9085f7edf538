"""A read of an offloaded offset while the bucket is down, answered on the remoting protocol:
a real reader over an endpoint where nothing listens fails with ``TierUnavailable``, and a real
remoting server on a socket answers the request ``SYSTEM_BUSY`` naming the offset, which the
4.x clients retry (docs/tiered-storage.md §7). No S3 server needed: the refusal is the
kernel's."""

from __future__ import annotations

import asyncio
import socket

import grpc

from gannet.node.api import record_pulling, store_statuses
from gannet.node.remoting import codes
from gannet.node.remoting.codec import Command
from gannet.node.remoting.server import Connection, RemotingServer
from gannet.node.store.tier import buckets, manifests, reading
from tests.remoting.client import RawClient

PREFIX = "gannet/c1/g0"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_remoting_answers_a_tier_outage_with_system_busy() -> None:
    dead = buckets.BucketConfig(
        endpoint_url=f"http://127.0.0.1:{_closed_port()}",
        bucket="gannet",
        access_key="k",
        secret_key="s",
        connect_timeout_s=1.0,
        read_timeout_s=1.0,
        attempts_max=1,
    )
    manifest = manifests.Manifest(PREFIX, (manifests.TierObject(0, 4096, "0" * 32, 1),))
    reader = reading.TierReader(buckets.S3Bucket(dead), lambda: manifest, block_bytes=1024)

    async def dispatch(command: Command, conn: Connection) -> Command:
        data = await asyncio.to_thread(reader.read_record, 100)  # raises TierUnavailable
        return command.response(codes.SUCCESS, body=data)

    async def scenario() -> Command:
        server = RemotingServer(dispatch)
        port = await server.listen("127.0.0.1", 0)
        try:
            with RawClient(f"127.0.0.1:{port}") as client:
                return await asyncio.to_thread(client.call, codes.VIEW_MESSAGE_BY_ID)
        finally:
            await server.stop()

    answer = asyncio.run(scenario())
    assert answer.code == codes.SYSTEM_BUSY
    assert "commit-log offset 100" in (answer.remark or "")
    assert reader.statistics().read_errors == {"unavailable": 1}


def test_admin_pull_records_answers_a_tier_outage_with_unavailable() -> None:
    """PullRecords answered a retryable tier outage as INVALID_ARGUMENT (bad input) before."""
    outage = store_statuses.from_store_error(reading.FetchesBusy("4 tier fetches in flight"))
    assert record_pulling.grpc_code(outage.code) is grpc.StatusCode.UNAVAILABLE
