#!/usr/bin/env python3
"""Every fact of a README is in the docs site: nothing is lost when the README shrinks.

The README is read as units of fact:

- every sentence of its prose (paragraphs, list items, table-free text), markdown links read
  as their text, whitespace collapsed;
- every row of its tables (cells stripped);
- every non-blank line of its code blocks.

Headings are not facts (the docs have their own). A unit is covered when it occurs, written
the same way up to whitespace, links and line wrapping, in some page of ``docs/``. What is
deliberately not in the docs (a duplicate, a sentence that only pointed to a README section)
is listed in :data:`DROPPED` with why.

Usage::

    python scripts/check_docs_cover.py                  # the last full README (FULL_README)
    python scripts/check_docs_cover.py --rev main       # README.md of a git revision
    python scripts/check_docs_cover.py OLD-README.md    # any file

Prints each unit no page holds (``README.md:LINE: ...``) and exits 1 when there is one.
Merging a branch that still edits README sections: run it with ``--rev BRANCH`` to see what
of that branch's README has yet to move into the docs.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FULL_README = "57cc573a4f6a5c56bcbaa3df4a9bbd9c0247d97e"
"""The last commit whose README.md held everything (before it became a landing page)."""

DROPPED: dict[str, str] = {
    # unit (as normalised: one line, links as text) -> why it is not in the docs
    "ungated), verdicts.py, present.py": (
        "a stray duplicate line in the README's architecture tree (the line before it says it)"
    ),
}
"""Units deliberately left out of the docs, with why."""


@dataclass(frozen=True)
class Unit:
    line: int
    text: str


LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\"])")


def normalise(text: str) -> str:
    """Links as their text, whitespace collapsed."""
    return " ".join(LINK.sub(r"\1", text).split())


def units(markdown: str) -> list[Unit]:
    """The README's units of fact, each with the line it starts on."""
    found: list[Unit] = []
    lines = markdown.splitlines()
    fence: str | None = None
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        if paragraph:
            start = paragraph[0][0]
            text = normalise(" ".join(line for _, line in paragraph))
            found.extend(Unit(start, s) for s in SENTENCE_END.split(text) if s.strip())
            paragraph.clear()

    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and stripped.strip("`~") == "":
                fence = None
            elif stripped:
                found.append(Unit(number, " ".join(stripped.split())))
            continue
        opening = re.match(r"(`{3,}|~{3,})", stripped)
        if opening:
            flush()
            fence = opening.group(1)
            continue
        if not stripped or stripped.startswith("#"):
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            if not re.fullmatch(r"\|[\s:|-]+\|", stripped):
                found.append(Unit(number, table_row(stripped)))
            continue
        item = re.match(r"([-*+]|\d+\.)\s+", stripped)
        if item:
            flush()  # a list item starts a unit of its own, its marker left out
            stripped = stripped[item.end() :]
        paragraph.append((number, stripped))
    flush()
    return found


def table_row(line: str) -> str:
    cells = [normalise(cell) for cell in line.strip().strip("|").split("|")]
    return normalise("| " + " | ".join(cells) + " |")


def docs_text(docs: Path) -> str:
    """Every page, normalised as the units are (tables' rows normalised as rows)."""
    parts = []
    for page in sorted(docs.rglob("*.md")):
        for line in page.read_text().splitlines():
            stripped = line.strip()
            parts.append(table_row(stripped) if stripped.startswith("|") else stripped)
    return normalise("\n".join(parts))


def missing(readme: str, docs: Path) -> list[Unit]:
    """The units of ``readme`` that no page of ``docs`` holds and :data:`DROPPED` does not
    list."""
    text = docs_text(docs)
    return [u for u in units(readme) if u.text not in DROPPED and u.text not in text]


def readme_at(rev: str) -> str:
    """README.md at git revision ``rev`` (CalledProcessError when git does not have it)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:README.md"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("readme", nargs="?", help="a README file (default: --rev FULL_README)")
    parser.add_argument("--rev", help="read README.md at this git revision")
    parser.add_argument("--docs", default=str(DOCS))
    args = parser.parse_args(argv)
    if args.readme:
        name = args.readme
        readme = Path(args.readme).read_text()
    else:
        name = f"{args.rev or FULL_README}:README.md"
        readme = readme_at(args.rev or FULL_README)
    lost = missing(readme, Path(args.docs))
    for unit in lost:
        print(f"{name}:{unit.line}: {unit.text}")
    total = len(units(readme))
    print(f"{total - len(lost)} of {total} units of {name} are in {args.docs}", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
