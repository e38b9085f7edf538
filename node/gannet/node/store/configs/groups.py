"""Consumer-group configurations and ``<root>/config/subscriptionGroup.json``.

RocketMQ's ``SubscriptionGroupManager``. On disk (strict JSON from :mod:`fastjson`; keys in
fastjson's alphabetical order; ``subscriptionDataSet`` and unset retry-policy parts are
omitted, as fastjson omits nulls)::

    {
        "dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},
        "forbiddenTable":{},
        "subscriptionGroupTable":{
            "my-group":{
                "attributes":{},
                "brokerId":0,
                "consumeBroadcastEnable":true,
                "consumeEnable":true,
                "consumeFromMinEnable":true,
                "consumeMessageOrderly":false,
                "consumeTimeoutMinute":15,
                "groupName":"my-group",
                "groupRetryPolicy":{"type":"CUSTOMIZED"},
                "groupSysFlag":0,
                "notifyConsumerIdsChangedEnable":true,
                "retryMaxTimes":16,
                "retryQueueNums":1,
                "whichBrokerWhenConsumeSlowly":1
            }
        }
    }

``forbiddenTable`` maps group → topic → a bit mask of forbidden operations (kept, written back,
and readable through :meth:`GroupConfigManager.forbidden`). Load, persist, ``.bak`` fallback
and version rules are those of :mod:`topic_configs`. Unknown fields survive a round trip.

Called by the broker (auto-create on first use), the admin service, the Pop path (retry and
DLQ limits) and the replication apply path. Thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gannet.node.store import validation
from gannet.node.store.configs.fastjson import JsonObject, JsonValue
from gannet.node.store.configs.tables import (
    NamedConfigTable,
    json_int,
    json_str,
    json_str_map,
    now_ms,
)
from gannet.node.store.errors import MessageIllegal

SUBSCRIPTION_GROUPS_FILE_NAME = "subscriptionGroup.json"

RETRY_POLICY_CUSTOMIZED = "CUSTOMIZED"
RETRY_POLICY_EXPONENTIAL = "EXPONENTIAL"
_S_MS = 1_000
_M_MS = 60 * _S_MS
CUSTOMIZED_RETRY_DELAYS_MS = tuple(
    [1 * _S_MS, 5 * _S_MS, 10 * _S_MS, 30 * _S_MS]
    + [m * _M_MS for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)]
    + [60 * _M_MS, 120 * _M_MS]
)
"""``CustomizedRetryPolicy`` default table: 1s 5s 10s 30s 1m … 10m 20m 30m 1h 2h."""


@dataclass(frozen=True, slots=True)
class ExponentialRetryPolicy:
    """``{"initial":…,"max":…,"multiplier":…}``: delay = min(max, initial × multiplier^n)."""

    initial_ms: int = 5 * _S_MS
    max_ms: int = 120 * _M_MS
    multiplier: int = 2

    def to_json(self) -> JsonObject:
        return {"initial": self.initial_ms, "max": self.max_ms, "multiplier": self.multiplier}

    @classmethod
    def from_json(cls, value: JsonValue) -> ExponentialRetryPolicy | None:
        if not isinstance(value, dict):
            return None
        default = cls()
        return cls(
            initial_ms=json_int(value.get("initial"), default.initial_ms),
            max_ms=json_int(value.get("max"), default.max_ms),
            multiplier=json_int(value.get("multiplier"), default.multiplier),
        )


@dataclass(frozen=True, slots=True)
class CustomizedRetryPolicy:
    """``{"next":[ms, …]}``: one delay per delivery attempt."""

    next_ms: tuple[int, ...] = CUSTOMIZED_RETRY_DELAYS_MS

    def to_json(self) -> JsonObject:
        return {"next": list(self.next_ms)}

    @classmethod
    def from_json(cls, value: JsonValue) -> CustomizedRetryPolicy | None:
        if not isinstance(value, dict):
            return None
        delays = value.get("next")
        if not isinstance(delays, list):
            return cls()
        return cls(tuple(d for d in delays if isinstance(d, int) and not isinstance(d, bool)))


@dataclass(frozen=True, slots=True)
class GroupRetryPolicy:
    """``GroupRetryPolicy``: which policy applies, and its parameters when set."""

    policy_type: str = RETRY_POLICY_CUSTOMIZED
    exponential: ExponentialRetryPolicy | None = None
    customized: CustomizedRetryPolicy | None = None

    def to_json(self) -> JsonObject:
        document: JsonObject = {"type": self.policy_type}
        if self.exponential is not None:
            document["exponentialRetryPolicy"] = self.exponential.to_json()
        if self.customized is not None:
            document["customizedRetryPolicy"] = self.customized.to_json()
        return document

    @classmethod
    def from_json(cls, value: JsonValue) -> GroupRetryPolicy:
        if not isinstance(value, dict):
            return cls()
        return cls(
            policy_type=json_str(value.get("type"), RETRY_POLICY_CUSTOMIZED),
            exponential=ExponentialRetryPolicy.from_json(value.get("exponentialRetryPolicy")),
            customized=CustomizedRetryPolicy.from_json(value.get("customizedRetryPolicy")),
        )


@dataclass(frozen=True, slots=True)
class SimpleSubscriptionData:
    """One entry of ``subscriptionDataSet``: a topic and its filter."""

    topic: str
    expression_type: str = "TAG"
    expression: str = "*"
    version: int = 0

    def to_json(self) -> JsonObject:
        return {
            "expression": self.expression,
            "expressionType": self.expression_type,
            "topic": self.topic,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, value: JsonValue) -> SimpleSubscriptionData | None:
        if not isinstance(value, dict) or not isinstance(value.get("topic"), str):
            return None
        return cls(
            topic=json_str(value.get("topic"), ""),
            expression_type=json_str(value.get("expressionType"), "TAG"),
            expression=json_str(value.get("expression"), "*"),
            version=json_int(value.get("version"), 0),
        )


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group (``SubscriptionGroupConfig``), with RocketMQ's defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    group_retry_policy: GroupRetryPolicy = field(default_factory=GroupRetryPolicy)
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minutes: int = 15
    subscription_data_set: tuple[SimpleSubscriptionData, ...] | None = None
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    extra: Mapping[str, JsonValue] = field(default_factory=dict, hash=False, compare=False)
    """JSON properties this module does not model, written back unchanged."""

    def to_json(self) -> JsonObject:
        document: JsonObject = dict(self.extra)
        document.update(
            {
                "attributes": dict(self.attributes),
                "brokerId": self.broker_id,
                "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": self.consume_from_min_enable,
                "consumeMessageOrderly": self.consume_message_orderly,
                "consumeTimeoutMinute": self.consume_timeout_minutes,
                "groupName": self.group_name,
                "groupRetryPolicy": self.group_retry_policy.to_json(),
                "groupSysFlag": self.group_sys_flag,
                "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
                "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            }
        )
        if self.subscription_data_set is not None:
            document["subscriptionDataSet"] = [d.to_json() for d in self.subscription_data_set]
        return document

    @classmethod
    def from_json(cls, value: JsonValue, name: str) -> SubscriptionGroupConfig:
        """Decode one table entry; ``name`` (its table key) fills a missing ``groupName``."""
        if not isinstance(value, dict):
            raise MessageIllegal(f"group {name!r}: config is {type(value).__name__}, not object")
        d = cls(name)
        return cls(
            group_name=json_str(value.get("groupName"), name),
            consume_enable=_bool(value.get("consumeEnable"), d.consume_enable),
            consume_from_min_enable=_bool(
                value.get("consumeFromMinEnable"), d.consume_from_min_enable
            ),
            consume_broadcast_enable=_bool(
                value.get("consumeBroadcastEnable"), d.consume_broadcast_enable
            ),
            consume_message_orderly=_bool(
                value.get("consumeMessageOrderly"), d.consume_message_orderly
            ),
            retry_queue_nums=json_int(value.get("retryQueueNums"), d.retry_queue_nums),
            retry_max_times=json_int(value.get("retryMaxTimes"), d.retry_max_times),
            group_retry_policy=GroupRetryPolicy.from_json(value.get("groupRetryPolicy")),
            broker_id=json_int(value.get("brokerId"), d.broker_id),
            which_broker_when_consume_slowly=json_int(
                value.get("whichBrokerWhenConsumeSlowly"), d.which_broker_when_consume_slowly
            ),
            notify_consumer_ids_changed_enable=_bool(
                value.get("notifyConsumerIdsChangedEnable"), d.notify_consumer_ids_changed_enable
            ),
            group_sys_flag=json_int(value.get("groupSysFlag"), d.group_sys_flag),
            consume_timeout_minutes=json_int(
                value.get("consumeTimeoutMinute"), d.consume_timeout_minutes
            ),
            subscription_data_set=_subscriptions(value.get("subscriptionDataSet")),
            attributes=json_str_map(value.get("attributes")),
            extra={k: v for k, v in value.items() if k not in _GROUP_KEYS},
        )

    def check(self, *, length_max_bytes: int = validation.GROUP_NAME_BYTES_MAX) -> None:
        """Raise :class:`MessageIllegal` (or :class:`GroupNameIllegal`) for a bad config."""
        validation.validate_group(self.group_name, length_max_bytes=length_max_bytes)
        if self.retry_queue_nums < 0:
            raise MessageIllegal(
                f"group {self.group_name!r}: retryQueueNums is {self.retry_queue_nums}; use 0 "
                "or more"
            )
        if self.retry_max_times < -1:
            raise MessageIllegal(
                f"group {self.group_name!r}: retryMaxTimes is {self.retry_max_times}; use -1 "
                "or more"
            )
        if self.group_retry_policy.policy_type not in (
            RETRY_POLICY_CUSTOMIZED,
            RETRY_POLICY_EXPONENTIAL,
        ):
            raise MessageIllegal(
                f"group {self.group_name!r}: retry policy type is "
                f"{self.group_retry_policy.policy_type!r}; use CUSTOMIZED or EXPONENTIAL"
            )


_GROUP_KEYS = frozenset(SubscriptionGroupConfig("-", subscription_data_set=()).to_json())


def _subscriptions(value: JsonValue) -> tuple[SimpleSubscriptionData, ...] | None:
    if not isinstance(value, list):
        return None
    parsed = (SimpleSubscriptionData.from_json(item) for item in value)
    return tuple(item for item in parsed if item is not None)


def _bool(value: JsonValue, default: bool) -> bool:
    return value if isinstance(value, bool) else default


def _forbidden_table(value: JsonValue) -> dict[str, dict[str, int]]:
    if not isinstance(value, dict):
        return {}
    table: dict[str, dict[str, int]] = {}
    for group, topics in value.items():
        if isinstance(topics, dict):
            table[group] = {t: json_int(mask, 0) for t, mask in topics.items()}
    return table


class GroupConfigManager(NamedConfigTable[SubscriptionGroupConfig]):
    """The consumer-group table of one broker and ``<config_dir>/subscriptionGroup.json``.

    Invariant: ``_data_version`` changes whenever the groups or ``_forbidden`` change;
    ``_dirty`` is true while the file does not hold the current tables.
    """

    kind = "group"
    table_key = "subscriptionGroupTable"
    side_keys = frozenset({"forbiddenTable"})

    def __init__(self, config_dir: Path, *, clock_ms: Callable[[], int] = now_ms) -> None:
        super().__init__(config_dir / SUBSCRIPTION_GROUPS_FILE_NAME, clock_ms)
        self._forbidden: dict[str, dict[str, int]] = {}

    def _entry_from_json(self, value: JsonValue, name: str) -> SubscriptionGroupConfig:
        return SubscriptionGroupConfig.from_json(value, name)

    def _parse_side(self, document: JsonObject) -> Callable[[], None]:
        forbidden = _forbidden_table(document.get("forbiddenTable"))

        def install() -> None:
            self._forbidden = forbidden

        return install

    def _side_tables(self) -> JsonObject:
        return {
            "forbiddenTable": {
                group: dict(topics) for group, topics in self._forbidden.items() if topics
            }
        }

    def _forget(self, name: str) -> None:
        self._forbidden.pop(name, None)

    def get_or_create(self, name: str) -> SubscriptionGroupConfig:
        """The group's config, creating it with the defaults when it is new
        (``autoCreateSubscriptionGroup``)."""
        with self._lock:
            existing = self._entries.get(name)
        if existing is not None:
            return existing
        config = SubscriptionGroupConfig(name)
        self.put(config)
        return config

    def put(self, config: SubscriptionGroupConfig, *, persist: bool = True) -> None:
        """Create or replace a group after checking it; bumps the data version.

        A new group's name may have at most 120 bytes; a group already in the table (loaded
        from an older RocketMQ) may keep a name of up to 255.
        """
        with self._lock:
            known = config.group_name in self._entries
        config.check(
            length_max_bytes=validation.GROUP_NAME_LEGACY_BYTES_MAX
            if known
            else validation.GROUP_NAME_BYTES_MAX
        )
        self._put(config.group_name, config, persist=persist)

    def forbidden(self, group: str, topic: str) -> int:
        """The forbidden-operation bit mask of ``group`` on ``topic`` (0 when none)."""
        with self._lock:
            return self._forbidden.get(group, {}).get(topic, 0)

    def set_forbidden(self, group: str, topic: str, mask: int, *, persist: bool = True) -> None:
        """Replace the forbidden-operation bit mask of ``group`` on ``topic``."""
        with self._lock:
            topics = self._forbidden.setdefault(group, {})
            if topics.get(topic, 0) == mask and (mask != 0 or topic not in topics):
                return
            if mask == 0:
                topics.pop(topic, None)
            else:
                topics[topic] = mask
            self._changed()
        if persist:
            self.persist()
