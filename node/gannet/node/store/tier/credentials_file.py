"""The tier's credentials file (``gannet broker run --tier-credentials-file``).

Lines of ``name = value`` in the spelling of AWS's shared credentials file, so a file made for
the AWS CLI works as is (``~/.aws/credentials``); blank lines and ``#`` or ``;`` comments are
skipped. Of ``[section]`` profiles, ``[default]`` is taken, or the only one; lines before any
header count as the default profile::

    aws_access_key_id = AKIA...
    aws_secret_access_key = ...

:func:`parse` is pure (every problem named, the secret never echoed); :func:`load` reads the
file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY_NAME = "aws_access_key_id"
SECRET_KEY_NAME = "aws_secret_access_key"


@dataclass(frozen=True, slots=True)
class TierCredentials:
    access_key: str
    secret_key: str = field(repr=False)


def parse(text: str, where: str) -> TierCredentials:
    """The credentials in ``text``; ``ValueError`` naming ``where`` and the line otherwise."""
    values: dict[str, str] = {}
    for number, line in _profile_lines(text, where):
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in (ACCESS_KEY_NAME, SECRET_KEY_NAME):
            raise ValueError(
                f"{where} line {number}: expected '{ACCESS_KEY_NAME} = ...' or"
                f" '{SECRET_KEY_NAME} = ...', found {name!r}"
            )
        if not value:
            raise ValueError(f"{where} line {number}: {name} is empty")
        if name in values:
            raise ValueError(f"{where} line {number}: {name} is given twice")
        values[name] = value
    missing = [n for n in (ACCESS_KEY_NAME, SECRET_KEY_NAME) if n not in values]
    if missing:
        raise ValueError(f"{where}: {' and '.join(missing)} missing")
    return TierCredentials(values[ACCESS_KEY_NAME], values[SECRET_KEY_NAME])


def _profile_lines(text: str, where: str) -> list[tuple[int, str]]:
    """The numbered lines of the profile :func:`parse` reads (module docstring)."""
    profiles: dict[str | None, list[tuple[int, str]]] = {None: []}
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            profiles.setdefault(current, [])
            continue
        profiles[current].append((number, line))
    named = [name for name in profiles if name is not None]
    if "default" in profiles:
        return profiles[None] + profiles["default"]
    if len(named) <= 1:
        return profiles[None] + (profiles[named[0]] if named else [])
    raise ValueError(f"{where}: several profiles {named} and no [default]: which one is meant?")


def load(path: Path) -> TierCredentials:
    """Read and :func:`parse` ``path``; ``ValueError`` names an unreadable file too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    return parse(text, str(path))
