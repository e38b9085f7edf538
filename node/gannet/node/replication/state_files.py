"""The small files that make a node's Raft state survive a crash, in ``<store>/raft/``.

Written by :mod:`driver`, read by it at start.

``hardstate`` — term and vote, one line ``<term> <vote>`` (vote 0: none), e.g. ``7 2``.
Replaced atomically and durably: write ``hardstate.tmp``, fsync it, rename over ``hardstate``,
fsync the directory. A node never sends a message announcing a term or vote before this returns.

``leader-epoch`` — the leader-epoch list (Kafka's leader-epoch checkpoint): one line per term
that wrote bytes, ``<term> <start_offset>``, terms and offsets strictly increasing, e.g.::

    1 0
    3 10240

The file is rewritten the same atomic way whenever the list changes (a new term's first bytes,
or a truncation) and *before* the bytes of a new term are written, so every byte on disk has
an epoch; a line whose start is at or past the log end (its bytes were lost in a crash) is
ignored by the core on load.

``log-start`` — written when the log was reset to start at the leader's retention start
(``ResetLogStart``): one line ``<start_offset> <start_term>``, the term of the byte just before
the log's first byte (it was deleted, so no epoch line can tell it). Read at start only while
the commit log still begins at that offset. Same atomic replacement.
"""

from __future__ import annotations

import os
from pathlib import Path

from gannet.node.raft.epochs import Epoch
from gannet.node.raft.messages import ByteOffset, NodeId, Term
from gannet.node.raft.ready import HardState


class StateFileError(ValueError):
    """A state file that does not parse; names the file and line."""


def write_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: write temp, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class RaftStateFiles:
    """``hardstate`` and ``leader-epoch`` under one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hard_state_path = directory / "hardstate"
        self.epochs_path = directory / "leader-epoch"
        self.log_start_path = directory / "log-start"
        directory.mkdir(parents=True, exist_ok=True)

    def load_hard_state(self) -> HardState:
        if not self.hard_state_path.exists():
            return HardState()
        text = self.hard_state_path.read_text().strip()
        parts = text.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise StateFileError(f"{self.hard_state_path}: expected '<term> <vote>', got {text!r}")
        return HardState(Term(int(parts[0])), NodeId(int(parts[1])))

    def save_hard_state(self, state: HardState) -> None:
        write_durably(self.hard_state_path, f"{state.term} {state.vote}\n")

    def load_epochs(self) -> tuple[Epoch, ...]:
        if not self.epochs_path.exists():
            return ()
        epochs: list[Epoch] = []
        for number, line in enumerate(self.epochs_path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise StateFileError(
                    f"{self.epochs_path}:{number}: expected '<term> <start_offset>', got {line!r}"
                )
            epoch = Epoch(Term(int(parts[0])), ByteOffset(int(parts[1])))
            if epochs and (
                epoch.term <= epochs[-1].term or epoch.start_offset <= epochs[-1].start_offset
            ):
                raise StateFileError(
                    f"{self.epochs_path}:{number}: terms and offsets must increase ({line!r})"
                )
            epochs.append(epoch)
        return tuple(epochs)

    def save_epochs(self, epochs: tuple[Epoch, ...]) -> None:
        write_durably(self.epochs_path, "".join(f"{e.term} {e.start_offset}\n" for e in epochs))

    def load_log_start(self) -> tuple[ByteOffset, Term] | None:
        """``(start_offset, start_term)`` of the last log reset, or None."""
        if not self.log_start_path.exists():
            return None
        text = self.log_start_path.read_text().strip()
        parts = text.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise StateFileError(
                f"{self.log_start_path}: expected '<start_offset> <start_term>', got {text!r}"
            )
        return ByteOffset(int(parts[0])), Term(int(parts[1]))

    def save_log_start(self, start_offset: int, start_term: int) -> None:
        write_durably(self.log_start_path, f"{start_offset} {start_term}\n")
