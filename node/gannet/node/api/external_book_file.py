"""Reads the external address book (:mod:`external_routes`) from its file, again when it changes.

On Kubernetes the file is a ConfigMap key mounted in the pod: the kubelet swaps it in place when
the operator changes the ConfigMap (a member added, a LoadBalancer address known), so the file is
looked at (``stat``) on every use, at most every :data:`RECHECK_S`, and parsed again when its
modification time or size changed. A book that cannot be parsed is logged and the last good one
kept; a missing file is an empty book (no client is seen as outside).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from gannet.node.api import external_routes
from gannet.node.api.external_routes import AddressBook, AddressBookError

log = logging.getLogger(__name__)

RECHECK_S = 1.0
BOOK_BYTES_MAX = 1 << 20


class BookFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._book = external_routes.EMPTY
        self._seen: tuple[int, int] | None = None
        self._checked_at = -RECHECK_S

    def book(self) -> AddressBook:
        now = time.monotonic()
        if now - self._checked_at < RECHECK_S:
            return self._book
        self._checked_at = now
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._book, self._seen = external_routes.EMPTY, None
            return self._book
        except OSError as exc:
            log.warning("external address book %s unreadable: %s", self.path, exc)
            return self._book
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return self._book
        self._seen = seen
        try:
            if stat.st_size > BOOK_BYTES_MAX:
                raise AddressBookError(f"{stat.st_size} bytes; at most {BOOK_BYTES_MAX}")
            self._book = external_routes.parse(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, AddressBookError) as exc:
            log.warning(
                "external address book %s not used (last good one kept): %s", self.path, exc
            )
            return self._book
        log.info("external address book %s: %d members", self.path, len(self._book.members))
        return self._book
