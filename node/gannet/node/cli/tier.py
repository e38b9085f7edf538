"""``gannet tier status``: a running broker's tiered storage (docs/tiered-storage.md §10).

Asks ``--endpoint`` for ``GetTierStatus`` (:mod:`gannet.node.api.tier_status`): the applied
manifest (objects, bytes, offsets) and the member's offload loop (last success, failures by
reason, the latest error, gap, credentials). A table, or ``-o json|yaml``. Exit codes
(:mod:`gannet.node.cli.exits`): 0 the tier is configured and its latest offload pass succeeded
(or none ran yet), 1 offload is failing or the broker has no tier, 4 unreachable, 5 refused.
The offload state is the member's own: the leader uploads, so ask the leader (``gannet cluster
status`` names it) for the upload side.

Registered on the ``gannet`` group by :mod:`gannet.node.cli.root`.
"""

from __future__ import annotations

from typing import Any

import click

from gannet.node.cli import output
from gannet.node.cli.calls import CALL_TIMEOUT_S, admin_call
from gannet.node.cli.exits import EXIT_CHECK_FAILED, fail
from gannet.node.cli.options import endpoint_option
from gannet.node.cli.output import emit, output_option
from gannet.node.protocol.gen import admin_pb2


def status_document(reply: admin_pb2.TierStatus) -> dict[str, Any]:
    """The ``-o json`` document of a ``GetTierStatus`` answer (None for unset offsets)."""
    if not reply.enabled:
        return {"enabled": False}
    return {
        "enabled": True,
        "endpoint": reply.endpoint,
        "bucket": reply.bucket,
        "prefix": reply.prefix,
        "manifest": {
            "objects": reply.objects,
            "bytes": reply.bytes,
            "start_offset": reply.start_offset if reply.has_objects else None,
            "end_offset": reply.end_offset if reply.has_objects else None,
            "local_start_offset": reply.local_start_offset,
        },
        "offload": {
            "leader": reply.leader,
            "passes": reply.passes_total,
            "last_success_ms": reply.last_success_ms or None,
            "failing_reason": reply.failing_reason or None,
            "last_error": reply.last_error or None,
            "failures": dict(sorted(reply.failures_total.items())),
            "gap": reply.gap,
            "credentials_rejected": reply.credentials_rejected,
            "offloaded_files": reply.offloaded_files_total,
            "offloaded_bytes": reply.offloaded_bytes_total,
            "local_deleted_files": reply.local_deleted_files_total,
        },
    }


@click.group()
def tier() -> None:
    """Tiered storage of a running broker."""


@tier.command("status")
@output_option
@endpoint_option
def tier_status(endpoint: str) -> None:
    """The broker's tier: manifest summary and offload state (exit 1 when offload fails)."""
    reply = admin_call(
        endpoint,
        lambda s: s.GetTierStatus(admin_pb2.GetTierStatusRequest(), timeout=CALL_TIMEOUT_S),
    )
    document = status_document(reply)
    if not reply.enabled:
        emit(document, "no tier: the broker runs without --tier-endpoint")
        raise SystemExit(EXIT_CHECK_FAILED)
    manifest, offload = document["manifest"], document["offload"]
    items = {
        "bucket": f"{reply.endpoint} {reply.bucket}",
        "prefix": reply.prefix,
        **{k.replace("_", " "): v for k, v in manifest.items()},
        "offloads here (leader)": offload["leader"],
        "passes": offload["passes"],
        "last success": output.time_text(reply.last_success_ms) if reply.last_success_ms else None,
        "failing": offload["failing_reason"],
        "failures": ", ".join(f"{k} {v}" for k, v in offload["failures"].items()) or None,
        "gap": offload["gap"],
        "credentials rejected": offload["credentials_rejected"],
        "offloaded files": offload["offloaded_files"],
        "offloaded bytes": offload["offloaded_bytes"],
        "deleted locally": offload["local_deleted_files"],
    }
    emit(document, output.items_table("tier", items))
    if reply.failing_reason:
        fail(f"tier offload failing: {reply.last_error}", EXIT_CHECK_FAILED)
