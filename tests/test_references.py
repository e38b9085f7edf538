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


# --- citations of markdown files ------------------------------------------------------------
# A path or bare file name ending in ``.md``: ``docs/formats/pop.md``, ``../store.md``,
# ``store-format.md``. Not part of a longer name (``x.mdx``), nor the tail of a glob (``*.md``)
# or a template (``{name}.md``). URLs are blanked out before matching: they cite other sites.
MD_CITATION = re.compile(r"(?<![\w./*{}-])((?:\.{1,2}/)*(?:[\w-][\w.-]*/)*[\w-][\w.-]*\.md)\b")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
CITING_SOURCE_ROOTS = ("node", "operator", "pipeline", "tests", "bench", "e2e")


def md_citations(text: str) -> list[str]:
    """The ``.md`` files a text cites, in order, URLs excluded."""
    return MD_CITATION.findall(URL.sub(" ", text))


def citing_files(files: list[Path]) -> list[Path]:
    """Python sources of the code and test roots, and every markdown file."""
    found = []
    for path in files:
        rel = path.relative_to(REPO)
        if path.suffix == ".md" or (path.suffix == ".py" and rel.parts[0] in CITING_SOURCE_ROOTS):
            found.append(path)
    return found


def cited_file_exists(cited: str, citing: Path, names: set[str]) -> bool:
    """A path resolves from the repository root or from the citing file's folder; a bare name
    also matches any tracked file of that name."""
    for base in (REPO, citing.parent):
        if (base / cited).is_file():
            return True
    return "/" not in cited and cited in names


def missing_citations(path: Path, names: set[str]) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:  # deleted in the work tree, not yet in the index
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for cited in md_citations(line):
            if not cited_file_exists(cited, path, names):
                found.append(f"{path.relative_to(REPO)}:{number}: {cited}")
    return found


def test_the_citation_pattern_catches_what_it_must() -> None:
    cases = {
        "Byte-compatible with RocketMQ 5 (``reference/store-format.md`` §3).": [
            "reference/store-format.md"
        ],
        '"""Pop checkpoints (``PopCheckPoint``, store-format.md §10.4): the JSON body."""': [
            "store-format.md"
        ],
        "# per performance.md §5": ["performance.md"],
        "see [the store](../store.md) and docs/formats/pop.md §2": [
            "../store.md",
            "docs/formats/pop.md",
        ],
        "https://github.com/apache/rocketmq-clients/blob/master/README.md": [],
        "glob *.md, template {name}.md, suffix .md, x.mdx": [],
    }
    for text, expected in cases.items():
        assert md_citations(text) == expected, text
    names = {"design.md"}
    assert not cited_file_exists("store-format.md", THIS, names)
    assert not cited_file_exists("docs/no-such-page.md", THIS, names)
    assert not cited_file_exists("reference/design.md", THIS, names)  # a path must resolve
    assert cited_file_exists("design.md", THIS, names)  # a bare name matches a tracked file
    assert cited_file_exists("docs/design.md", THIS, names)
    assert cited_file_exists("../docs/store.md", THIS, names)  # relative to the citing file


def test_every_cited_markdown_file_exists() -> None:
    files = [p for p in tracked_files() if p.resolve() != THIS]
    names = {p.name for p in files}
    citing = citing_files(files)
    assert len(citing) > 100, "the list of citing files is implausibly short"
    missing = [line for path in citing for line in missing_citations(path, names)]
    assert not missing, "citations of markdown files that are not in the repository:\n" + (
        "\n".join(missing)
    )


# --- section citations ----------------------------------------------------------------------
# A ``§`` number means nothing without the document it numbers. The sources and tests once cited
# bare numbers (``§10.11``, ``(§4.1)``) of developers' notes a reader does not have; a citation
# now names its source near the number: a ``.md`` page of the repository (``docs/formats/pop.md``
# §6) or a named outside work (Raft §5.4.2, Ongaro's dissertation §4.2.2, an RFC, KIP or RIP).
SECTION = re.compile(r"§\s*\d")
SECTION_SOURCE = re.compile(r"\.md\b|\b(?:Raft|Ongaro|[Dd]issertation|[Pp]aper|RFC|KIP|RIP)\b")
SECTION_CONTEXT_CHARS = 120
SECTION_CITING_ROOTS = ("node", "operator", "pipeline", "tests", "bench", "e2e")


def bare_sections(text: str) -> list[int]:
    """Line numbers (1-based) of ``§`` numbers whose line, or the text just before that line,
    names no source."""
    found = []
    for match in SECTION.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        window = text[
            max(0, line_start - SECTION_CONTEXT_CHARS) : len(text) if line_end < 0 else line_end
        ]
        if not SECTION_SOURCE.search(window):
            found.append(text.count("\n", 0, match.start()) + 1)
    return found


# A ``.md`` citation followed by its section numbers: ``docs/formats/pop.md`` §3–§4,
# ``queues.md`` §1.3, §2.4, ``commitlog.md`` §3 and §5. Each number must be a heading of the page
# (``## 3. …``, ``### 1.3 …``).
CITED_SECTIONS = re.compile(
    r"(?<![\w./*{}-])((?:\.{1,2}/)*(?:[\w-][\w.-]*/)*[\w-][\w.-]*\.md)`*\)?\s*"
    r"(§\s*\d+(?:\.\d+)*(?:\s*(?:–|-|,|and)\s*§\s*\d+(?:\.\d+)*)*)"
)
SECTION_NUMBER = re.compile(r"§\s*(\d+(?:\.\d+)*)")


def cited_sections(text: str) -> list[tuple[str, str]]:
    """(page, section number) pairs a text cites."""
    return [
        (match.group(1), number)
        for match in CITED_SECTIONS.finditer(URL.sub(" ", text))
        for number in SECTION_NUMBER.findall(match.group(2))
    ]


def has_section(page: Path, number: str) -> bool:
    heading = re.compile(rf"^#+ {re.escape(number)}\.?\s", re.MULTILINE)
    return bool(heading.search(page.read_text(encoding="utf-8")))


def test_the_section_patterns_catch_what_they_must() -> None:
    for bad in (
        '"""Retry and dead-letter messages (send-back to DLQ, §10.11)."""',
        "A topic is published as the proxy does (§4.1):",
        "# --- routing (§11.1) ---",
        "callers must not catch (style guide §9 rule 5).",
        "Orderly (FIFO) Pop (RocketMQ §10.10).",
        "Statuses (§12): no consume queue",
    ):
        assert bare_sections(bad) == [1], bad
    for fine in (
        "Pop checkpoints (``PopCheckPoint``, ``docs/formats/pop.md`` §2): the JSON body.",
        "(``docs/formats/queues.md`` §1.3, §2.4). Dispatch takes",
        "# Raft §5.4.2: count replicas only for bytes of the current term.",
        "(Ongaro's dissertation §4.2.2). A joining node never campaigns.",
        "RFC 7540 §6.9, KIP-98 §3, RIP-31 §2",
        "no section sign at all, 10.11",
    ):
        assert bare_sections(fine) == [], fine
    # The source may end the line before: a citation wrapped over two lines.
    wrapped = "(Ongaro, *Consensus: Bridging Theory and\nPractice*, §4.1). We chose it"
    assert bare_sections(wrapped) == []
    far = "see docs/formats/pop.md\n" + "x" * 200 + "\nand §3"
    assert bare_sections(far) == [3]
    assert cited_sections("``docs/formats/pop.md`` §3–§4, ``docs/protocol.md`` §7") == [
        ("docs/formats/pop.md", "3"),
        ("docs/formats/pop.md", "4"),
        ("docs/protocol.md", "7"),
    ]
    assert cited_sections("from ``docs/formats/commitlog.md`` §3 and §5, not") == [
        ("docs/formats/commitlog.md", "3"),
        ("docs/formats/commitlog.md", "5"),
    ]
    assert cited_sections("[configs.md](configs.md) §5; queues.md §1.3") == [
        ("configs.md", "5"),
        ("queues.md", "1.3"),
    ]
    queues = REPO / "docs" / "formats" / "queues.md"
    assert has_section(queues, "1")
    assert has_section(queues, "1.3")
    assert not has_section(queues, "3.6")
    assert not has_section(queues, "1.9")


def test_no_bare_section_citation() -> None:
    files = [
        p
        for p in tracked_files()
        if p.resolve() != THIS
        and p.suffix == ".py"
        and p.relative_to(REPO).parts[0] in SECTION_CITING_ROOTS
    ]
    assert len(files) > 100, "the list of Python files is implausibly short"
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:  # deleted in the work tree, not yet in the index
            continue
        lines = text.splitlines()
        for number in bare_sections(text):
            found.append(f"{path.relative_to(REPO)}:{number}: {lines[number - 1].strip()[:100]}")
    assert not found, (
        "section numbers that name no document (cite a docs/ page and its section, e.g. "
        "``docs/formats/queues.md`` §1.5, or drop the number):\n" + "\n".join(found)
    )


def test_every_cited_section_exists() -> None:
    files = [p for p in tracked_files() if p.resolve() != THIS]
    by_name: dict[str, list[Path]] = {}
    for p in files:
        by_name.setdefault(p.name, []).append(p)
    missing = []
    for path in citing_files(files):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for cited, section in cited_sections(line):
                pages = [base / cited for base in (REPO, path.parent) if (base / cited).is_file()]
                if not pages and "/" not in cited:
                    pages = by_name.get(cited, [])
                if pages and not any(has_section(page, section) for page in pages):
                    missing.append(f"{path.relative_to(REPO)}:{number}: {cited} §{section}")
    assert not missing, "cited sections that the page does not have:\n" + "\n".join(missing)
