"""Small store files for the brokers that tests and e2e runs start as processes.

``gannet broker run`` preallocates its files (``posix_fallocate``): with the defaults each member
takes a 1 GiB commit-log file and a ~420 MB index file from its start, so a test of a few
groups of three took 2-6 GB of disk. The project's rule: tests and e2e use small file sizes and
remove what they create. :data:`BROKER_ARGS` are the ``broker run`` options of such a member
(``gannet cluster up`` takes the same two options); harnesses that choose their own commit-log
size (a test that counts files or rolls them) keep it and add :data:`INDEX_ARGS` only.
In-process stores use :meth:`gannet.node.store.config.StoreConfig.for_tests` instead.
"""

from __future__ import annotations

FILE_SIZE_MB = 16
"""Commit-log file size: larger than any test's traffic needs, files still roll normally."""
INDEX_HASH_SLOTS = 16_384
"""Index hash slots (entries: 4 ×): a 1.4 MB index file; a fuller index rolls to the next."""
INDEX_ARGS: tuple[str, ...] = ("--index-hash-slots", str(INDEX_HASH_SLOTS))
BROKER_ARGS: tuple[str, ...] = ("--file-size-mb", str(FILE_SIZE_MB), *INDEX_ARGS)
