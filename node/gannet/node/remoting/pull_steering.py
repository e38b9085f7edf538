"""Which member a remoting pull consumer should read from next: the ``suggestWhichBrokerId``
of a pull answer.

The 4.x client (rocketmq-client 4.9.8, ``PullAPIWrapper``) keeps, per queue, the broker id the
last pull answer suggested (``processPullResult`` → ``updatePullFromWhichNode``, for every
answer status) and sends the queue's next pull to that id of the queue's broker name
(``recalculatePullFromWhichNode`` → ``MQClientInstance.findBrokerAddressInSubscribe``: that
id, else id + 1, else any address of the broker name), from a route it refreshes every 30 s.
A pull that fails (connection refused or reset, timeout) is retried after 3 s
(``pullTimeDelayMillsWhenException``) *to the same id*: the suggestion changes only with a
pull answer. So a consumer reading from the leader (id 0, the only address it knows without a
suggestion) lost every pull after a leader kill until the route refresh.

Routes therefore name each member of a replicated group under its Raft node id as well
(:mod:`nameserver`: 0 is the leader, ``n`` is node ``n``, whatever the leader is — stable across
leader changes, so a suggestion made before one still names the same member after it), and a
pull answer steers the queue's consumer to a **follower**: a follower suggests itself, the
leader suggests one of the followers it heard from lately (the queue id picks which, so the
queues of a group spread over the followers), 0 (itself) when it heard from none. A leader kill
then does not touch the consumers' pulls; they only wait for the new leader's commits. What a
consumer reading from a follower that dies (or becomes leader and is then killed before its
next answer moved the consumer on) sees is measured in docs/remoting.md.

A follower asked for an offset it has not reached yet (the consumer came from the leader,
whose commits reach the followers a heartbeat later) waits for it; when it still lags after
that, the answer suggests the leader (:data:`LEADER_ID`).

Pure; :mod:`broker_requests` asks it with what the replication node knows.
"""

from __future__ import annotations

from collections.abc import Iterable

LEADER_ID = 0
"""RocketMQ's ``MixAll.MASTER_ID``: routes name the leader under it."""


def suggested_broker_id(
    me: int | None, leader: int | None, followers_heard: Iterable[int], queue_id: int
) -> int:
    """The broker id a pull answer from node ``me`` suggests for queue ``queue_id``.

    ``me`` None: not replicated (one member: 0). ``followers_heard``: the followers a leader
    heard from lately (ignored unless ``me`` leads)."""
    if me is None:
        return LEADER_ID
    if leader != me:
        return me  # a follower (also one that knows no leader: it still reads what committed)
    followers = sorted(set(followers_heard) - {me})
    if not followers:
        return LEADER_ID
    return followers[queue_id % len(followers)]
