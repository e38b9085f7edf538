"""The remoting port over real sockets: name-server answers, sends, long-polling pulls, offsets
shared with the v2 gRPC API, topic requests, and bad input (limits checked before anything is
read, unknown codes, a slow request beside fast ones, the per-connection bound)."""

from __future__ import annotations

import json
import re
import struct
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import codec, codes, messages
from gannet.node.remoting.codec import Command
from gannet.node.store import msgids
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log import records

from .client import RawClient, json_body, raw_frame

pytestmark = pytest.mark.timeout(120)
WAIT_MS = 10_000
"""Pulls right after a send wait (long polling) for its dispatch to the consume queue."""
CLIENT_ID = (("x-mq-client-id", "tests@1@0@remoting"),)
_topics = iter(range(1_000_000))


def fastjson(command: Command) -> Any:
    """A body as fastjson writes it: bare integer keys (``{0:"h:p"}``) quoted for Python."""
    return json.loads(re.sub(r"([{,])(-?\d+):", r'\1"\2":', command.body.decode()))


def topic_name() -> str:
    return f"RemT{next(_topics)}"


def send(client: RawClient, topic: str, queue_id: int, body: bytes, **props: str) -> Command:
    properties = {"UNIQ_KEY": messages.new_message_id(), "WAIT": "true", **props}
    ext = {
        "a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": "1700000000000", "h": "0", "i": messages.format_properties(properties), "j": "0",
        "k": "false", "m": "false",
    }  # fmt: skip
    return client.call(codes.SEND_MESSAGE_V2, ext, body)


def pull(
    client: RawClient, topic: str, queue_id: int, offset: int, *, suspend_ms: int = 0,
    subscription: str = "*",
) -> Command:  # fmt: skip
    flags = 0x4 | (0x2 if suspend_ms else 0)
    ext = {
        "consumerGroup": "RemG", "topic": topic, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": str(flags),
        "commitOffset": "-1", "suspendTimeoutMillis": str(suspend_ms),
        "subscription": subscription, "subVersion": "0", "expressionType": "TAG",
    }  # fmt: skip
    return client.call(codes.PULL_MESSAGE, ext)


def route(client: RawClient, topic: str) -> Command:
    return client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def test_route_cluster_and_topic_list_on_the_nameserver_port(
    broker: threads.BrokerThread, nameserver_endpoint: str, remoting_endpoint: str
) -> None:
    topic = topic_name()
    with RawClient(nameserver_endpoint) as ns:
        answer = route(ns, topic)  # auto-created, as for a v2 QueryRoute
        assert answer.code == codes.SUCCESS, answer.remark
        data = fastjson(answer)
        assert data["brokerDatas"] == [
            {"brokerAddrs": {"0": remoting_endpoint}, "brokerName": "broker-a",
             "cluster": "DefaultCluster"},
        ]  # fmt: skip
        assert data["queueDatas"] == [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0,
             "writeQueueNums": 8},
        ]  # fmt: skip
        info = fastjson(ns.call(codes.GET_BROKER_CLUSTER_INFO))
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": remoting_endpoint}
        listed = json_body(ns.call(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert topic in listed["topicList"]
        # the same answers on the remoting port:
    with RawClient(remoting_endpoint) as rc:
        assert fastjson(route(rc, topic)) == data


def test_binary_header_serialization_is_answered_in_kind(nameserver_endpoint: str) -> None:
    with RawClient(nameserver_endpoint) as ns:
        answer = ns.call(
            codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic_name()},
            serialize_type=codec.SERIALIZE_ROCKETMQ,
        )  # fmt: skip
        assert answer.serialize_type == codec.SERIALIZE_ROCKETMQ
        assert answer.code == codes.SUCCESS
        assert fastjson(answer)["queueDatas"][0]["writeQueueNums"] == 8


def test_send_then_pull_returns_the_stored_record(remoting_endpoint: str) -> None:
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        sent = send(rc, topic, 3, b"hello", TAGS="TagA", KEYS="k1 k2", color="blue")
        assert sent.code == codes.SUCCESS, sent.remark
        assert sent.ext["queueId"] == "3"
        assert sent.ext["queueOffset"] == "0"
        got = pull(rc, topic, 3, 0, suspend_ms=WAIT_MS)  # a send's queue entry comes after it
        assert got.code == codes.SUCCESS, got.remark
        assert got.ext["nextBeginOffset"] == "1"
        assert got.ext["maxOffset"] == "1"
        record = _decode_record(got.body)
        assert record["body"] == b"hello"
        assert record["properties"]["TAGS"] == "TagA"
        assert record["properties"]["KEYS"] == "k1 k2"
        assert record["properties"]["color"] == "blue"
        assert record["queue_id"] == 3
        assert "WAIT" not in record["properties"]
        filtered = pull(rc, topic, 3, 0, subscription="TagB")
        assert filtered.code in (codes.PULL_NOT_FOUND, codes.PULL_RETRY_IMMEDIATELY)
        assert filtered.ext["nextBeginOffset"] == "1"
        moved = pull(rc, topic, 3, 5)
        assert moved.code == codes.PULL_OFFSET_MOVED
        assert moved.ext["nextBeginOffset"] == "1"
        lite = rc.call(codes.LITE_PULL_MESSAGE, {
            "consumerGroup": "RemG", "topic": topic, "queueId": "3", "queueOffset": "0",
            "maxMsgNums": "8", "sysFlag": "0",
        })  # fmt: skip
        assert (lite.code, lite.body) == (codes.SUCCESS, got.body)  # 5.x lite pull: the same


def test_a_duplicate_send_answers_the_original_offset_message_id(remoting_endpoint: str) -> None:
    """A retried send (same unique key, within the deduplication window) is answered from the
    window, which keeps no commit-log offset: its msgId is looked up in the queue."""
    topic = topic_name()
    uniq = messages.new_message_id()
    with RawClient(remoting_endpoint) as rc:
        first = send(rc, topic, 2, b"once", UNIQ_KEY=uniq)
        again = send(rc, topic, 2, b"once", UNIQ_KEY=uniq)
        assert (first.code, again.code) == (codes.SUCCESS, codes.SUCCESS)
        assert again.ext["queueOffset"] == first.ext["queueOffset"] == "0"
        assert again.ext["msgId"] == first.ext["msgId"]
        stored = msgids.decode_offset_msg_id(first.ext["msgId"])
        viewed = rc.call(codes.VIEW_MESSAGE_BY_ID, {"offset": str(stored.commit_offset)})
        assert _decode_record(viewed.body)["properties"]["UNIQ_KEY"] == uniq


def test_batch_send_stores_every_message(remoting_endpoint: str) -> None:
    topic = topic_name()
    entries = b""
    for i in range(3):
        props = messages.format_properties({"UNIQ_KEY": f"ID{i}", "KEYS": f"b{i}"}).encode()
        body = f"batch {i}".encode()
        size = 20 + len(body) + 2 + len(props)
        entries += struct.pack(">iiiii", size, 0, 0, 0, len(body)) + body
        entries += struct.pack(">h", len(props)) + props
    ext = {"b": topic, "e": "1", "f": "0", "g": "0", "i": "", "m": "true"}
    with RawClient(remoting_endpoint) as rc:
        answer = rc.call(codes.SEND_BATCH_MESSAGE, ext, entries)
        assert answer.code == codes.SUCCESS, answer.remark
        # RocketMQ's msgId: the offset message ids of the batch's messages, joined by commas;
        # each names the remoting port the client dialed and where the message is stored
        ids = [msgids.decode_offset_msg_id(i) for i in answer.ext["msgId"].split(",")]
        assert [f"{i.host}:{i.port}" for i in ids] == [remoting_endpoint] * 3
        assert ids[0].commit_offset < ids[1].commit_offset < ids[2].commit_offset
        for i, found in enumerate(ids):
            viewed = rc.call(codes.VIEW_MESSAGE_BY_ID, {"offset": str(found.commit_offset)})
            assert viewed.code == codes.SUCCESS, viewed.remark
            assert _decode_record(viewed.body)["properties"]["UNIQ_KEY"] == f"ID{i}"
        got = pull(rc, topic, 1, 0, suspend_ms=WAIT_MS)
        assert got.code == codes.SUCCESS, got.remark
        assert got.ext["nextBeginOffset"] == "3"
        truncated = rc.call(codes.SEND_BATCH_MESSAGE, ext, entries[:-3])
        assert truncated.code == codes.MESSAGE_ILLEGAL


def test_a_suspended_pull_is_answered_when_a_message_arrives_and_does_not_stall_the_port(
    remoting_endpoint: str,
) -> None:
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        assert route(rc, topic).code == codes.SUCCESS  # creates the topic
        waiting = Command(codes.PULL_MESSAGE, ext={
            "consumerGroup": "RemG", "topic": topic, "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "-1",
            "suspendTimeoutMillis": "20000", "subscription": "*", "expressionType": "TAG",
        })  # fmt: skip
        pull_opaque = rc.send(waiting)
        # the same connection keeps serving while the pull waits: the send is answered first
        sent_opaque = rc.send(Command(codes.SEND_MESSAGE_V2, ext={
            "b": topic, "e": "0", "f": "0", "g": "0",
            "i": messages.format_properties({"UNIQ_KEY": "WAKE1"}),
        }, body=b"wake up"))  # fmt: skip
        first = rc.read()
        assert first.opaque == sent_opaque
        assert first.code == codes.SUCCESS, first.remark
        woken = rc.response(pull_opaque)
        assert woken.code == codes.SUCCESS
        assert _decode_record(woken.body)["body"] == b"wake up"


def test_a_suspended_pull_ends_at_its_timeout(remoting_endpoint: str) -> None:
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        assert route(rc, topic).code == codes.SUCCESS
        answer = pull(rc, topic, 0, 0, suspend_ms=300)
        assert answer.code == codes.PULL_NOT_FOUND
        assert answer.ext["nextBeginOffset"] == "0"


def test_offsets_are_shared_with_v2_consumers_of_the_group(
    broker: threads.BrokerThread, remoting_endpoint: str
) -> None:
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        for i in range(3):
            assert send(rc, topic, 2, f"m{i}".encode()).code == codes.SUCCESS
        assert pull(rc, topic, 2, 2, suspend_ms=WAIT_MS).code == codes.SUCCESS  # all dispatched
        new_group = {"consumerGroup": "RemOffsets", "topic": topic, "queueId": "2"}
        fresh = rc.call(codes.QUERY_CONSUMER_OFFSET, new_group)
        assert (fresh.code, fresh.ext["offset"]) == (codes.SUCCESS, "0")  # first message kept
        update = rc.call(codes.UPDATE_CONSUMER_OFFSET, {**new_group, "commitOffset": "2"})
        assert update.code == codes.SUCCESS, update.remark
        assert rc.call(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": "2"}).ext["offset"] == "3"
        assert rc.call(codes.GET_MIN_OFFSET, {"topic": topic, "queueId": "2"}).ext["offset"] == "0"
        by_time = {"topic": topic, "queueId": "2", "timestamp": "0"}
        assert rc.call(codes.SEARCH_OFFSET_BY_TIMESTAMP, by_time).ext["offset"] == "0"
        by_time["timestamp"] = str(2**62)  # after every message: the queue's end
        assert rc.call(codes.SEARCH_OFFSET_BY_TIMESTAMP, by_time).ext["offset"] == "3"
        queue = definition_pb2.MessageQueue(topic=definition_pb2.Resource(name=topic), id=2)
        group = definition_pb2.Resource(name="RemOffsets")
        with grpc.insecure_channel(broker.endpoint) as channel:
            v2 = service_pb2_grpc.MessagingServiceStub(channel)
            seen = v2.GetOffset(
                service_pb2.GetOffsetRequest(group=group, message_queue=queue), metadata=CLIENT_ID
            )
            assert seen.offset == 2
            v2.UpdateOffset(
                service_pb2.UpdateOffsetRequest(group=group, message_queue=queue, offset=3),
                metadata=CLIENT_ID,
            )
        assert rc.call(codes.QUERY_CONSUMER_OFFSET, new_group).ext["offset"] == "3"


def test_heartbeats_give_consumer_lists_and_notify_the_others(remoting_endpoint: str) -> None:
    def heartbeat(client: RawClient, client_id: str) -> Command:
        body = {
            "clientID": client_id,
            "consumerDataSet": [{
                "groupName": "RemHb", "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "subscriptionDataSet": [
                    {"topic": "RemHbT", "subString": "TagA || TagB", "expressionType": "TAG"},
                ],
            }],
            "producerDataSet": [],
        }  # fmt: skip
        return client.call(codes.HEART_BEAT, body=json.dumps(body).encode())

    with RawClient(remoting_endpoint) as one, RawClient(remoting_endpoint) as two:
        assert heartbeat(one, "c1").code == codes.SUCCESS
        assert heartbeat(two, "c2").code == codes.SUCCESS
        notice = one.read()  # c2 joined: c1 is told to rebalance
        assert (notice.code, notice.ext, notice.is_oneway) == (40, {"consumerGroup": "RemHb"}, True)
        listed = one.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "RemHb"})
        assert json_body(listed) == {"consumerIdList": ["c1", "c2"]}
        gone = two.call(codes.UNREGISTER_CLIENT, {"clientID": "c2", "consumerGroup": "RemHb"})
        assert gone.code == codes.SUCCESS
        listed = one.response(
            one.send(Command(codes.GET_CONSUMER_LIST_BY_GROUP, ext={"consumerGroup": "RemHb"}))
        )
        assert json_body(listed) == {"consumerIdList": ["c1"]}
        bad = {"clientID": "c3", "consumerDataSet": [{"groupName": "RemHb", "subscriptionDataSet": [
            {"topic": "T", "subString": "a = ", "expressionType": "SQL92"}]}]}  # fmt: skip
        refused = one.call(codes.HEART_BEAT, body=json.dumps(bad).encode())
        assert refused.code == codes.SUBSCRIPTION_PARSE_FAILED
        config = {"subString": "a > 1", "expressionType": "SQL92"}
        body = json.dumps({"group": "RemHb", "subscriptionData": config}).encode()
        checked = one.call(codes.CHECK_CLIENT_CONFIG, body=body)
        assert checked.code == codes.SUCCESS


def test_a_backquoted_sql92_subscription_is_refused_and_the_rest_of_the_heartbeat_counts(
    remoting_endpoint: str,
) -> None:
    """RocketMQ's SQL92 grammar has no quoted identifiers: a backquoted name is refused where
    the client subscribes (CHECK_CLIENT_CONFIG, HEART_BEAT) and by a pull carrying it, naming the
    group, the topic and the character; the client is no consumer of that group (its rebalance
    gives it no queue), while its other groups and producers are registered."""
    quoted = {"topic": "RemQuoteT", "subString": "`num` > 1", "expressionType": "SQL92"}
    plain = {"topic": "RemQuoteT", "subString": "num > 1", "expressionType": "SQL92"}
    heartbeat = {
        "clientID": "q1",
        "consumerDataSet": [
            {"groupName": "RemQuoteBad", "subscriptionDataSet": [quoted]},
            {"groupName": "RemQuoteGood", "subscriptionDataSet": [plain]},
        ],
        "producerDataSet": [{"groupName": "RemQuoteP"}],
    }
    with RawClient(remoting_endpoint) as rc:
        refused = rc.call(codes.HEART_BEAT, body=json.dumps(heartbeat).encode())
        assert refused.code == codes.SUBSCRIPTION_PARSE_FAILED
        assert "consumer group 'RemQuoteBad': topic 'RemQuoteT'" in str(refused.remark)
        assert "no quoted identifiers" in str(refused.remark)
        good = rc.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "RemQuoteGood"})
        assert json_body(good) == {"consumerIdList": ["q1"]}
        bad = rc.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "RemQuoteBad"})
        assert bad.code == codes.SYSTEM_ERROR  # no consumer of that group
        body = json.dumps({"group": "RemQuoteBad", "subscriptionData": quoted}).encode()
        checked = rc.call(codes.CHECK_CLIENT_CONFIG, body=body)
        assert checked.code == codes.SUBSCRIPTION_PARSE_FAILED
        assert "no quoted identifiers" in str(checked.remark)
        pulled = rc.call(codes.PULL_MESSAGE, {
            "consumerGroup": "RemQuoteBad", "topic": "RemQuoteT", "queueId": "0",
            "queueOffset": "0", "maxMsgNums": "8", "sysFlag": "4",
            "subscription": "`num` > 1", "expressionType": "SQL92",
        })  # fmt: skip
        assert pulled.code == codes.SUBSCRIPTION_PARSE_FAILED
        assert "no quoted identifiers" in str(pulled.remark)


def test_topic_create_and_config(remoting_endpoint: str) -> None:
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        missing = rc.call(codes.GET_TOPIC_CONFIG, {"topic": topic})
        assert missing.code == codes.TOPIC_NOT_EXIST
        ext = {"topic": topic, "readQueueNums": "3", "writeQueueNums": "3", "perm": "6"}
        created = rc.call(codes.UPDATE_AND_CREATE_TOPIC, ext)
        assert created.code == codes.SUCCESS, created.remark
        config = json_body(rc.call(codes.GET_TOPIC_CONFIG, {"topic": topic}))
        assert (config["topicName"], config["writeQueueNums"], config["perm"]) == (topic, 3, 6)
        grown = rc.call(codes.UPDATE_AND_CREATE_TOPIC, {**ext, "writeQueueNums": "5"})
        assert grown.code == codes.SUCCESS, grown.remark
        config = json_body(rc.call(codes.GET_TOPIC_CONFIG, {"topic": topic}))
        assert config["writeQueueNums"] == 5


def test_refusals_carry_remoting_codes(remoting_endpoint: str) -> None:
    with RawClient(remoting_endpoint) as rc:
        bad_topic = send(rc, "bad topic!", 0, b"x")
        assert bad_topic.code != codes.SUCCESS
        assert bad_topic.remark
        no_queue = send(rc, topic_name(), 99, b"x")
        assert no_queue.code == codes.MESSAGE_ILLEGAL
        assert "queue 99" in (no_queue.remark or "")
        empty = send(rc, topic_name(), 0, b"")
        assert empty.code == codes.MESSAGE_ILLEGAL
        no_header = rc.call(codes.PULL_MESSAGE, {})
        assert no_header.code == codes.SYSTEM_ERROR
        assert "missing" in (no_header.remark or "")
        junk_heartbeat = rc.call(codes.HEART_BEAT, body=b"\xff{")
        assert junk_heartbeat.code == codes.SYSTEM_ERROR


def test_unknown_request_codes_answer_not_supported(remoting_endpoint: str) -> None:
    with RawClient(remoting_endpoint) as rc:
        for code in (0, 9999, 39, -5):  # 39: CHECK_TRANSACTION_STATE goes to clients only
            answer = rc.call(code)
            assert answer.code == codes.REQUEST_CODE_NOT_SUPPORTED
            assert str(code) in (answer.remark or "")
        # a oneway unknown request gets no answer: the next answer is the route's
        rc.send(Command(9999, flag=codec.FLAG_ONEWAY))
        assert route(rc, topic_name()).code == codes.SUCCESS


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (struct.pack(">i", 2**31 - 1), "length far above the frame limit, no bytes sent after it"),
        (struct.pack(">i", codec.FRAME_BYTES_MAX + 1), "length just above the limit"),
        (struct.pack(">i", 2), "length below the header-length field"),
        (struct.pack(">i", -7), "negative length"),
        (raw_frame(8, (5 << 24) | 4, b"abcd"), "serialize type 5"),
        (raw_frame(8, 100, b"abcd"), "header length past the frame"),
        (raw_frame(4, codec.HEADER_BYTES_MAX + 1), "header length above the limit"),
        (raw_frame(9, 5, b"[1,2]"), "JSON header not an object"),
        (raw_frame(8, (1 << 24) | 4, b"\x00\x01\x00\x00"), "binary header cut short"),
    ],
)
def test_bad_frames_close_the_connection_and_the_port_keeps_serving(
    remoting_endpoint: str, frame: bytes, why: str
) -> None:
    with RawClient(remoting_endpoint, timeout_s=10) as rc:
        rc.write(frame)
        assert rc.closed_by_peer(), why
    with RawClient(remoting_endpoint) as rc:
        assert route(rc, topic_name()).code == codes.SUCCESS


def test_requests_beyond_the_connection_bound_are_refused_busy(
    broker: threads.BrokerThread, remoting_endpoint: str
) -> None:
    server = broker.broker.remoting
    assert server is not None
    bound = server.inflight_per_connection_max
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        assert route(rc, topic).code == codes.SUCCESS
        parked = [
            rc.send(
                Command(
                    codes.PULL_MESSAGE,
                    ext={
                        "consumerGroup": "RemG",
                        "topic": topic,
                        "queueId": "0",
                        "queueOffset": "0",
                        "maxMsgNums": "1",
                        "sysFlag": "2",
                        "suspendTimeoutMillis": "20000",
                    },
                )
            )
            for _ in range(bound)
        ]
        busy = rc.call(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert busy.code == codes.SYSTEM_BUSY
        assert send(rc, topic, 0, b"release").code == codes.SYSTEM_BUSY
        done = threading.Event()
        with RawClient(remoting_endpoint) as other:  # other connections are not affected
            assert send(other, topic, 0, b"release").code == codes.SUCCESS
            done.set()
        answered = {rc.read().opaque for _ in parked}
        assert answered == set(parked)


def _decode_record(data: bytes) -> dict[str, Any]:
    """One stored record (RocketMQ's message layout, V1 with IPv4 hosts), as clients decode."""
    total, _magic, _crc, queue_id = struct.unpack_from(">iiii", data)
    pos = 16 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8
    (body_length,) = struct.unpack_from(">i", data, pos)
    body = data[pos + 4 : pos + 4 + body_length]
    pos += 4 + body_length
    topic_length = data[pos]
    pos += 1 + topic_length
    (props_length,) = struct.unpack_from(">h", data, pos)
    text = data[pos + 2 : pos + 2 + props_length].decode()
    assert pos + 2 + props_length == total
    return {"body": body, "queue_id": queue_id, "properties": messages.parse_properties(text)}


def test_a_taken_remoting_port_fails_the_start_cleanly(
    tmp_path: Path, remoting_endpoint: str
) -> None:
    taken = int(remoting_endpoint.rpartition(":")[2])
    store = StoreConfig.for_tests(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(store=store, listen_port=0, remoting_port=taken)
    with pytest.raises(OSError, match="remoting protocol"):
        threads.start(config)
    refused = BrokerConfig(store=store, listen_port=0, nameserver_port=0)
    with pytest.raises(ValueError, match="--remoting-port"):
        threads.start(refused)


@pytest.mark.parametrize(
    ("code", "ext"),
    [
        (codes.GET_MAX_OFFSET, {"topic": "T", "queueId": "2147483648"}),
        (codes.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "readQueueNums": "9" * 30}),
        (codes.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": "0", "timestamp": "1e3"}),
        (
            codes.PULL_MESSAGE,
            {"consumerGroup": "G", "topic": "T", "queueId": "-1", "queueOffset": str(2**63)},
        ),
    ],
)
def test_out_of_range_numbers_are_refused_by_name(
    remoting_endpoint: str, code: int, ext: dict[str, str]
) -> None:
    with RawClient(remoting_endpoint) as rc:
        answer = rc.call(code, ext)
    assert answer.code == codes.SYSTEM_ERROR
    assert "header field" in (answer.remark or "") or "queueId" in (answer.remark or "")


def _physical_offset(record: bytes) -> int:
    (offset,) = struct.unpack_from(">q", record, 28)  # after size, magic, CRC, queue, flag, qoffset
    return int(offset)


def test_send_back_goes_to_the_retry_topic_after_its_delay_then_to_the_dlq(
    remoting_endpoint: str,
) -> None:
    topic, group = topic_name(), "RemBackG"
    with RawClient(remoting_endpoint) as rc:
        assert send(rc, topic, 0, b"fails", TAGS="TagA").code == codes.SUCCESS
        first = pull(rc, topic, 0, 0, suspend_ms=WAIT_MS)
        offset = _physical_offset(first.body)
        back = {
            "group": group, "offset": str(offset), "delayLevel": "1", "originMsgId": "ORIGIN1",
            "originTopic": topic, "maxReconsumeTimes": "1",
        }  # fmt: skip
        answer = rc.call(codes.CONSUMER_SEND_MSG_BACK, back)
        assert answer.code == codes.SUCCESS, answer.remark
        retry = f"%RETRY%{group}"
        # delay level 1 (1 s): the timer store delivers it, the suspended pull wakes then
        again = pull(rc, retry, 0, 0, suspend_ms=WAIT_MS)
        assert again.code == codes.SUCCESS, again.remark
        record = _decode_record(again.body)
        assert record["body"] == b"fails"
        assert record["properties"]["RETRY_TOPIC"] == topic
        assert record["properties"]["ORIGIN_MESSAGE_ID"] == "ORIGIN1"
        assert record["properties"]["TAGS"] == "TagA"
        # reconsumed once already, at most once allowed: the next send-back is a dead letter
        back["offset"] = str(_physical_offset(again.body))
        assert rc.call(codes.CONSUMER_SEND_MSG_BACK, back).code == codes.SUCCESS
        dead = pull(rc, f"%DLQ%{group}", 0, 0, suspend_ms=WAIT_MS)
        assert dead.code == codes.SUCCESS, dead.remark
        assert _decode_record(dead.body)["properties"]["DLQ_ORIGIN_TOPIC"] == topic
        nowhere = rc.call(codes.CONSUMER_SEND_MSG_BACK, {**back, "offset": str(2**40)})
        assert nowhere.code == codes.SYSTEM_ERROR


def test_queue_locks_go_to_one_client_of_a_group_until_unlocked(remoting_endpoint: str) -> None:
    def body(client_id: str, *queues: int) -> bytes:
        mqs = [{"brokerName": "broker-a", "queueId": q, "topic": "RemLockT"} for q in queues]
        return json.dumps(
            {"consumerGroup": "RemLockG", "clientId": client_id, "mqSet": mqs}
        ).encode()

    def locked(answer: Command) -> set[int]:
        assert answer.code == codes.SUCCESS, answer.remark
        return {mq["queueId"] for mq in json_body(answer)["lockOKMQSet"]}

    with RawClient(remoting_endpoint) as rc:
        assert locked(rc.call(codes.LOCK_BATCH_MQ, body=body("a", 0, 1))) == {0, 1}
        assert locked(rc.call(codes.LOCK_BATCH_MQ, body=body("b", 1, 2))) == {2}
        assert locked(rc.call(codes.LOCK_BATCH_MQ, body=body("a", 0, 1))) == {0, 1}  # renewed
        assert rc.call(codes.UNLOCK_BATCH_MQ, body=body("a", 1)).code == codes.SUCCESS
        assert locked(rc.call(codes.LOCK_BATCH_MQ, body=body("b", 1))) == {1}
        bad = rc.call(codes.LOCK_BATCH_MQ, body=b'{"consumerGroup":"G","mqSet":[{}]}')
        assert bad.code == codes.SYSTEM_ERROR


def test_messages_by_key_unique_key_and_commit_log_offset(remoting_endpoint: str) -> None:
    topic = topic_name()
    with RawClient(remoting_endpoint) as rc:
        uniq = messages.new_message_id()
        sent = send(rc, topic, 0, b"find me", KEYS="order-7 other", UNIQ_KEY=uniq)
        assert sent.code == codes.SUCCESS, sent.remark
        pulled = pull(rc, topic, 0, 0, suspend_ms=WAIT_MS)  # dispatched (and indexed) by now
        assert pulled.code == codes.SUCCESS, pulled.remark
        # served records name the remoting address as their store host (store_hosts), so a
        # consumer's offset message id names where VIEW_MESSAGE_BY_ID serves it
        host, port = records.decode(pulled.body).store_host
        assert f"{host}:{port}" == remoting_endpoint
        query = {"topic": topic, "key": "order-7", "maxNum": "32", "beginTimestamp": "0",
                 "endTimestamp": str(2**62)}  # fmt: skip
        by_key = rc.call(codes.QUERY_MESSAGE, query)
        assert by_key.code == codes.SUCCESS, by_key.remark
        assert by_key.body == pulled.body  # the record as stored, as a pull returns it
        assert int(by_key.ext["indexLastUpdatePhyoffset"]) >= 0
        by_uniq = rc.call(codes.QUERY_MESSAGE, {**query, "key": uniq, "_UNIQUE_KEY_QUERY": "true"})
        assert by_uniq.body == pulled.body
        missing = rc.call(codes.QUERY_MESSAGE, {**query, "key": "no-such-key"})
        assert missing.code == codes.QUERY_NOT_FOUND
        offset = _physical_offset(pulled.body)
        # the send's msgId is the offset message id (RocketMQ's), not the unique key
        stored = msgids.decode_offset_msg_id(sent.ext["msgId"])
        assert (f"{stored.host}:{stored.port}", stored.commit_offset) == (remoting_endpoint, offset)
        viewed = rc.call(codes.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
        assert viewed.code == codes.SUCCESS, viewed.remark
        assert viewed.body == pulled.body
        nowhere = rc.call(codes.VIEW_MESSAGE_BY_ID, {"offset": str(2**40)})
        assert nowhere.code == codes.SYSTEM_ERROR
