"""Tag-expression filters for Pop (``SubscriptionData`` of type TAG) and the SQL92 refusal.

Grammar (RocketMQ ``FilterAPI.buildSubscriptionData``): ``*`` or an empty expression matches
every message; otherwise the expression is split on ``||``, each part trimmed, empty parts
dropped, and a message matches when its ``TAGS`` equals one of them. The consume queue holds
only the tag's Java hash, so the store-side check compares hashes (as the broker does); a hash
collision can let a foreign tag through, which :meth:`TagFilter.matches_tag` can re-check.

SQL92 expressions are not implemented: :func:`parse` raises :class:`SqlFilterNotSupported`.

Pure; called by :mod:`popping` and by the v2 service when it validates a subscription.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gannet.node.pop.errors import FilterExpressionIllegal, SqlFilterNotSupported
from gannet.node.store.consume_queues import CqUnit
from gannet.node.store.hashing import tags_code

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

    @property
    def matches_all(self) -> bool:
        return self.tags is None


MATCH_ALL = TagFilter(SUB_ALL, None, None)


def parse(expression: str | None, kind: ExpressionType = ExpressionType.TAG) -> TagFilter:
    """Parse a filter expression; raises FilterExpressionIllegal / SqlFilterNotSupported."""
    if kind is ExpressionType.SQL92:
        raise SqlFilterNotSupported(
            "SQL92 filter expressions are not supported by this broker; "
            "use a tag expression such as 'TagA || TagB'"
        )
    text = (expression or "").strip()
    if len(text) > EXPRESSION_LENGTH_MAX_CHARS:
        raise FilterExpressionIllegal(
            f"filter expression is {len(text)} characters; at most "
            f"{EXPRESSION_LENGTH_MAX_CHARS} are allowed"
        )
    if not text or text == SUB_ALL:
        return MATCH_ALL
    tags = frozenset(t.strip() for t in text.split(TAG_SEPARATOR) if t.strip())
    if not tags:
        raise FilterExpressionIllegal(f"filter expression {text!r} names no tag")
    if SUB_ALL in tags:
        return MATCH_ALL
    return TagFilter(text, tags, frozenset(tags_code(t) for t in tags))
