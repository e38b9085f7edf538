"""Errors of the Pop path, by what the caller should answer.

* :class:`PopRequestIllegal` and subclasses — the request is wrong (bad invisible time, batch
  size, filter, receipt handle); answer with the v2 code named in each class and do not retry.
  Nothing has been written when one of them is raised.
* :class:`PopBusy` — a bounded buffer or waiter table is full; retry later (v2
  ``TOO_MANY_REQUESTS``).

Raised by :mod:`popping`, :mod:`acking`, :mod:`receipts`, :mod:`filtering`, :mod:`polling`.
"""

from __future__ import annotations

from gannet.node.store.errors import StoreError


class PopError(StoreError):
    """Base class of every Pop error."""


class PopRequestIllegal(PopError):
    """A Pop, Ack or ChangeInvisibleTime request breaks a rule; the text names it."""


class InvisibleTimeIllegal(PopRequestIllegal):
    """The invisible time is negative or above the configured maximum (v2
    ``ILLEGAL_INVISIBLE_TIME``)."""


class BatchSizeIllegal(PopRequestIllegal):
    """More than 32 (or fewer than 1) messages asked for in one pop (``INVALID_PARAMETER``)."""


class FilterExpressionIllegal(PopRequestIllegal):
    """A tag or SQL92 expression that cannot be parsed (v2 ``ILLEGAL_FILTER_EXPRESSION``)."""


class ReceiptHandleIllegal(PopRequestIllegal):
    """A receipt handle that does not parse (v2 ``ILLEGAL_RECEIPT_HANDLE``)."""


class ReceiptHandleUnknown(ReceiptHandleIllegal):
    """A well-formed handle naming no message or checkpoint this broker holds
    (v2 ``ILLEGAL_RECEIPT_HANDLE``)."""


class ReceiptHandleExpired(ReceiptHandleIllegal):
    """The handle's invisible time has elapsed: the message may already be redelivered
    (v2 ``INVALID_RECEIPT_HANDLE``)."""


class ReceiptHandleForeign(ReceiptHandleIllegal):
    """The handle belongs to a checkpoint of another consumer group (``ILLEGAL_RECEIPT_HANDLE``)."""


class AlreadyAcked(PopRequestIllegal):
    """The message of this handle was acknowledged before (v2 ``INVALID_RECEIPT_HANDLE``)."""


class UnknownTopicOrGroup(PopRequestIllegal):
    """The topic or the group does not exist, or the queue id is out of range
    (v2 ``TOPIC_NOT_FOUND`` / ``CONSUMER_GROUP_NOT_FOUND``)."""


class PopBusy(PopError):
    """A bounded structure is full (checkpoint buffer, waiters); retry later."""
