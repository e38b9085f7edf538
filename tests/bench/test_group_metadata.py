"""``bench.group_metadata``: the projection from one group's cost per message and the measured
metadata share of a leader's core, and the fake group a real member polls and fans out to."""

from __future__ import annotations

import grpc

from bench import group_metadata
from bench.groups import TOPIC
from gannet.node.broker_groups import views as group_views
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc


def test_projection_is_linear_without_metadata_and_bends_by_the_extra_share() -> None:
    rows = group_metadata.projection(100.0, {1: 0.03, 2: 0.03, 8: 0.05, 32: 0.13})
    assert [r["groups"] for r in rows] == [1, 2, 8, 32]
    assert rows[0]["msgs_per_s"] == 10_000  # one group: 1e6 / 100 µs, its own share inside
    assert rows[1]["msgs_per_s"] == 20_000  # no extra share: linear
    assert rows[2] == {
        "groups": 8,
        "msgs_per_s": 78_400,  # 8 × (1 − 0.02) × 10,000
        "extra_leader_share": 0.02,
        "vs_linear": 0.98,
    }
    assert rows[3]["msgs_per_s"] == 288_000  # 32 × 0.9 × 10,000
    assert rows[3]["vs_linear"] == 0.9


def test_projection_never_credits_a_share_below_one_groups() -> None:
    rows = group_metadata.projection(50.0, {1: 0.05, 2: 0.04})
    assert rows[1]["msgs_per_s"] == 40_000
    assert rows[1]["extra_leader_share"] == 0.0


def test_fake_group_answers_polls_as_a_group_and_takes_fanned_out_creates() -> None:
    fake = group_metadata.FakeGroup("broker-7", replicas=3)
    fake.server.start()
    try:
        with grpc.insecure_channel(fake.endpoint) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            first = stub.GetBrokerGroup(admin_pb2.GetBrokerGroupRequest(), timeout=10)
            assert first.broker_name == "broker-7"
            assert first.leader_endpoint == fake.endpoint
            assert len(first.member_endpoints) == 3
            assert first.topics_included
            view = group_views.apply_answer(None, first, 0.0)
            assert view.topics[TOPIC].write_queue_nums == 8
            known = admin_pb2.GetBrokerGroupRequest(known_topics_version=first.topics_version)
            assert not stub.GetBrokerGroup(known, timeout=10).topics_included
            stub.CreateTopic(admin_pb2.CreateTopicRequest(name="Added"), timeout=10)
            after = stub.GetBrokerGroup(known, timeout=10)
            assert after.topics_included
            assert {t.name for t in after.topics} == {TOPIC, "Added"}
            assert fake.polls == 3
    finally:
        fake.server.stop(grace=None)
