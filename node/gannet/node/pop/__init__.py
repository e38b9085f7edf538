"""Pop consumption (RocketMQ 5 ``PopMessageProcessor`` and friends): checkpoints, acks, revive,
in-memory ack matching, retry and dead-letter topics, orderly pop and long polling.

Built on :mod:`gannet.node.store`; called by the v2 gRPC service (ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) and the admin service (revive-queue
count). Formats are specified in ``store-format.md`` §10 and in each module's docstring.
"""
