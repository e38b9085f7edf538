"""Fuzz the config-file readers: :func:`fastjson.loads` and the three tables built on it
(``topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``).

Contract: any bytes either parse or raise
:class:`~gannet.node.store.configs.fastjson.JsonSyntaxError`;
any JSON document (shaped like the real files, with hostile values) either loads — and the
loaded table writes back and reloads to the same document — or raises a
:class:`~gannet.node.store.errors.StoreError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gannet.node.store.configs import fastjson
from gannet.node.store.configs.groups import GroupConfigManager
from gannet.node.store.configs.offsets import ConsumerOffsetManager
from gannet.node.store.configs.tables import ConfigTable
from gannet.node.store.configs.topics import TopicConfigManager
from gannet.node.store.errors import StoreError

from .conftest import SEEDED, fuzz_settings

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, 2**63, -(2**63) - 1, 6, 16, 1024, 65536]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(["", "*", "%RETRY%x", "a" * 300, "TBW102", "\x00", "-1", "NaN"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
TOPIC_FIELDS = [
    "topicName",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "topicFilterType",
    "topicSysFlag",
    "order",
    "attributes",
]
GROUP_FIELDS = [
    "groupName",
    "consumeEnable",
    "consumeBroadcastEnable",
    "retryQueueNums",
    "retryMaxTimes",
    "brokerId",
    "whichBrokerWhenConsumeSlowly",
    "notifyConsumerIdsChangedEnable",
    "groupSysFlag",
    "consumeTimeoutMinute",
    "attributes",
    "groupRetryPolicy",
]
names = st.one_of(st.text(max_size=20), st.sampled_from(["TopicA", "G", "T@G", "%DLQ%G", ""]))


def _entries(fields: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(fields), json_values, max_size=len(fields))


version = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"timestamp": json_values, "counter": json_values, "stateVersion": json_values}
    ),
)
topic_docs = st.fixed_dictionaries(
    {"topicConfigTable": st.dictionaries(names, _entries(TOPIC_FIELDS), max_size=4)},
    optional={"dataVersion": version},
)
group_docs = st.fixed_dictionaries(
    {"subscriptionGroupTable": st.dictionaries(names, _entries(GROUP_FIELDS), max_size=4)},
    optional={"dataVersion": version, "forbiddenTable": json_values},
)
offset_docs = st.fixed_dictionaries(
    {
        "offsetTable": st.dictionaries(
            names,
            st.dictionaries(st.one_of(names, st.integers()).map(str), json_values),
            max_size=4,
        )
    },
    optional={"dataVersion": version},
)
TABLES: dict[str, tuple[Callable[[Path], ConfigTable], st.SearchStrategy[Any]]] = {
    "topics.json": (TopicConfigManager, topic_docs),
    "subscriptionGroup.json": (GroupConfigManager, group_docs),
    "consumerOffset.json": (ConsumerOffsetManager, offset_docs),
}


def _syntax_error(data: str | bytes) -> str | None:
    try:
        fastjson.loads(data)
    except fastjson.JsonSyntaxError as exc:
        return str(exc)
    return None


@SEEDED
@fuzz_settings(250)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_fastjson_loads_parses_or_names_the_offset(data: bytes) -> None:
    error = _syntax_error(data)
    assert error is None or "at offset" in error


@SEEDED
@fuzz_settings(200)
@given(st.text(alphabet='{}[]:,"0123456789-abc \\\n', max_size=60))
def test_fastjson_near_json(text: str) -> None:
    error = _syntax_error(text)
    assert error is None or "at offset" in error


def _load(make: Callable[[Path], ConfigTable], directory: Path, raw: bytes) -> None:
    table = make(directory)
    table.path.write_bytes(raw)
    try:
        table.load()
    except StoreError as exc:
        error = str(exc)
    else:
        error = ""
    if error:
        assert table.path.name in error or "offset" in error, error
        return
    written = table.to_json()
    again = make(directory)
    again.path.write_bytes(fastjson.encode(written))
    assert again.load()
    assert again.to_json() == written


@pytest.mark.parametrize("file_name", sorted(TABLES))
def test_tables_load_hostile_documents(tmp_path: Path, file_name: str) -> None:
    make, documents = TABLES[file_name]
    counter = iter(range(10**9))

    @SEEDED
    @fuzz_settings(20)
    @given(documents)
    def check(document: Any) -> None:
        directory = tmp_path / str(next(counter))
        directory.mkdir()
        _load(make, directory, json.dumps(document).encode())

    check()


@pytest.mark.parametrize("file_name", sorted(TABLES))
def test_tables_load_random_bytes(tmp_path: Path, file_name: str) -> None:
    make, _ = TABLES[file_name]
    counter = iter(range(10**9))

    @SEEDED
    @fuzz_settings(25)
    @given(st.binary(max_size=120))
    def check(raw: bytes) -> None:
        directory = tmp_path / str(next(counter))
        directory.mkdir()
        _load(make, directory, raw)

    check()
