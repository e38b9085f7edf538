"""Every file of the repository stands on its own: no tracked file points at the developers'
notes beside the repository (``../shared``) or at an absolute path of the machine it was built
on. A user has neither, so what they need lives in ``docs/`` (``docs/design.md``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()
# Outside-the-repository references: the sibling notes folder and build-machine paths.
FORBIDDEN = re.compile(
    r"\.\./shared\b|(?<![\w.])/work/|(?<![\w.])/home/[a-z_][\w-]*/|(?<![\w.])/root/"
)
SKIPPED_DIRS = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__"}


def tracked_files() -> list[Path]:
    """Files under version control (git), or every file outside caches without git."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [
            p
            for p in REPO.rglob("*")
            if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(REPO).parts)
        ]
    return [REPO / name for name in out.decode().split("\0") if name]


def offending_lines(path: Path) -> list[str]:
    try:
        text = path.read_bytes()
    except FileNotFoundError:  # deleted in the work tree, not yet in the index
        return []
    if b"\0" in text[:8192]:
        return []  # binary (pictures)
    found = []
    for number, line in enumerate(text.decode("utf-8", "replace").splitlines(), 1):
        if FORBIDDEN.search(line):
            found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    return found


def test_the_pattern_catches_what_it_must() -> None:
    for bad in (
        "see ../shared/DESIGN.md",
        "(see `/work/shared/reference/operator.md` §7)",
        'File "/work/main/bench/loadgen/phases.py"',
        "/home/builder/src/gannet",
        "/root/.cache/x",
    ):
        assert FORBIDDEN.search(bad), bad
    for fine in ("/shared/store", "docs/design.md", "/var/lib/gannet", "--home-dir"):
        assert not FORBIDDEN.search(fine), fine


def test_no_tracked_file_points_outside_the_repository() -> None:
    files = [p for p in tracked_files() if p.resolve() != THIS]
    assert len(files) > 100, "the file list is implausibly short"
    found = [line for path in files for line in offending_lines(path)]
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_design_page_exists_and_is_linked() -> None:
    design = REPO / "docs" / "design.md"
    assert design.is_file()
    assert "docs/design.md" in (REPO / "README.md").read_text()
