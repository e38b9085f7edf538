"""The tier's credentials file (``gannet broker run --tier-credentials-file``).

Lines of ``name = value`` in the spelling of AWS's shared credentials file, so a file made for
the AWS CLI works as is; blank lines, ``#`` or ``;`` comments and ``[section]`` headers are
ignored (one identity per file)::

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
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")) or (line.startswith("[") and line.endswith("]")):
            continue
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


def load(path: Path) -> TierCredentials:
    """Read and :func:`parse` ``path``; ``ValueError`` names an unreadable file too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    return parse(text, str(path))
