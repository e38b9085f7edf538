"""Transactions and Pop on the remoting port over real sockets: half messages and
END_TRANSACTION (bad headers, unknown transactions, a second resolution), the broker's
CHECK_TRANSACTION_STATE to a producer that heartbeated its group, and POP_MESSAGE /
ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME / QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE
(bad headers, an expired receipt handle, a second ack)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gannet.node.broker import threads
from gannet.node.protocol.grants import Action, Kind, Need
from gannet.node.remoting import acl, codes, messages
from gannet.node.remoting.codec import Command
from gannet.node.store import msgids
from gannet.node.store.log import records
from gannet.node.transactions.book import CheckLimits

from .client import RawClient

pytestmark = pytest.mark.timeout(120)
_names = iter(range(1_000_000))
ILLEGAL_INVISIBLE_MS = 1_000  # below the 10 s a pop's invisible time needs (as over gRPC)


def name(kind: str) -> str:
    return f"RemTx{kind}{next(_names)}"


def send(
    rc: RawClient,
    topic: str,
    body: bytes,
    *,
    half: bool = False,
    group: str = "PG",
    queue_id: int = 0,
    **props: str,
) -> Command:
    properties = {"UNIQ_KEY": messages.new_message_id(), "WAIT": "true", **props}
    if half:
        properties.update({"TRAN_MSG": "true", "PGROUP": group})
    ext = {
        "a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
        "f": "4" if half else "0",
        "g": "1700000000000", "h": "0", "i": messages.format_properties(properties), "j": "0",
        "k": "false", "m": "false",
    }  # fmt: skip
    return rc.call(codes.SEND_MESSAGE_V2, ext, body)


def end(rc: RawClient, topic: str, sent: Command, kind: int, **more: str) -> Command:
    ext = {
        "topic": topic, "producerGroup": "PG", "tranStateTableOffset": sent.ext["queueOffset"],
        "commitLogOffset": str(msgids.decode_offset_msg_id(sent.ext["msgId"]).commit_offset),
        "commitOrRollback": str(kind), "fromTransactionCheck": "false",
        "msgId": sent.ext.get("uniq", ""), "transactionId": sent.ext["transactionId"], **more,
    }  # fmt: skip
    return rc.call(codes.END_TRANSACTION, ext)


def pop(rc: RawClient, topic: str, group: str, **more: str) -> Command:
    ext = {
        "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "8",
        "invisibleTime": "20000", "pollTime": "2000", "bornTime": "0", "initMode": "0",
        "expType": "TAG", "exp": "*", **more,
    }  # fmt: skip
    return rc.call(codes.POP_MESSAGE, ext)


def popped(answer: Command) -> list[records.Message]:
    out, pos = [], 0
    while pos < len(answer.body):
        message = records.decode(answer.body, pos)
        out.append(message)
        pos += message.store_size
    return out


def handle_ext(group: str, topic: str, extra: str, **more: str) -> dict[str, str]:
    parts = extra.split(" ")
    return {
        "consumerGroup": group, "topic": topic, "queueId": parts[6], "extraInfo": extra,
        "offset": parts[7], **more,
    }  # fmt: skip


def keys_in(broker: threads.BrokerThread, topic: str, wanted: list[str] | None = None) -> list[str]:
    """The keys of ``topic``'s messages, once they are ``wanted`` (dispatch is asynchronous;
    at most 10 s), else as they are."""
    deadline = time.monotonic() + 10
    while (found := _keys(broker, topic)) != wanted and wanted is not None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return found


def _keys(broker: threads.BrokerThread, topic: str) -> list[str]:
    store = broker.broker.store
    config = store.topic_configs.get(topic)
    if config is None:
        return []
    got = []
    for queue in range(config.read_queue_nums):
        got += [records.decode(m.data) for m in store.get_messages(topic, queue, 0, 64).messages]
    return sorted(" ".join(m.keys) for m in got)


@pytest.fixture
def quick_checks(broker: threads.BrokerThread) -> Iterator[None]:
    """Checks 0.5 s after a half message is stored, again every 1 s, for this test."""
    servicer = broker.broker.messaging
    assert servicer is not None
    assert servicer.transactions is not None
    service = servicer.transactions.service
    before = service.limits
    service.limits = CheckLimits(check_after_ms=500, check_interval_ms=1_000)
    yield
    service.limits = before


# ---------------------------------------------------------------------- transactions
def test_a_half_message_is_answered_with_its_transaction_and_committed(
    broker: threads.BrokerThread, remoting_endpoint: str
) -> None:
    topic = name("C")
    with RawClient(remoting_endpoint) as rc:
        sent = send(rc, topic, b"half", half=True, KEYS="k-commit")
        assert sent.code == codes.SUCCESS
        transaction_id = sent.ext["transactionId"]
        # the transaction id is the half message's commit-log offset, and so is msgId's
        assert (
            int(transaction_id, 16) == msgids.decode_offset_msg_id(sent.ext["msgId"]).commit_offset
        )
        assert keys_in(broker, topic) == []  # invisible until committed
        assert end(rc, topic, sent, 8).code == codes.SUCCESS
        assert keys_in(broker, topic, ["k-commit"]) == ["k-commit"]
        # a second, different resolution of the same transaction is refused, naming it
        again = end(rc, topic, sent, 12)
        assert again.code != codes.SUCCESS
        assert transaction_id in (again.remark or "")
        # the same one again (a retry) is answered OK without a second copy
        assert end(rc, topic, sent, 8).code == codes.SUCCESS
        # dispatch keeps the log's order: had the retry written a copy, it would come first
        assert send(rc, topic, b"after", KEYS="k-marker").code == codes.SUCCESS
        assert keys_in(broker, topic, ["k-commit", "k-marker"]) == ["k-commit", "k-marker"]


def test_rollback_and_unknown(broker: threads.BrokerThread, remoting_endpoint: str) -> None:
    topic = name("R")
    with RawClient(remoting_endpoint) as rc:
        rolled = send(rc, topic, b"half", half=True, KEYS="k-rollback")
        unknown = send(rc, topic, b"half", half=True, KEYS="k-unknown")
        assert end(rc, topic, rolled, 12).code == codes.SUCCESS
        assert end(rc, topic, unknown, 0).code == codes.SUCCESS  # left to the check-back
        assert send(rc, topic, b"plain", half=False, KEYS="k-plain").code == codes.SUCCESS
        assert keys_in(broker, topic, ["k-plain"]) == ["k-plain"]
        # the unknown one is still open; a commit now (as from a check) delivers it
        assert end(rc, topic, unknown, 8, fromTransactionCheck="true").code == codes.SUCCESS
        assert keys_in(broker, topic, ["k-plain", "k-unknown"]) == ["k-plain", "k-unknown"]


def test_end_transaction_bad_headers_and_unknown_transactions(remoting_endpoint: str) -> None:
    topic = name("B")
    with RawClient(remoting_endpoint) as rc:
        sent = send(rc, topic, b"half", half=True, KEYS="k")
        kind = end(rc, topic, sent, 5)
        assert kind.code == codes.SYSTEM_ERROR
        assert "commitOrRollback 5" in (kind.remark or "")
        junk = end(rc, topic, sent, 8, commitOrRollback="yes")
        assert "commitOrRollback" in (junk.remark or "")
        nothing = end(rc, topic, sent, 8, transactionId="", commitLogOffset="")
        assert nothing.code == codes.SYSTEM_ERROR
        assert "names a half message" in (nothing.remark or "")
        # a transaction id that names no half message, and another topic's
        wrong = [
            {"transactionId": "00000000FFFFFFF0"},
            {"transactionId": "", "commitLogOffset": str(2**40)},
        ]
        for more in wrong:
            answer = end(rc, topic, sent, 8, **more)
            assert answer.code != codes.SUCCESS, more
            assert "half message" in (answer.remark or ""), answer.remark
        other = end(rc, name("Other"), sent, 8)
        assert other.code != codes.SUCCESS
        assert "belongs to topic" in (other.remark or "")
        assert end(rc, topic, sent, 12).code == codes.SUCCESS


def test_the_broker_checks_back_a_connected_producer_of_the_group(
    broker: threads.BrokerThread, remoting_endpoint: str, quick_checks: None
) -> None:
    topic, group = name("K"), name("PG")
    heartbeat = {"clientID": "tx-producer@1", "producerDataSet": [{"groupName": group}]}
    with RawClient(remoting_endpoint) as rc:
        assert rc.call(codes.HEART_BEAT, body=json.dumps(heartbeat).encode()).code == codes.SUCCESS
        sent = send(rc, topic, b"checked body", half=True, group=group, KEYS="k-check", TAGS="TagC")
        assert end(rc, topic, sent, 0).code == codes.SUCCESS  # UNKNOW
        deadline = time.monotonic() + 30
        while True:  # the next frame the broker sends is its check
            check = rc.read()
            if not check.is_response:
                break
            assert time.monotonic() < deadline
        assert check.code == codes.CHECK_TRANSACTION_STATE
        assert check.is_oneway
        assert check.ext["transactionId"] == sent.ext["transactionId"]
        assert check.ext["topic"] == topic
        offset = int(check.ext["commitLogOffset"])
        assert offset == int(sent.ext["transactionId"], 16)
        stored = msgids.decode_offset_msg_id(check.ext["offsetMsgId"])
        assert (f"{stored.host}:{stored.port}", stored.commit_offset) == (remoting_endpoint, offset)
        half = records.decode(check.body)  # the half message as stored, real topic restored
        assert (half.topic, half.body, half.keys, half.tags) == (
            topic, b"checked body", ["k-check"], "TagC",
        )  # fmt: skip
        assert half.properties["PGROUP"] == group
        assert check.ext["msgId"] == half.uniq_key
        answer = {
            "topic": topic, "producerGroup": group, "commitLogOffset": str(offset),
            "tranStateTableOffset": check.ext["tranStateTableOffset"], "commitOrRollback": "8",
            "fromTransactionCheck": "true",
            "msgId": check.ext["msgId"], "transactionId": check.ext["transactionId"],
        }  # fmt: skip
        assert rc.call(codes.END_TRANSACTION, answer).code == codes.SUCCESS
    assert keys_in(broker, topic, ["k-check"]) == ["k-check"]


def test_a_check_reaches_the_connection_that_sent_the_half_message_before_any_heartbeat(
    broker: threads.BrokerThread, remoting_endpoint: str, quick_checks: None
) -> None:
    """The C++ client heartbeats a producer first 30 s after its start: the half message's
    send tells the broker where the group's checks go."""
    topic, group = name("H"), name("PGH")
    with RawClient(remoting_endpoint) as rc:
        sent = send(rc, topic, b"unheard", half=True, group=group, KEYS="k-unheard")
        assert sent.code == codes.SUCCESS, sent.remark
        assert end(rc, topic, sent, 0).code == codes.SUCCESS  # UNKNOW
        deadline = time.monotonic() + 30
        while True:  # the next frame the broker sends is its check
            check = rc.read()
            if not check.is_response:
                break
            assert time.monotonic() < deadline
        assert check.code == codes.CHECK_TRANSACTION_STATE
        assert check.ext["transactionId"] == sent.ext["transactionId"]
        assert records.decode(check.body).properties["PGROUP"] == group
        rolled = end(rc, topic, sent, 12, fromTransactionCheck="1")  # as the C++ client writes
        assert rolled.code == codes.SUCCESS, rolled.remark


# ---------------------------------------------------------------------- pop
def test_pop_ack_and_change_invisible_time(remoting_endpoint: str) -> None:
    topic, group = name("P"), name("PopG")
    with RawClient(remoting_endpoint) as rc:
        assert send(rc, topic, b"one", KEYS="k1", TAGS="TagA").code == codes.SUCCESS
        assert send(rc, topic, b"two", KEYS="k2", TAGS="TagB").code == codes.SUCCESS
        got = pop(rc, topic, group, exp="TagA")
        assert got.code == codes.SUCCESS, got.remark
        [message] = popped(got)
        assert (message.topic, message.body, message.tags) == (topic, b"one", "TagA")
        # its store host is the remoting address, as a pull's records name it (store_hosts)
        assert f"{message.store_host[0]}:{message.store_host[1]}" == remoting_endpoint
        extra = message.properties["POP_CK"]  # the receipt handle: ExtraInfoUtil's fields
        fields = extra.split(" ")
        assert len(fields) == 9
        assert fields[1] == got.ext["popTime"]
        assert fields[2] == got.ext["invisibleTime"] == "20000"
        assert int(fields[7]) == message.queue_offset
        assert got.ext["msgOffsetInfo"] == f"0 {fields[6]} {fields[7]}"
        # nothing else of TagA: the long poll ends empty
        assert pop(rc, topic, group, exp="TagA", pollTime="200").code == codes.PULL_NOT_FOUND
        before_ms = time.time_ns() // 1_000_000
        changed = rc.call(
            codes.CHANGE_MESSAGE_INVISIBLETIME, handle_ext(group, topic, extra, invisibleTime="0")
        )
        after_ms = time.time_ns() // 1_000_000
        assert changed.code == codes.SUCCESS, changed.remark
        # the new checkpoint: the old pop time + 1 ms, visible again 0 ms after the change
        # (docs/formats/pop.md §4); 100 ms for the broker's steady clock against this one
        assert changed.ext["popTime"] == str(int(fields[1]) + 1)
        visible_ms = int(changed.ext["popTime"]) + int(changed.ext["invisibleTime"])
        assert before_ms - 100 <= visible_ms <= after_ms + 100
        deadline = time.monotonic() + 30
        while (again := pop(rc, topic, group, exp="TagA")).code != codes.SUCCESS:
            assert again.code == codes.PULL_NOT_FOUND  # until it is revived
            assert time.monotonic() < deadline, "not visible again within 30 s"
        [same] = popped(again)
        assert same.body == b"one"
        assert same.reconsume_times == 1
        new_extra = same.properties["POP_CK"]
        acked = rc.call(codes.ACK_MESSAGE, handle_ext(group, f"%RETRY%{group}_{topic}", new_extra))
        assert acked.code == codes.SUCCESS, acked.remark
        twice = rc.call(codes.ACK_MESSAGE, handle_ext(group, topic, new_extra))
        assert twice.code != codes.SUCCESS
        assert "already acked" in (twice.remark or "")


def test_ack_of_an_expired_handle_and_bad_pop_headers(remoting_endpoint: str) -> None:
    topic, group = name("E"), name("PopE")
    with RawClient(remoting_endpoint) as rc:
        assert send(rc, topic, b"x", KEYS="k").code == codes.SUCCESS
        got = pop(rc, topic, group)
        extra = popped(got)[0].properties["POP_CK"]
        fields = extra.split(" ")
        fields[1] = str(int(fields[1]) - 3_600_000)  # popped an hour ago: long visible again
        expired = " ".join(fields)
        for code in (codes.ACK_MESSAGE, codes.CHANGE_MESSAGE_INVISIBLETIME):
            answer = rc.call(code, handle_ext(group, topic, expired, invisibleTime="1000"))
            assert answer.code != codes.SUCCESS
            assert "expired" in (answer.remark or "")
        junk = rc.call(codes.ACK_MESSAGE, handle_ext(group, topic, extra, extraInfo="1 2 x"))
        assert junk.code == codes.SYSTEM_ERROR
        assert "receipt handle" in (junk.remark or "")
        bad: list[tuple[dict[str, str], str]] = [
            ({"consumerGroup": ""}, "consumerGroup is missing"),
            ({"invisibleTime": "soon"}, "invisibleTime"),
            ({"expType": "REGEX"}, "neither TAG nor SQL92"),
            ({"invisibleTime": str(ILLEGAL_INVISIBLE_MS)}, "invisible"),
            ({"exp": "a >"}, ""),  # an SQL92 error is named by the filter
        ]
        for more, why in bad:
            sql = {"expType": "SQL92"} if more.get("exp") else {}
            answer = pop(rc, topic, group, **more, **sql)
            assert answer.code != codes.SUCCESS, more
            assert why in (answer.remark or ""), (more, answer.remark)
        assert rc.call(codes.ACK_MESSAGE, handle_ext(group, topic, extra)).code == codes.SUCCESS


def test_pop_of_one_queue(remoting_endpoint: str) -> None:
    """queueId other than -1 pops that queue only (the others stay for the next pop); a queue
    the topic lacks is refused, naming it."""
    topic, group = name("Q"), name("PopQ")
    with RawClient(remoting_endpoint) as rc:
        for queue_id, body in ((0, b"in 0"), (1, b"in 1"), (1, b"in 1 too")):
            assert send(rc, topic, body, queue_id=queue_id).code == codes.SUCCESS
        got = pop(rc, topic, group, queueId="1")
        assert got.code == codes.SUCCESS, got.remark
        assert sorted(m.body for m in popped(got)) == [b"in 1", b"in 1 too"]
        assert {m.queue_id for m in popped(got)} == {1}
        rest = pop(rc, topic, group)
        assert [m.body for m in popped(rest)] == [b"in 0"]
        missing = pop(rc, topic, group, queueId="99", pollTime="0")
        assert missing.code != codes.SUCCESS
        assert "queue 99" in (missing.remark or "")


def test_query_assignment_in_pop_and_pull_modes(remoting_endpoint: str) -> None:
    topic, group = name("A"), name("AsG")
    with RawClient(remoting_endpoint) as rc:
        assert send(rc, topic, b"x").code == codes.SUCCESS
        query = {
            "topic": topic,
            "consumerGroup": group,
            "clientId": "c1",
            "messageModel": "CLUSTERING",
        }

        def assigned() -> Any:
            answer = rc.call(codes.QUERY_ASSIGNMENT, body=json.dumps(query).encode())
            assert answer.code == codes.SUCCESS, answer.remark
            return json.loads(answer.body)["messageQueueAssignments"]

        [only] = assigned()  # POP by default: every queue of the broker, queue id -1
        assert only["mode"] == "POP"
        assert only["messageQueue"]["queueId"] == -1
        assert only["messageQueue"]["topic"] == topic
        mode = {"topic": topic, "consumerGroup": group, "mode": "PULL", "popShareQueueNum": 0}
        set_mode = rc.call(codes.SET_MESSAGE_REQUEST_MODE, body=json.dumps(mode).encode())
        assert set_mode.code == codes.SUCCESS
        for client in ("c1", "c2"):
            beat = {
                "clientID": client,
                "consumerDataSet": [{"groupName": group, "subscriptionDataSet": []}],
            }
            assert rc.call(codes.HEART_BEAT, body=json.dumps(beat).encode()).code == codes.SUCCESS
        mine = assigned()
        assert {a["mode"] for a in mine} == {"PULL"}
        assert len(mine) == 4  # half of the topic's 8 queues
        query["clientId"] = "c2"
        theirs = assigned()
        ids = sorted(a["messageQueue"]["queueId"] for a in mine + theirs)
        assert ids == list(range(8))
        wrong = rc.call(
            codes.SET_MESSAGE_REQUEST_MODE, body=json.dumps({**mode, "mode": "PUSH"}).encode()
        )
        assert wrong.code == codes.SYSTEM_ERROR
        assert "neither PULL nor POP" in (wrong.remark or "")
        junk = rc.call(codes.QUERY_ASSIGNMENT, body=b"[")
        assert "not JSON" in (junk.remark or "")


def test_transactions_and_pop_need_what_their_v2_counterparts_need() -> None:
    def needs(code: int, ext: dict[str, str], body: bytes = b"") -> list[Need]:
        return acl.needs(Command(code, ext=ext, body=body))

    assert needs(codes.END_TRANSACTION, {"topic": "T"}) == [Need(Action.PUB, Kind.TOPIC, "T")]
    assert needs(codes.END_TRANSACTION, {}) == []  # 4.x: a valid signature (acl docstring)
    sub_both = [Need(Action.SUB, Kind.TOPIC, "T"), Need(Action.SUB, Kind.GROUP, "G")]
    assert needs(codes.POP_MESSAGE, {"topic": "T", "consumerGroup": "G"}) == sub_both
    for code in (codes.ACK_MESSAGE, codes.CHANGE_MESSAGE_INVISIBLETIME):
        ext = {"topic": "%RETRY%G_T", "consumerGroup": "G"}
        assert needs(code, ext) == [Need(Action.SUB, Kind.GROUP, "G")]
    body = json.dumps({"topic": "T", "consumerGroup": "G"}).encode()
    assert needs(codes.QUERY_ASSIGNMENT, {}, body) == sub_both
    # setting a group's request mode is mqadmin's: admin on the broker
    assert needs(codes.SET_MESSAGE_REQUEST_MODE, {}, body) == [Need(Action.ADMIN, Kind.CLUSTER, "")]
