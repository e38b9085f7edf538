"""The tier manifest log of a replicated broker: manifest changes as entries of the Raft log.

Same contract as :class:`gannet.node.store.tier.uploading.FileManifestLog` (the single-node
log): :meth:`RaftManifestLog.propose` returns the manifest once the change is committed and
applied, :meth:`RaftManifestLog.current` reads the applied manifest. Here a change is a
``tier.change`` record of the replicated config (:mod:`config_log`, byte format in
``docs/architecture.md`` and ``docs/tiered-storage.md`` §3): the leader applies it to its own
:class:`~gannet.node.store.tier.applied.AppliedManifest` and appends the record, then waits
until the record is committed by a majority and dispatched here; every other member applies it
when its dispatch reaches it. Only the leader proposes (the offload loop runs there);
elsewhere :class:`~gannet.node.replication.errors.NotLeaderError` is raised and nothing is
appended.

Called from the offload worker thread, never from the event loop (the wait would block it).
"""

from __future__ import annotations

import asyncio

from gannet.node.replication.driver import ReplicationNode
from gannet.node.store.tier import manifests


class RaftManifestLog:
    """A :class:`gannet.node.store.tier.uploading.ManifestLog` over ``node``'s Raft log."""

    def __init__(self, node: ReplicationNode, prefix: str, *, commit_timeout_s: float) -> None:
        self.node = node
        self.prefix = prefix
        self.commit_timeout_s = commit_timeout_s

    def current(self) -> manifests.Manifest:
        return self.node.config_log.tier.for_prefix(self.prefix)

    def propose(self, change: manifests.Change) -> manifests.Manifest:
        """Apply and append ``change`` on this leader, return once committed and applied.

        Raises what :meth:`ReplicationNode.commit_pending` raises (not leader, busy, commit
        uncertain) and :class:`~gannet.node.store.tier.errors.ManifestConflict` for a change
        the manifest refuses."""
        node = self.node
        future = asyncio.run_coroutine_threadsafe(self._propose(change), node.loop)
        return future.result(self.commit_timeout_s * 2 + 5)

    async def _propose(self, change: manifests.Change) -> manifests.Manifest:
        node = self.node
        node.check_leader()
        await asyncio.to_thread(node.config_log.append_tier_change, self.prefix, change)
        await node.commit_pending(self.commit_timeout_s)
        return self.current()
