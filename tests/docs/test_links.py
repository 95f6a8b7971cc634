"""Every relative link in README.md, docs/*.md and the examples' READMEs resolves: the file (or folder) exists inside
the repository, and an anchor (`page.md#section`, `#section`) names a heading of that page. Anchors follow GitHub's
rule for heading ids: lower case, punctuation other than `-` and `_` dropped, each space a `-`
(github/cmark-gfm's anchor filter, as github.com renders READMEs), with `-1`, `-2` for repeated headings."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("*/README.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The page without fenced blocks and code spans, where a `[x](y)` is code, not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def broken_links(text: str, page: Path) -> list[str]:
    """The links of `text` that do not resolve, read as if it were the page at `page`."""
    broken = []
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(REPO):
            broken.append(f"{target}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page.read_text(encoding="utf-8"), page) == []


def test_the_checker_finds_a_missing_file_a_missing_anchor_and_an_escape() -> None:
    text = (
        "[fine](install.md) [fine](install.md#the-two-set-up-commands) [missing](nowhere.md) "
        "[anchor](install.md#no-such-heading) [escape](../../outside.md) `[code](not-a-link.md)`\n"
        "```\n[in a block](not-a-link-either.md)\n```\n"
    )
    assert broken_links(text, REPO / "docs" / "guide.md") == [
        "nowhere.md: no such file",
        "install.md#no-such-heading: no heading #no-such-heading in docs/install.md",
        "../../outside.md: outside the repository",
    ]


def test_heading_ids_follow_github() -> None:
    assert slug("What is verified offline, and what needs a real subscription / node") == (
        "what-is-verified-offline-and-what-needs-a-real-subscription--node"
    )
    assert slug("The real `pulumi preview` (Azure OIDC)") == "the-real-pulumi-preview-azure-oidc"


def test_the_readme_links_every_doc() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in sorted((REPO / "docs").glob("*.md")) if f"](docs/{p.name}" not in readme]
    assert unlinked == []
