"""Object keys of the tier: RocketMQ file names under a per-broker-group prefix.

An offloaded commit-log file keeps its RocketMQ name (the 20-digit decimal start offset,
``UtilAll.offset2FileName``) so that a human listing the bucket, ``aws s3 ls`` or ``gannet
store`` sees the same names as in a store directory::

    <prefix>/commitlog/00000000001073741824
    <prefix>/manifest.json          (the manifest's copy, written by the leader)

``<prefix>`` is chosen by the operator, one per broker group (for example
``gannet/<cluster>/<group>``); it has no leading or trailing ``/`` and no empty segment, so
keys never contain ``//``. Pure functions; the tests hold ``parse_commitlog_key`` as the inverse
of ``commitlog_key``.
"""

from __future__ import annotations

import re

COMMITLOG_DIR = "commitlog"
MANIFEST_NAME = "manifest.json"
_FILE_NAME = re.compile(r"[0-9]{20}")
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9._=-]+")


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a valid key prefix, else raise ``ValueError`` naming why."""
    if not prefix:
        raise ValueError(
            "tier prefix is empty: give one prefix per broker group, e.g. gannet/c1/g0"
        )
    for segment in prefix.split("/"):
        if not _PREFIX_SEGMENT.fullmatch(segment):
            raise ValueError(
                f"tier prefix {prefix!r} has segment {segment!r}: segments are non-empty and use"
                " only letters, digits and . _ = -"
            )
    return prefix


def commitlog_file_name(base_offset: int) -> str:
    """The RocketMQ name of the commit-log file that starts at ``base_offset``."""
    if not 0 <= base_offset < 10**20:
        raise ValueError(f"commit-log base offset {base_offset} is outside 0..10^20-1")
    return f"{base_offset:020d}"


def parse_commitlog_file_name(name: str) -> int:
    """The base offset of a commit-log file name; ``ValueError`` if it is not 20 digits."""
    if not _FILE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a commit-log file name (20 decimal digits)")
    return int(name)


def commitlog_key(prefix: str, base_offset: int) -> str:
    """The object key of the commit-log file that starts at ``base_offset``."""
    return f"{check_prefix(prefix)}/{COMMITLOG_DIR}/{commitlog_file_name(base_offset)}"


def manifest_key(prefix: str) -> str:
    """The key of the manifest's copy in the bucket (``docs/tiered-storage.md`` §3)."""
    return f"{check_prefix(prefix)}/{MANIFEST_NAME}"


def commitlog_dir_key(prefix: str) -> str:
    """The key prefix every commit-log object of ``prefix`` starts with (ends with ``/``)."""
    return f"{check_prefix(prefix)}/{COMMITLOG_DIR}/"


def parse_commitlog_key(prefix: str, key: str) -> int:
    """The base offset of an object key made by :func:`commitlog_key` with ``prefix``."""
    head = f"{check_prefix(prefix)}/{COMMITLOG_DIR}/"
    if not key.startswith(head):
        raise ValueError(f"object key {key!r} is not under {head!r}")
    return parse_commitlog_file_name(key[len(head) :])
