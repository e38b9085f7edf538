"""The operating errors of the tier, by what a caller does about them.

- :class:`TierUnavailable` — the bucket did not answer (refused, timed out, 5xx). Retryable:
  offload waits and tries again later; a read of an offloaded offset fails with it and the
  client retries. Writes at the head never wait on it.
- :class:`TierCredentialsRejected` — the bucket answered 401/403 (wrong key or secret, no
  permission). Not retryable until the configuration changes; reported once.
- :class:`TierRequestRejected` — any other 4xx (no such bucket, invalid name, ...): a
  configuration problem, not retryable; the message carries the server's code.
- :class:`UploadNotVerified` — the object in the bucket does not have the local file's size or
  MD5 after an upload. The local file stays; the next attempt uploads again.
- :class:`ManifestConflict` — a change would break a manifest invariant (another object recorded
  for the same base offset, an overlap). A programming or split-brain error: stop offloading.
"""

from __future__ import annotations

from gannet.node.store import errors


class TierError(errors.StoreError):
    """Base of the tier's operating errors."""


class TierUnavailable(TierError):
    """The bucket is unreachable or failing; retry later (writes at the head are unaffected)."""

    retryable = True


class TierCredentialsRejected(TierError):
    """The bucket rejected the credentials or the permission; fix the configuration."""

    retryable = False


class TierRequestRejected(TierError):
    """The bucket refused the request for a reason other than credentials (4xx)."""

    retryable = False


class UploadNotVerified(TierError):
    """The uploaded object's size or MD5 differs from the local file; the local file is kept."""

    retryable = True


class ManifestConflict(TierError):
    """A manifest change contradicts what the manifest already records."""

    retryable = False


class ManifestCorrupt(TierError):
    """Manifest bytes that do not decode into a valid manifest (the message names the problem)."""

    retryable = False


def bucket_reason(exc: BaseException) -> str | None:
    """The metric ``reason`` label of a bucket's answer (``unavailable``, ``credentials``,
    ``rejected``); None for an error that is not the bucket's. The offload loop and the reader
    add their own reasons to these."""
    if isinstance(exc, TierUnavailable):
        return "unavailable"
    if isinstance(exc, TierCredentialsRejected):
        return "credentials"
    if isinstance(exc, TierRequestRejected):
        return "rejected"
    return None
