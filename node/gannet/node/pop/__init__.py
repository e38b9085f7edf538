"""Pop consumption (RocketMQ 5 ``PopMessageProcessor`` and friends): checkpoints, acks, revive,
in-memory ack matching, retry and dead-letter topics, orderly pop and long polling.

Built on :mod:`gannet.node.store`; called by the v2 gRPC service (ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) through
:class:`gannet.node.pop.service.PopBroker`, and by the admin service (revive-queue count).
Formats are specified in ``docs/formats/pop.md`` and in each module's docstring.

Modules: :mod:`checkpoints`, :mod:`acks`, :mod:`receipts`, :mod:`filtering` (pure codecs and
rules); :mod:`merging` (in-flight checkpoints, in-memory ack matching); :mod:`popping`,
:mod:`acking`, :mod:`reviving`, :mod:`retrying`, :mod:`ordering` (its state is the store's
order infos), :mod:`polling` (the services); :mod:`context`, :mod:`revive_log`, :mod:`locks`,
:mod:`config`, :mod:`errors` (shared pieces); :mod:`service` (the facade).

Decisions where Gannet differs from, or chooses within, RocketMQ:

* In-memory ack matching (``enablePopBufferMerge``) is **on** by default. A checkpoint whose
  messages are all acked within ``pop_ck_stay_buffer_time_ms`` is never written; otherwise it
  is written with the in-memory ack bits already in its ``bm``.
* Dead-lettering is done by the broker's revive path (RocketMQ leaves it to the client or the
  proxy): at most ``retryMaxTimes + 1`` deliveries, then ``%DLQ%<group>``.
* Every time is an explicit ``now_ms`` argument; threads (:meth:`service.PopBroker.start`) feed
  the wall clock, tests a virtual one.
* A receipt handle does not name its group. While its checkpoint is tracked in memory, an ack
  by another group, a second ack or an offset outside the checkpoint is refused; after a
  restart (or once evicted from the bounded table) such acks are written as ACK records, which
  revive matching makes harmless (they match no checkpoint, or set a bit already set).
"""
