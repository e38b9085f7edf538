"""topics.json, subscriptionGroup.json and consumerOffset.json (config managers)."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gannet.node.store.configs import fastjson
from gannet.node.store.configs.fastjson import DataVersion, JsonObject
from gannet.node.store.configs.groups import (
    CUSTOMIZED_RETRY_DELAYS_MS,
    CustomizedRetryPolicy,
    GroupConfigManager,
    GroupRetryPolicy,
    SimpleSubscriptionData,
    SubscriptionGroupConfig,
)
from gannet.node.store.configs.offsets import ConsumerOffsetManager
from gannet.node.store.configs.topics import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    MessageType,
    TopicConfig,
    TopicConfigManager,
    apply_attribute_changes,
    check_settable,
)
from gannet.node.store.errors import (
    CorruptionError,
    GroupNameIllegal,
    MessageIllegal,
    TopicNameIllegal,
)


def fake_clock(start_ms: int = 1_700_000_000_000):
    ticks = itertools.count(start_ms)
    return lambda: next(ticks)


def read_strict(path: Path):
    """The file must be strict JSON: the standard library parses it."""
    return json.loads(path.read_bytes())


# --- shared file protocol ---------------------------------------------------------------------


def test_read_config_file_order_and_failures(tmp_path):
    path = tmp_path / "x.json"
    bak = tmp_path / "x.json.bak"
    tmp = tmp_path / "x.json.tmp"

    assert fastjson.read_config_file(path) is None

    bak.write_text('{"from":"bak"}')
    loaded = fastjson.read_config_file(path)
    assert loaded is not None
    assert loaded.document == {"from": "bak"}
    assert not loaded.main_unusable  # a missing main file is not a broken one

    tmp.write_text('{"from":"tmp"}')
    loaded = fastjson.read_config_file(path)
    assert loaded is not None
    assert loaded.document == {"from": "tmp"}

    for broken in ["", "  \n", '{"a":', "[1,2]", "\x00\x00\x00"]:
        path.write_text(broken)
        loaded = fastjson.read_config_file(path)
        assert loaded is not None
        assert loaded.document == {"from": "bak"}  # .tmp is used only when main is missing
        assert loaded.main_unusable

    bak.unlink()
    with pytest.raises(CorruptionError, match=r"x\.json is empty or not valid JSON"):
        fastjson.read_config_file(path)


# --- topics.json ------------------------------------------------------------------------------


def test_topic_config_defaults_and_json_shape():
    config = TopicConfig("TopicTest")

    assert config.to_json() == {
        "attributes": {},
        "order": False,
        "perm": 6,
        "readQueueNums": 16,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "TopicTest",
        "topicSysFlag": 0,
        "writeQueueNums": 16,
    }
    assert config.readable
    assert config.writable
    assert config.message_type is MessageType.NORMAL


def test_topic_message_type_attribute():
    fifo = TopicConfig("t").with_message_type(MessageType.FIFO)

    assert fifo.attributes == {"message.type": "FIFO"}
    assert fifo.message_type is MessageType.FIFO
    assert fifo.accepted_message_types == {MessageType.FIFO}
    mixed = fifo.with_message_type(MessageType.MIXED)
    assert mixed.accepted_message_types == {
        MessageType.NORMAL,
        MessageType.FIFO,
        MessageType.DELAY,
        MessageType.TRANSACTION,
    }
    with pytest.raises(MessageIllegal, match="use one of NORMAL, FIFO"):
        TopicConfig("t", attributes={"message.type": "SOMETIMES"}).check()


def test_admin_attribute_changes():
    changed = apply_attribute_changes({"a": "1", "b": "2"}, {"+message.type": "DELAY", "-a": ""})

    assert changed == {"b": "2", "message.type": "DELAY"}
    with pytest.raises(MessageIllegal, match="must start with"):
        apply_attribute_changes({}, {"message.type": "FIFO"})


def test_the_tier_retention_attribute_is_whole_seconds_and_settable_by_name():
    attribute = "gannet.tier.remote.retention.s"
    assert TopicConfig("t").tier_remote_retention_s is None
    assert TopicConfig("t", attributes={attribute: "0"}).tier_remote_retention_s == 0
    assert TopicConfig("t", attributes={attribute: "86400"}).tier_remote_retention_s == 86400
    for bad in ("-1", "1.5", "", "1d", "٣"):
        with pytest.raises(MessageIllegal, match="use whole seconds, 0 or more"):
            TopicConfig("t", attributes={attribute: bad}).check()
    check_settable({f"+{attribute}": "60", f"-{attribute}": ""})
    with pytest.raises(MessageIllegal, match=r"'message\.type' cannot be set here; settable"):
        check_settable({"+message.type": "FIFO"})


def test_topic_manager_writes_rocketmq_shape_and_bumps_version(tmp_path):
    manager = TopicConfigManager(tmp_path, clock_ms=fake_clock())
    manager.put(TopicConfig("TBW102", 8, 8, PERM_INHERIT | PERM_READ | PERM_WRITE))
    manager.put(TopicConfig("TopicTest", 4, 4).with_message_type(MessageType.FIFO))

    document = read_strict(tmp_path / "topics.json")
    assert set(document) == {"dataVersion", "topicConfigTable"}
    assert set(document["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    assert document["dataVersion"]["counter"] == 2
    assert document["topicConfigTable"]["TBW102"]["perm"] == 7
    assert document["topicConfigTable"]["TopicTest"]["attributes"] == {"message.type": "FIFO"}
    assert list(document["topicConfigTable"]["TopicTest"]) == sorted(
        document["topicConfigTable"]["TopicTest"]
    )
    assert (tmp_path / "topics.json.bak").exists()

    manager.put(TopicConfig("TopicTest", 4, 4).with_message_type(MessageType.FIFO))
    assert manager.data_version.counter == 2  # no change, no new version
    assert manager.delete("TopicTest")
    assert not manager.delete("TopicTest")
    assert manager.data_version.counter == 3

    again = TopicConfigManager(tmp_path)
    assert again.load()
    assert [t.topic_name for t in again.list()] == ["TBW102"]
    assert again.data_version == manager.data_version


def test_topic_manager_refuses_bad_configs(tmp_path):
    manager = TopicConfigManager(tmp_path)

    with pytest.raises(TopicNameIllegal):
        manager.put(TopicConfig("bad topic"))
    with pytest.raises(MessageIllegal, match="writeQueueNums is -1"):
        manager.put(TopicConfig("t", write_queue_nums=-1))
    with pytest.raises(MessageIllegal, match="perm is 16"):
        manager.put(TopicConfig("t", perm=16))
    assert not (tmp_path / "topics.json").exists()


ROCKETMQ_TOPICS = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"stateVersion":0,
\t\t"timestamp":1670616895921
\t},
\t"topicConfigTable":{
\t\t"SELF_TEST_TOPIC":{
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":1,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"SELF_TEST_TOPIC",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":1
\t\t},
\t\t"orders":{
\t\t\t"attributes":{"message.type":"FIFO"},
\t\t\t"order":true,
\t\t\t"perm":6,
\t\t\t"readQueueNums":8,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"orders",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":8,
\t\t\t"futureField":{1:2}
\t\t}
\t},
\t"futureWrapperField":true
}"""


def test_topic_manager_reads_a_rocketmq_file_and_keeps_unknown_fields(tmp_path):
    (tmp_path / "topics.json").write_text(ROCKETMQ_TOPICS)
    manager = TopicConfigManager(tmp_path, clock_ms=fake_clock())

    assert manager.load()
    assert manager.data_version == DataVersion(7, 0, 1670616895921)
    self_test = manager.get("SELF_TEST_TOPIC")
    assert self_test == TopicConfig("SELF_TEST_TOPIC", 1, 1)  # 4.x file: no attributes
    orders = manager.get("orders")
    assert orders is not None
    assert orders.order
    assert orders.message_type is MessageType.FIFO
    assert "orders" in manager

    manager.put(TopicConfig("new"))
    document = read_strict(tmp_path / "topics.json")
    assert document["futureWrapperField"] is True
    assert document["topicConfigTable"]["orders"]["futureField"] == {"1": 2}
    assert document["dataVersion"]["counter"] == 8


def test_topic_manager_falls_back_to_bak_and_keeps_it_good(tmp_path):
    manager = TopicConfigManager(tmp_path)
    manager.put(TopicConfig("first"))
    manager.put(TopicConfig("second"))  # topics.json.bak now holds {first}
    (tmp_path / "topics.json").write_bytes(b'{"topicConfigTable":{"tru')  # torn main file

    recovered = TopicConfigManager(tmp_path)
    assert recovered.load()
    assert [t.topic_name for t in recovered.list()] == ["first"]

    assert recovered.persist()  # the broken main file is replaced at once
    assert read_strict(tmp_path / "topics.json")["topicConfigTable"].keys() == {"first"}
    bak = read_strict(tmp_path / "topics.json.bak")
    assert bak["topicConfigTable"].keys() == {"first"}  # not the torn file


def test_topic_manager_without_files_starts_empty(tmp_path):
    manager = TopicConfigManager(tmp_path / "config")

    assert not manager.load()
    assert manager.list() == []
    assert not manager.persist()  # nothing changed
    assert not (tmp_path / "config").exists()


# --- subscriptionGroup.json -------------------------------------------------------------------

JAVA_DEFAULT_GROUP: JsonObject = {
    "attributes": {},
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeMessageOrderly": False,
    "consumeTimeoutMinute": 15,
    "groupName": "MyGroup",
    "groupRetryPolicy": {"type": "CUSTOMIZED"},
    "groupSysFlag": 0,
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


def test_group_config_defaults_match_rocketmq():
    config = SubscriptionGroupConfig("MyGroup")

    assert config.to_json() == JAVA_DEFAULT_GROUP
    assert SubscriptionGroupConfig.from_json(JAVA_DEFAULT_GROUP, "MyGroup") == config
    assert SubscriptionGroupConfig.from_json({}, "MyGroup") == config
    assert len(CUSTOMIZED_RETRY_DELAYS_MS) == 18
    assert CUSTOMIZED_RETRY_DELAYS_MS[0] == 1_000
    assert CUSTOMIZED_RETRY_DELAYS_MS[-1] == 7_200_000


def test_group_config_optional_parts_round_trip():
    config = SubscriptionGroupConfig(
        "g",
        consume_message_orderly=True,
        group_retry_policy=GroupRetryPolicy(
            "CUSTOMIZED", customized=CustomizedRetryPolicy((1000, 2000))
        ),
        subscription_data_set=(SimpleSubscriptionData("t", "TAG", "a||b"),),
    )
    document = config.to_json()

    assert document["groupRetryPolicy"] == {
        "customizedRetryPolicy": {"next": [1000, 2000]},
        "type": "CUSTOMIZED",
    }
    assert document["subscriptionDataSet"] == [
        {"expression": "a||b", "expressionType": "TAG", "topic": "t", "version": 0}
    ]
    assert SubscriptionGroupConfig.from_json(document, "g") == config


def test_group_manager_file_shape_forbidden_table_and_reload(tmp_path):
    manager = GroupConfigManager(tmp_path, clock_ms=fake_clock())
    created = manager.get_or_create("MyGroup")
    assert created == SubscriptionGroupConfig("MyGroup")
    assert manager.get_or_create("MyGroup") is created
    manager.set_forbidden("MyGroup", "TopicTest", 4)

    document = read_strict(tmp_path / "subscriptionGroup.json")
    assert set(document) == {"dataVersion", "forbiddenTable", "subscriptionGroupTable"}
    assert document["subscriptionGroupTable"]["MyGroup"] == JAVA_DEFAULT_GROUP
    assert document["forbiddenTable"] == {"MyGroup": {"TopicTest": 4}}
    assert document["dataVersion"]["counter"] == 2

    again = GroupConfigManager(tmp_path)
    assert again.load()
    assert again.get("MyGroup") == created
    assert again.forbidden("MyGroup", "TopicTest") == 4
    assert again.forbidden("MyGroup", "Other") == 0
    assert again.delete("MyGroup")
    assert again.forbidden("MyGroup", "TopicTest") == 0
    assert read_strict(tmp_path / "subscriptionGroup.json")["subscriptionGroupTable"] == {}


def test_group_manager_refuses_bad_groups_but_keeps_legacy_long_names(tmp_path):
    manager = GroupConfigManager(tmp_path)
    with pytest.raises(GroupNameIllegal, match="at most 120"):
        manager.put(SubscriptionGroupConfig("g" * 121))
    with pytest.raises(MessageIllegal, match="retryQueueNums is -1"):
        manager.put(SubscriptionGroupConfig("g", retry_queue_nums=-1))

    legacy = "g" * 200
    table = {legacy: SubscriptionGroupConfig(legacy).to_json()}
    (tmp_path / "subscriptionGroup.json").write_text(
        json.dumps({"subscriptionGroupTable": table, "dataVersion": {"counter": 1}})
    )
    assert manager.load()
    manager.put(SubscriptionGroupConfig(legacy, retry_max_times=3))
    assert manager.get(legacy) == SubscriptionGroupConfig(legacy, retry_max_times=3)


def test_group_manager_falls_back_to_bak(tmp_path):
    manager = GroupConfigManager(tmp_path)
    manager.put(SubscriptionGroupConfig("a"))
    manager.put(SubscriptionGroupConfig("b"))
    (tmp_path / "subscriptionGroup.json").write_text("")

    recovered = GroupConfigManager(tmp_path)
    assert recovered.load()
    assert [g.group_name for g in recovered.list()] == ["a"]


# --- consumerOffset.json ----------------------------------------------------------------------

ROCKETMQ_OFFSETS = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"stateVersion":0,
\t\t"timestamp":1700000000123
\t},
\t"offsetTable":{
\t\t"%RETRY%cg@cg":{0:0
\t\t},
\t\t"TopicTest@cg":{0:5280,1:5312,2:5297,3:5303
\t\t},
\t\t"TopicTest@other":{10:7,2:9
\t\t}
\t}
}"""


def test_offsets_read_from_a_rocketmq_file_with_bare_integer_keys(tmp_path):
    (tmp_path / "consumerOffset.json").write_text(ROCKETMQ_OFFSETS)
    manager = ConsumerOffsetManager(tmp_path)

    assert manager.load()
    assert manager.data_version == DataVersion(3, 0, 1700000000123)
    assert manager.query("cg", "TopicTest", 1) == 5312
    assert manager.query("cg", "TopicTest", 9) == -1
    assert manager.query("nobody", "TopicTest", 0) == -1
    assert manager.query_all("other", "TopicTest") == {2: 9, 10: 7}
    assert manager.groups() == ["cg", "other"]
    assert manager.topics_of("cg") == ["%RETRY%cg", "TopicTest"]
    assert manager.groups_of("TopicTest") == ["cg", "other"]
    assert not manager.dirty


def test_offsets_file_is_strict_json_with_group_topic_map(tmp_path):
    manager = ConsumerOffsetManager(tmp_path, clock_ms=fake_clock())
    manager.commit("cg", "TopicTest", 10, 100)
    manager.commit("cg", "TopicTest", 2, 20)
    manager.commit("cg", "%RETRY%cg", 0, 1)
    manager.commit("other", "TopicTest", 0, 5)

    assert manager.persist()
    raw = (tmp_path / "consumerOffset.json").read_text()
    document = json.loads(raw)
    assert set(document) == {"dataVersion", "groupTopicMap", "offsetTable"}
    assert document["offsetTable"] == {
        "TopicTest@cg": {"2": 20, "10": 100},
        "%RETRY%cg@cg": {"0": 1},
        "TopicTest@other": {"0": 5},
    }
    assert document["groupTopicMap"] == {"cg": ["%RETRY%cg", "TopicTest"], "other": ["TopicTest"]}
    assert raw.index('"2":20') < raw.index('"10":100')  # queue ids in numeric order


def test_persist_only_when_dirty(tmp_path):
    manager = ConsumerOffsetManager(tmp_path)
    assert not manager.persist()
    assert not (tmp_path / "consumerOffset.json").exists()

    manager.commit("g", "t", 0, 1)
    assert manager.persist()
    assert not manager.persist()
    manager.commit("g", "t", 0, 1)  # same value: nothing to write
    assert not manager.persist()
    manager.commit("g", "t", 0, 2)
    assert manager.persist()


def test_data_version_advances_every_step_of_commits_and_on_reset(tmp_path):
    manager = ConsumerOffsetManager(tmp_path, clock_ms=fake_clock(), version_step_commits=3)
    start = manager.data_version.counter
    for offset in range(1, 6):
        manager.commit("g", "t", 0, offset)
    assert manager.data_version.counter == start + 1

    manager.reset("g", "t", 0, 0)
    assert manager.data_version.counter == start + 2
    assert manager.query("g", "t", 0) == 0


def test_remove_group_topic_and_pair(tmp_path):
    manager = ConsumerOffsetManager(tmp_path)
    for group, topic in [("g1", "t1"), ("g1", "t2"), ("g2", "t1"), ("g2", "t3")]:
        manager.commit(group, topic, 0, 1)

    assert manager.remove_topic("t1") == 2
    assert manager.groups_of("t1") == []
    assert manager.remove_group("g1") == 1
    assert manager.groups() == ["g2"]
    assert manager.remove("g2", "t3")
    assert not manager.remove("g2", "t3")
    assert manager.groups() == []

    manager.persist()
    assert read_strict(tmp_path / "consumerOffset.json")["offsetTable"] == {}


def test_commit_refuses_keys_that_would_corrupt_the_table(tmp_path):
    manager = ConsumerOffsetManager(tmp_path)
    with pytest.raises(ValueError, match="without '@'"):
        manager.commit("g@x", "t", 0, 1)
    with pytest.raises(ValueError, match="without '@'"):
        manager.commit("g", "", 0, 1)
    with pytest.raises(ValueError, match="must not be negative"):
        manager.commit("g", "t", -1, 1)
    with pytest.raises(ValueError, match="must not be negative"):
        manager.reset("g", "t", 0, -5)


def test_offsets_fall_back_to_bak_on_a_corrupt_main_file(tmp_path):
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit("g", "t", 0, 10)
    manager.persist()
    manager.commit("g", "t", 0, 20)
    manager.persist()
    (tmp_path / "consumerOffset.json").write_bytes(b"\x00" * 64)

    recovered = ConsumerOffsetManager(tmp_path)
    assert recovered.load()
    assert recovered.query("g", "t", 0) == 10
    assert recovered.dirty  # rewrites the broken main file at the next flush


def test_offsets_with_a_non_integer_queue_id_are_corruption(tmp_path):
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable":{"t@g":{"x":1}}}')

    with pytest.raises(CorruptionError, match="queue id 'x'"):
        ConsumerOffsetManager(tmp_path).load()


def test_concurrent_commits_and_persists(tmp_path):
    manager = ConsumerOffsetManager(tmp_path, version_step_commits=7)
    committers = [threading.Thread(target=_commit_many, args=(manager, f"g{n}")) for n in range(4)]
    persisters = [threading.Thread(target=_persist_many, args=(manager,)) for _ in range(2)]
    threads = committers + persisters
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    manager.persist()

    again = ConsumerOffsetManager(tmp_path)
    again.load()
    for n in range(4):
        assert again.query_all(f"g{n}", "t") == dict.fromkeys(range(4), 199)
    assert again.data_version.counter >= 4 * 200 // 7


def _commit_many(manager: ConsumerOffsetManager, group: str) -> None:
    for offset in range(200):
        for queue_id in range(4):
            manager.commit(group, "t", queue_id, offset)


def _persist_many(manager: ConsumerOffsetManager) -> None:
    for _ in range(20):
        manager.persist()


_names = st.text(alphabet="abcXYZ019%|_-", min_size=1, max_size=12)
_offset_tables = st.dictionaries(
    st.tuples(_names, _names),
    st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), min_size=1, max_size=6),
    min_size=1,
    max_size=8,
)


@settings(max_examples=50)
@given(table=_offset_tables)
def test_any_offset_table_survives_write_then_read(tmp_path_factory, table):
    config_dir = tmp_path_factory.mktemp("offsets")
    manager = ConsumerOffsetManager(config_dir)
    for (group, topic), offsets in table.items():
        for queue_id, offset in offsets.items():
            manager.commit(group, topic, queue_id, offset)
    manager.persist()

    again = ConsumerOffsetManager(config_dir)
    again.load()
    for (group, topic), offsets in table.items():
        assert again.query_all(group, topic) == offsets
    assert again.groups() == sorted({group for group, _ in table})
    assert fastjson.loads((config_dir / "consumerOffset.json").read_bytes()) == read_strict(
        config_dir / "consumerOffset.json"
    )
