"""Credentials files: access keys, secrets and grants from a file or a Secret-mounted directory.

File format (JSON shown; YAML has the same shape and needs PyYAML)::

    {"accounts": [
      {"access_key": "orders-app", "secret_key": "...",
       "allow": [{"actions": ["pub", "sub"], "topics": ["orders-*"], "groups": ["billing"]},
                 {"actions": ["admin"], "topics": ["*"], "groups": ["*"]}]}]}

A directory (a Kubernetes Secret mount) contributes every ``*.json``, ``*.yaml`` and ``*.yml``
file in it (hidden entries such as ``..data`` are skipped); an access key may appear only once
across the files. Errors name the file and the field (``accounts[0].secret_key: expected a
non-empty string``). Limits: :data:`ACCOUNTS_MAX` accounts per file, :data:`PATTERNS_MAX`
patterns per grant list.

Reload (:class:`Reloader`): a Secret rotation or an edited file is picked up while the broker
runs. :meth:`Reloader.poll` (called by the authenticator before it checks a call, so at most
once every ``interval_s``) compares a fingerprint of the files — inode, mtime in ns and size of
each file, following the ``..data`` symlinks a Secret mount swaps atomically — with the last
one; when it changed, every file is read again and the new accounts replace the old ones in one
assignment. A new set that does not load (bad JSON, a missing field, a file half-written) keeps
the old accounts and logs one ERROR naming the file and the field; the next change is tried
again.

Called by :mod:`gannet.node.broker.serving` at start (:class:`Reloader`, or :func:`load`).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gannet.node.protocol.grants import Account, Action, Grant

log = logging.getLogger(__name__)

ACCOUNTS_MAX = 10_000
RELOAD_INTERVAL_S = 2.0
PATTERNS_MAX = 1_000
SECRET_FILE_SUFFIXES = (".json", ".yaml", ".yml")


class CredentialsError(ValueError):
    """The credentials file or directory is unusable; the message names file and field."""


def files_of(path: Path) -> list[Path]:
    """The credentials files ``path`` stands for (itself, or the files of a directory)."""
    if path.is_dir():
        files = sorted(
            p
            for p in path.iterdir()
            if not p.name.startswith(".") and p.suffix in SECRET_FILE_SUFFIXES and p.is_file()
        )
        if not files:
            raise CredentialsError(
                f"{path}: no *.json, *.yaml or *.yml file (the Secret's keys become file names)"
            )
        return files
    if path.is_file():
        return [path]
    raise CredentialsError(f"{path}: no such credentials file or directory")


def load(path: Path) -> dict[str, Account]:
    """Accounts by access key from a file or a Secret-mounted directory."""
    accounts: dict[str, Account] = {}
    for file in files_of(path):
        for account in parse_accounts(_read_document(file), str(file)):
            if account.access_key in accounts:
                raise CredentialsError(f"{file}: access key {account.access_key!r} is repeated")
            accounts[account.access_key] = account
    return accounts


def _read_document(file: Path) -> object:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"{file}: cannot read: {exc}") from None
    if file.suffix in (".yaml", ".yml"):
        try:
            yaml: Any = importlib.import_module("yaml")  # only YAML credential files need it
        except ImportError:
            raise CredentialsError(
                f"{file}: reading YAML needs PyYAML (pip install PyYAML); or use JSON"
            ) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CredentialsError(f"{file}: not valid YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CredentialsError(f"{file}: not valid JSON: {exc}") from None


def parse_accounts(document: object, source: str) -> list[Account]:
    """The accounts of one parsed document; ``source`` names it in errors."""
    if not isinstance(document, dict) or not isinstance(document.get("accounts"), list):
        raise CredentialsError(f"{source}: expected an object with an 'accounts' list")
    items: list[Any] = document["accounts"]
    if len(items) > ACCOUNTS_MAX:
        raise CredentialsError(f"{source}: {len(items)} accounts; at most {ACCOUNTS_MAX}")
    return [_parse_account(item, f"{source}: accounts[{i}]") for i, item in enumerate(items)]


def _parse_account(item: object, where: str) -> Account:
    if not isinstance(item, dict):
        raise CredentialsError(f"{where}: expected an object")
    access_key = _text(item, "access_key", where)
    secret_key = _text(item, "secret_key", where)
    allow = item.get("allow", [])
    if not isinstance(allow, list):
        raise CredentialsError(f"{where}.allow: expected a list of grants")
    grants = tuple(_parse_grant(g, f"{where}.allow[{i}]") for i, g in enumerate(allow))
    return Account(access_key, secret_key, grants)


def _text(item: Mapping[str, object], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CredentialsError(f"{where}.{key}: expected a non-empty string")
    return value


def _parse_grant(item: object, where: str) -> Grant:
    if not isinstance(item, dict):
        raise CredentialsError(f"{where}: expected an object")
    actions_raw = item.get("actions")
    if not isinstance(actions_raw, list) or not actions_raw:
        raise CredentialsError(f"{where}.actions: expected a non-empty list of pub, sub, admin")
    actions = set()
    for action in actions_raw:
        if action not in {a.value for a in Action}:
            raise CredentialsError(f"{where}.actions: {action!r} is not one of pub, sub, admin")
        actions.add(Action(action))
    return Grant(
        frozenset(actions),
        _patterns(item, "topics", where),
        _patterns(item, "groups", where),
    )


def _patterns(item: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
    raw = item.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise CredentialsError(f"{where}.{key}: expected a list of name patterns")
    if len(raw) > PATTERNS_MAX:
        raise CredentialsError(f"{where}.{key}: {len(raw)} patterns; at most {PATTERNS_MAX}")
    return tuple(raw)


Fingerprint = tuple[tuple[str, int, int, int], ...]


def fingerprint(path: Path) -> Fingerprint:
    """``(name, inode, mtime ns, size)`` of every credentials file of ``path`` (symlinks
    followed); a file that cannot be listed or stat'ed counts with zeros (so it differs)."""
    try:
        files = files_of(path)
    except CredentialsError:
        return ((str(path), 0, 0, 0),)
    found = []
    for file in files:
        try:
            st = os.stat(file)
        except OSError:
            found.append((file.name, 0, 0, 0))
            continue
        found.append((file.name, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(found)


class Reloader:
    """The accounts of ``path``, read again when its files change (checked at most every
    ``interval_s``). Raises :class:`CredentialsError` at construction if the first read fails.

    Invariant: :attr:`accounts` is always a complete set that loaded without error.
    """

    def __init__(
        self,
        path: Path,
        *,
        interval_s: float = RELOAD_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self._clock = clock
        self._fingerprint = fingerprint(path)
        self.accounts: dict[str, Account] = load(path)
        self._checked_at_s = clock()
        self.reloads_total = 0
        self.failures_total = 0
        self.last_error: str | None = None
        """Why the newest change was not used; None once a change loaded."""

    def poll(self) -> bool:
        """Reload if the interval passed and the files changed; True when new accounts apply."""
        now_s = self._clock()
        if now_s - self._checked_at_s < self.interval_s:
            return False
        self._checked_at_s = now_s
        seen = fingerprint(self.path)
        if seen == self._fingerprint:
            return False
        self._fingerprint = seen
        try:
            accounts = load(self.path)
        except CredentialsError as exc:
            self.failures_total += 1
            self.last_error = str(exc)
            log.error(
                "credentials %s changed but cannot be used: %s; keeping the %d access keys "
                "loaded before",
                self.path,
                exc,
                len(self.accounts),
            )
            return False
        self.accounts = accounts
        self.reloads_total += 1
        self.last_error = None
        log.warning("credentials %s reloaded: %d access keys", self.path, len(accounts))
        return True
