"""The documentation the tests hold against the code: README.md and the site's pages under docs/.

A section moves between the README and a page, or from page to page, without a test following it:
`section` finds a heading in whichever document holds it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def documents() -> list[Path]:
    """README.md and every page of the documentation site."""
    return [README, *sorted(DOCS.glob("**/*.md"))]


def text() -> str:
    """README.md and the pages, one after the other."""
    return "\n\n".join(path.read_text() for path in documents())


def section_of(text: str, heading: str) -> str | None:
    """The Markdown section under `heading` (any level), up to the next heading of the same or a
    higher level; None when `text` has no such heading. Headings inside fenced code do not count."""
    # Fenced code blanked out, same length, so offsets in it are offsets in `text`.
    unfenced = re.sub(r"^(```|~~~).*?^\1\s*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.M | re.S)
    match = re.search(rf"^(#+) {re.escape(heading)}[ \t]*$", unfenced, re.MULTILINE)
    if match is None:
        return None
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", unfenced[match.end() :], re.MULTILINE)
    return text[match.end() : match.end() + end.start()] if end else text[match.end() :]


def section(heading: str) -> str:
    """The section under `heading` in the first document (README, then the pages) that has one."""
    for path in documents():
        found = section_of(path.read_text(), heading)
        if found is not None:
            return found
    raise AssertionError(f"no document has a section {heading!r}")
