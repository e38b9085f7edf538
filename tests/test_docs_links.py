"""Every relative link of the README, the ``docs/`` pages and the benchmark report leads
somewhere: the file or folder it names exists (relative to the page that links it), and a
``#fragment`` names a heading of that page (GitHub's anchors). Links to other sites are not
followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [REPO / "README.md", REPO / "bench" / "results" / "REPORT.md", *(REPO / "docs").rglob("*.md")]
)
FENCED = re.compile(r"^ *```.*?^ *```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`]*`")
INLINE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # text may wrap
REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s+(\S+)", re.M)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose(text: str) -> str:
    """``text`` without code blocks and code spans (a ``[x](y)`` there is not a link)."""
    return CODE_SPAN.sub("", FENCED.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return INLINE.findall(body) + REFERENCE.findall(body)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    heading = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCED.sub("", page.read_text())):
        slug = anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken(page: Path) -> list[str]:
    found = []
    for target in links(page.read_text()):
        if SCHEME.match(target):
            continue
        path, _, fragment = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            found.append(f"{target}: no such file")
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            found.append(f"{target}: no heading #{fragment} in {where.name}")
        elif not where.is_relative_to(REPO):
            found.append(f"{target}: outside the repository")
    return found


def test_the_link_reader() -> None:
    text = (
        'See [design](docs/design.md#7-how-it-is-checked), ![pic](img/a.png "A"), '
        "[site](https://example.com) and [top](#quick-start).\n"
        "`[not](docs/cli.md)`\n```sh\necho [no](docs/pipeline.md)\n```\n[ref]: docs/store.md\n"
    )
    assert links(text) == [
        "docs/design.md#7-how-it-is-checked",
        "img/a.png",
        "https://example.com",
        "#quick-start",
        "docs/store.md",
    ]
    assert anchor("7. How it is checked") == "7-how-it-is-checked"
    assert anchor("Using the `gannet` command") == "using-the-gannet-command"
    assert anchor("Custom resources (`gannet.io/v1alpha1`)") == "custom-resources-gannetiov1alpha1"


def test_every_page_is_found() -> None:
    names = {str(p.relative_to(REPO)) for p in PAGES}
    assert {"README.md", "docs/design.md", "docs/cli.md", "bench/results/REPORT.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert not broken(page), f"{page.relative_to(REPO)}: " + "; ".join(broken(page))
