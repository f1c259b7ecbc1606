"""Every relative link in the documentation resolves: README.md, docs/, deploy/ and bench/README.md.

A link is followed to a file or folder of this checkout, and a ``#fragment`` into a markdown file to one of its
headings (GitHub's slugs) or HTML anchors. Links inside code (fenced blocks, inline spans) are not links.
Addresses with a scheme (``https:``, ``mailto:``) are not checked: CI has no network.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted(
    {ROOT / "README.md", ROOT / "bench" / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("deploy/**/*.md")}
)
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def outside_fences(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for line in outside_fences(text):
        if match := HEADING.match(line):
            base = slug(match.group(2).replace("`", ""))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    found.update(HTML_ANCHOR.findall(text))
    return frozenset(found)


def links(path: Path) -> list[str]:
    """Link targets in the prose of ``path``: outside code blocks, inline code blanked (``[`x`](y)`` keeps ``y``)."""
    targets = []
    for line in outside_fences(path.read_text(encoding="utf-8")):
        prose = INLINE_CODE.sub("", line)
        targets += LINK.findall(prose)
        if match := REFERENCE.match(prose):
            targets.append(match.group(1))
    return targets


def broken(document: Path, target: str, root: Path = ROOT) -> str | None:
    """Why ``target`` (a link in ``document``) does not resolve inside ``root``, or None when it does."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return None  # an address with a scheme: not checked offline
    address, _, fragment = target.partition("#")
    path = (document.parent / unquote(address)).resolve() if address else document
    if not path.exists():
        return f"{target}: no such file"
    if root not in path.parents and path != root:
        return f"{target}: outside the repository"
    if fragment and path.suffix == ".md" and unquote(fragment).lower() not in anchors(path):
        return f"{target}: no heading or anchor '#{fragment}' in {path.relative_to(root)}"
    return None


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    problems = [problem for target in links(document) if (problem := broken(document, target))]
    assert problems == []


def test_the_checker_sees_links_and_finds_broken_ones(tmp_path: Path) -> None:
    root = tmp_path.resolve() / "repo"
    root.mkdir()
    (tmp_path / "elsewhere.md").touch()
    (root / "other.md").write_text("# A heading: with `code` (and more)\n\n## Twice\n\n## Twice\n")
    document = root / "doc.md"
    document.write_text(
        "See [other](other.md#a-heading-with-code-and-more), [twice](other.md#twice-1), ![img](missing.png),\n"
        "[gone](nowhere.md), [bad anchor](other.md#nope), [web](https://example.com/x), [self](#top),\n"
        "[`code` in the text](other.md), [out](../elsewhere.md).\n"
        "```\n[not a link](inside-code.md)\n```\n`[nor this](inline.md)`\n\n# Top\n\n[ref]: also-missing.md\n"
    )
    found = links(document)
    assert "inside-code.md" not in found and "inline.md" not in found
    problems = [problem for target in found if (problem := broken(document, target, root))]
    assert problems == [
        "missing.png: no such file",
        "nowhere.md: no such file",
        "other.md#nope: no heading or anchor '#nope' in other.md",
        "../elsewhere.md: outside the repository",
        "also-missing.md: no such file",
    ]
