"""Message filters of Pop and pull: tag expressions (``SubscriptionData`` of type TAG) and
SQL92 expressions (:mod:`sql_filter`).

Tag grammar (RocketMQ ``FilterAPI.buildSubscriptionData``): ``*`` or an empty expression matches
every message; otherwise the expression is split on ``||``, each part trimmed, empty parts
dropped, and a message matches when its ``TAGS`` equals one of them. The consume queue holds
only the tag's Java hash, so the store-side check compares hashes (as the broker does); a hash
collision can let a foreign tag through, which :meth:`TagFilter.matches_tag` can re-check. An
SQL92 expression (grammar and evaluation in :mod:`sql_filter`) may not be empty.

Both kinds offer the same three tests, cheapest first, so that the store scan
(:func:`gannet.node.store.queues.reading.read_queue`) reads a record only when it must:
``unit_test`` on a consume-queue unit (the tag hash; None when it cannot reject anything),
``record_test`` on a record's bytes inside the scan (SQL92: properties decoded, body never;
None for tags) and :meth:`matches_message` on a decoded message after the read (a tag-hash
collision, or a retry-topic message, which the store scan does not filter).

Pure; called by :mod:`popping`, the v2 ReceiveMessage/PullMessage handlers and the Telemetry
settings check.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from gannet.node.pop import sql_filter
from gannet.node.pop.errors import FilterExpressionIllegal
from gannet.node.store.hashing import tags_code
from gannet.node.store.log import records
from gannet.node.store.properties import LITE_TOPIC as LITE_TOPIC_PROPERTY
from gannet.node.store.queues.consume_queues import CqUnit

SUB_ALL = "*"
TAG_SEPARATOR = "||"
EXPRESSION_LENGTH_MAX_CHARS = 4096


class ExpressionType(enum.Enum):
    TAG = "TAG"
    SQL92 = "SQL92"


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed tag expression; ``tags`` is None for ``*``."""

    expression: str
    tags: frozenset[str] | None
    codes: frozenset[int] | None

    def accepts_unit(self, unit: CqUnit) -> bool:
        return self.codes is None or unit.tags_code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)

    def matches_message(self, message: records.Message) -> bool:
        return self.matches_tag(message.tags)

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    @property
    def unit_test(self) -> Callable[[CqUnit], bool] | None:
        return None if self.codes is None else self.accepts_unit

    @property
    def record_test(self) -> Callable[[bytes], bool] | None:
        return None


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled SQL92 expression (:class:`sql_filter.SqlFilter`) in the filter interface."""

    expression: str
    compiled: sql_filter.SqlFilter

    matches_all = False

    def accepts_unit(self, unit: CqUnit) -> bool:
        return self.compiled.accepts_tags_code(unit.tags_code)

    def accepts_record(self, data: bytes) -> bool:
        try:
            properties = records.decode_properties(data)
        except ValueError:
            return True  # let the full decode after the scan report a damaged record
        return self.compiled.matches(properties)

    def matches_message(self, message: records.Message) -> bool:
        return self.compiled.matches(message.properties)

    @property
    def unit_test(self) -> Callable[[CqUnit], bool] | None:
        return self.accepts_unit if self.compiled.decides_by_tags else None

    @property
    def record_test(self) -> Callable[[bytes], bool] | None:
        return self.accepts_record


@dataclass(frozen=True, slots=True)
class LiteFilter:
    """A lite consumer group's filter: messages whose ``__LITE_TOPIC`` is one of
    ``lite_topics`` (:mod:`gannet.node.api.lite_topics`)."""

    lite_topics: frozenset[str]
    expression: str = "lite"

    matches_all = False

    def accepts_record(self, data: bytes) -> bool:
        try:
            properties = records.decode_properties(data)
        except ValueError:
            return True  # let the full decode after the scan report a damaged record
        return properties.get(LITE_TOPIC_PROPERTY) in self.lite_topics

    def matches_message(self, message: records.Message) -> bool:
        return message.properties.get(LITE_TOPIC_PROPERTY) in self.lite_topics

    @property
    def unit_test(self) -> Callable[[CqUnit], bool] | None:
        return None

    @property
    def record_test(self) -> Callable[[bytes], bool] | None:
        return self.accepts_record


MessageFilter = TagFilter | SqlFilter | LiteFilter

MATCH_ALL = TagFilter(SUB_ALL, None, None)


def parse(expression: str | None, kind: ExpressionType = ExpressionType.TAG) -> MessageFilter:
    """Parse a filter expression; raises FilterExpressionIllegal naming the problem (for SQL92
    with the position of the error)."""
    text = (expression or "").strip()
    if len(text) > EXPRESSION_LENGTH_MAX_CHARS:
        raise FilterExpressionIllegal(
            f"filter expression is {len(text)} characters; at most "
            f"{EXPRESSION_LENGTH_MAX_CHARS} are allowed"
        )
    if kind is ExpressionType.SQL92:
        try:
            return SqlFilter(text, sql_filter.compile_expression(text))
        except sql_filter.SqlFilterError as exc:
            raise FilterExpressionIllegal(
                f"illegal SQL92 filter expression {text!r}: {exc}"
            ) from None
    if not text or text == SUB_ALL:
        return MATCH_ALL
    tags = frozenset(t.strip() for t in text.split(TAG_SEPARATOR) if t.strip())
    if not tags:
        raise FilterExpressionIllegal(f"filter expression {text!r} names no tag")
    if SUB_ALL in tags:
        return MATCH_ALL
    return TagFilter(text, tags, frozenset(tags_code(t) for t in tags))
