"""Per-client admission: at most ``per_client_max`` requests in flight per client id.

The broker-wide cap is gRPC's ``maximum_concurrent_rpcs`` (``BrokerConfig.concurrent_rpcs_max``,
RESOURCE_EXHAUSTED beyond it); this one keeps a single client (one ``x-mq-client-id``) from
taking all of those slots. A request beyond the limit is answered ``TOO_MANY_REQUESTS`` with a
message naming the client and the limit; the official clients back off and retry it.

Invariant: the table holds only clients with at least one request in flight, so its size is
bounded by the server's concurrent-RPC cap. Long-lived Telemetry streams are not counted.

Single-threaded (the server's event loop); called by :mod:`gannet.node.api.wire`.
"""

from __future__ import annotations

from gannet.node.protocol import statuses

INFLIGHT_PER_CLIENT_MAX = 256


class InflightPerClient:
    def __init__(self, per_client_max: int = INFLIGHT_PER_CLIENT_MAX) -> None:
        if per_client_max < 1:
            raise ValueError(f"per_client_max is {per_client_max}; use 1 or more")
        self.per_client_max = per_client_max
        self._inflight: dict[str, int] = {}
        self.refused_total = 0

    def acquire(self, client_id: str) -> None:
        """Count one more request of ``client_id``; raises ``TOO_MANY_REQUESTS`` past the cap."""
        count = self._inflight.get(client_id, 0)
        if count >= self.per_client_max:
            self.refused_total += 1
            raise statuses.ApiError(
                statuses.TOO_MANY_REQUESTS,
                f"client {client_id[:128]!r} has {count} requests in flight; at most "
                f"{self.per_client_max} per client",
            )
        self._inflight[client_id] = count + 1

    def release(self, client_id: str) -> None:
        count = self._inflight.get(client_id, 0) - 1
        if count < 0:
            raise RuntimeError(f"release without acquire for client {client_id!r}")
        if count == 0:
            del self._inflight[client_id]
        else:
            self._inflight[client_id] = count

    def inflight(self, client_id: str) -> int:
        return self._inflight.get(client_id, 0)

    def __len__(self) -> int:
        return len(self._inflight)
