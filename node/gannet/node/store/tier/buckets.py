"""The S3 edge of the tier: the only module that talks to the bucket.

:class:`Bucket` is the seam (a ``typing.Protocol``); :class:`S3Bucket` implements it with boto3
(pinned in ``pyproject.toml``; why boto3 is in ``docs/tiered-storage.md``) against any
S3-compatible endpoint, with path-style addressing (SeaweedFS, on-prem stores) and bounded
connect/read timeouts and retries, so a dead endpoint costs at most
``(attempts) x (connect_timeout_s + read_timeout_s)``.

Every boto3/botocore failure is translated into the tier's errors here and nowhere else:
refused/timed-out connections, 5xx and throttling answers become
:class:`errors.TierUnavailable` (retryable), 401/403 and signature errors
:class:`errors.TierCredentialsRejected`, other 4xx :class:`errors.TierRequestRejected`, and
``BadDigest`` (the server's MD5 of what it received differs from the ``Content-MD5`` we sent)
:class:`errors.UploadNotVerified`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import botocore.exceptions  # light; boto3 and botocore.config load with the first S3Bucket

from gannet.node.store.tier import errors

_CREDENTIAL_CODES = frozenset(
    {
        "401",
        "403",
        "AccessDenied",
        "Forbidden",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
    }
)
_RETRYABLE_CODES = frozenset({"RequestTimeout", "SlowDown", "Throttling", "TooManyRequests"})
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


@dataclass(frozen=True, slots=True)
class ObjectHead:
    """What a HEAD of an object says: its size and its ETag without quotes."""

    size_bytes: int
    etag: str


@dataclass(frozen=True, slots=True)
class ListedObject:
    """One key of a listing, with its size and when the bucket last wrote it."""

    key: str
    size_bytes: int
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class BucketConfig:
    """Where the tier lives and how long to wait for it."""

    endpoint_url: str
    bucket: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 10.0
    attempts_max: int = 2

    def __post_init__(self) -> None:
        if not self.endpoint_url.startswith(("http://", "https://")):
            raise ValueError(f"tier endpoint {self.endpoint_url!r} is not an http(s) URL")
        if not self.bucket:
            raise ValueError("tier bucket name is empty")
        if self.attempts_max < 1:
            raise ValueError(f"attempts_max {self.attempts_max} < 1")


class Bucket(Protocol):
    """The operations the tier needs from an object store."""

    def check_access(self) -> None: ...

    def head(self, key: str) -> ObjectHead | None: ...

    def put_file(
        self,
        key: str,
        path: Path,
        *,
        md5_digest: bytes,
        on_read: Callable[[int], None] | None = None,
    ) -> str: ...

    def get_range(self, key: str, start: int, size_bytes: int) -> bytes: ...

    def list_keys(self, prefix: str) -> list[str]: ...

    def list_objects(self, prefix: str) -> list[ListedObject]: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_bytes(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...


class _ReportingReader:
    """A file reader that reports the bytes read so far (the uploader's mid-upload boundary)."""

    def __init__(self, raw: BinaryIO, on_read: Callable[[int], None]) -> None:
        self._raw = raw
        self._on_read = on_read
        self._done_bytes = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self._done_bytes += len(chunk)
        if chunk:
            self._on_read(self._done_bytes)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        position = self._raw.seek(offset, whence)
        self._done_bytes = position
        return position

    def tell(self) -> int:
        return self._raw.tell()


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Bucket:
    """:class:`Bucket` over boto3's S3 client."""

    def __init__(self, config: BucketConfig) -> None:
        # Loaded here, not at import: boto3 costs ~0.3 s, and every `gannet` command imports
        # this module (its options), most never open a bucket (tests/test_cli_imports.py).
        import boto3  # noqa: PLC0415
        import botocore.config  # noqa: PLC0415

        self.config = config
        self._client = boto3.client(
            "s3",
            endpoint_url=config.endpoint_url,
            aws_access_key_id=config.access_key,
            aws_secret_access_key=config.secret_key,
            region_name=config.region,
            config=botocore.config.Config(
                s3={"addressing_style": "path"},
                connect_timeout=config.connect_timeout_s,
                read_timeout=config.read_timeout_s,
                retries={"max_attempts": config.attempts_max, "mode": "standard"},
                # Checksums beyond Content-MD5 are optional in S3-compatible stores.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    @contextlib.contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        where = f"{what} on {self.config.endpoint_url} bucket {self.config.bucket}"
        try:
            yield
        except botocore.exceptions.ClientError as exc:
            code = _code(exc)
            if code in _CREDENTIAL_CODES:
                raise errors.TierCredentialsRejected(
                    f"{where}: credentials or permission rejected ({code}); check the tier Secret"
                ) from exc
            if code == "BadDigest":
                raise errors.UploadNotVerified(
                    f"{where}: the server's MD5 differs ({code})"
                ) from exc
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if 400 <= status < 500 and code not in _RETRYABLE_CODES:
                raise errors.TierRequestRejected(f"{where}: {code} (HTTP {status})") from exc
            raise errors.TierUnavailable(f"{where}: {code or exc}") from exc
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise errors.TierUnavailable(f"{where}: {exc}") from exc

    def check_access(self) -> None:
        """List one key: proves endpoint, bucket and credentials (HEAD answers a bare 403)."""
        with self._translated("list"):
            self._client.list_objects_v2(Bucket=self.config.bucket, MaxKeys=1)

    def create_bucket(self) -> None:
        """Create the bucket (tests and first-time setup); an existing bucket is fine."""
        with self._translated("create bucket"):
            try:
                self._client.create_bucket(Bucket=self.config.bucket)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                    raise

    def head(self, key: str) -> ObjectHead | None:
        """Size and ETag of ``key``; ``None`` if the bucket does not hold it."""
        with self._translated(f"HEAD {key}"):
            try:
                answer = self._client.head_object(Bucket=self.config.bucket, Key=key)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise
        return ObjectHead(
            size_bytes=int(answer["ContentLength"]), etag=str(answer["ETag"]).strip('"')
        )

    def put_file(
        self,
        key: str,
        path: Path,
        *,
        md5_digest: bytes,
        on_read: Callable[[int], None] | None = None,
    ) -> str:
        """Upload ``path`` as ``key`` in one PUT with ``Content-MD5`` (the server rejects a body
        whose MD5 differs); return the ETag. ``on_read`` hears the bytes read so far."""
        # Opened outside the translation: a local file error is not a bucket outage.
        with path.open("rb") as raw, self._translated(f"PUT {key}"):
            body: BinaryIO | _ReportingReader = (
                raw if on_read is None else _ReportingReader(raw, on_read)
            )
            answer = self._client.put_object(
                Bucket=self.config.bucket,
                Key=key,
                Body=body,
                ContentLength=path.stat().st_size,
                ContentMD5=base64.b64encode(md5_digest).decode(),
                Metadata={"gannet-md5": md5_digest.hex()},
            )
        return str(answer["ETag"]).strip('"')

    def get_range(self, key: str, start: int, size_bytes: int) -> bytes:
        """Bytes ``[start, start + size_bytes)`` of ``key`` (one ranged GET)."""
        if start < 0 or size_bytes <= 0:
            raise ValueError(f"bad range start={start} size_bytes={size_bytes}")
        with self._translated(f"GET {key} bytes={start}-{start + size_bytes - 1}"):
            answer = self._client.get_object(
                Bucket=self.config.bucket, Key=key, Range=f"bytes={start}-{start + size_bytes - 1}"
            )
            data = answer["Body"].read()
        if not isinstance(data, bytes):
            raise errors.TierUnavailable(f"GET {key}: body is {type(data).__name__}, not bytes")
        return data

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, in the store's (lexicographic) order."""
        keys: list[str] = []
        with self._translated(f"list {prefix}"):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.config.bucket, Prefix=prefix):
                keys.extend(str(item["Key"]) for item in page.get("Contents", []))
        return keys

    def list_objects(self, prefix: str) -> list[ListedObject]:
        """Every object under ``prefix`` with its size and last-modified time, in key order."""
        listed: list[ListedObject] = []
        with self._translated(f"list {prefix}"):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.config.bucket, Prefix=prefix):
                listed.extend(
                    ListedObject(
                        key=str(item["Key"]),
                        size_bytes=int(item["Size"]),
                        last_modified_ms=int(item["LastModified"].timestamp() * 1000),
                    )
                    for item in page.get("Contents", [])
                )
        return listed

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write a small object (the manifest copy) in one PUT with ``Content-MD5``."""
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        with self._translated(f"PUT {key}"):
            self._client.put_object(
                Bucket=self.config.bucket,
                Key=key,
                Body=data,
                ContentLength=len(data),
                ContentMD5=base64.b64encode(digest).decode(),
            )

    def get_bytes(self, key: str) -> bytes | None:
        """The whole of a small object (the manifest copy); ``None`` if the bucket lacks it."""
        with self._translated(f"GET {key}"):
            try:
                answer = self._client.get_object(Bucket=self.config.bucket, Key=key)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise
            data = answer["Body"].read()
        if not isinstance(data, bytes):
            raise errors.TierUnavailable(f"GET {key}: body is {type(data).__name__}, not bytes")
        return data

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a key the bucket does not hold is not an error (S3)."""
        with self._translated(f"DELETE {key}"):
            self._client.delete_object(Bucket=self.config.bucket, Key=key)
