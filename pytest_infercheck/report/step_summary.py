"""The GitHub job summary: where ``GITHUB_STEP_SUMMARY`` names a file (GitHub Actions sets it
in every step), the run's Markdown summary is appended to it at the end of the session: the
overall verdict with the worst finding (:mod:`.overview`), the verdict matrix (a row per check
x suite, every reason a cell failed) with each kind's notes (a sweep's degradation cliff), and
the failed items with their first violation (the first :data:`MAX_ITEMS`, then a count).

GitHub renders the file as GitHub-flavoured Markdown, HTML included: every text from the run
(model output in a violation, names from the matrix) goes through :func:`md`, which escapes
HTML and Markdown's punctuation, and keeps a table cell on one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import pytest

from ..checks.registry import kind_named
from ..render.markup import mapping
from .overview import entry, is_failing, overview
from .titles import run_title
from .verdicts import verdicts_of

MAX_ITEMS = 50
"""Failed items listed before ``and N more``."""
MAX_CHARS = 300
"""Longest text of one cell or violation."""

_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")


def md(text: Any, limit: int = MAX_CHARS) -> str:
    """``text`` as inline Markdown that shows it literally: cut to ``limit`` characters,
    line breaks as spaces, ``& < > "`` as HTML entities (no tag, no ``>`` quote), and the
    characters that mark up inline text escaped with a backslash (backslash, backtick,
    ``* _ [ ] ~``, and ``|``, which would end a table cell). The text never starts a line,
    where ``#``, ``-`` or ``1.`` would mean more."""
    flat = " ".join(str(text).split())
    if len(flat) > limit:
        flat = flat[:limit] + "…"
    return _PUNCTUATION.sub(r"\\\1", escape(flat, quote=True))


def _cell(verdict: str, reasons: Sequence[str], deciding: str, note: str) -> str:
    shown = list(reasons) or [deciding]
    mark = {"fail": "❌ **FAIL**", "pass": "✅ PASS"}.get(verdict, md(verdict.upper()))
    text = f"{mark}: " + "; ".join(md(r) for r in shown if r)
    return text + (f" ({md(note)})" if note else "")


def markdown(items: Sequence[Mapping[str, Any]], title: str) -> str:
    """The summary of one run's items (see the module docstring)."""
    summary = overview(items)
    verdict = "PASS" if summary.passed else "FAIL"
    lines = [f"## {md(title)}: {verdict}", "", md(summary.counts()) + "."]
    if summary.worst:
        lines += ["", f"**Worst finding:** {md(summary.worst)}"]
    aggregates = [i for i in items if i.get("role") == "aggregate"]
    if aggregates:
        cells = [(a, verdicts_of(a)) for a in aggregates]
        columns = list(dict.fromkeys(v.column for _, vs in cells for v in vs))
        lines += [
            "",
            "| check | suite | " + " | ".join(md(c) for c in columns) + " |",
            "|---|---|" + "---|" * len(columns),
        ]
        notes: list[str] = []
        for item, verdicts in cells:
            by_column = {v.column: v for v in verdicts}
            row = [md(item.get("check", "?")), md(item.get("suite", "?"))]
            for column in columns:
                v = by_column.get(column)
                row.append("" if v is None else _cell(v.verdict, v.reasons, v.deciding, v.note))
            lines.append("| " + " | ".join(row) + " |")
            kind = kind_named(item.get("kind"))
            if kind is not None:
                where = f"{item.get('check', '?')} · {item.get('suite', '?')}"
                notes += [
                    f"- {md(where)}: {md(n)}" for n in kind.present.notes(mapping(item.get("data")))
                ]
        if notes:
            lines += ["", *notes]
    failed = [i for i in items if is_failing(i) and i.get("role") != "aggregate"]
    if failed:
        lines += ["", f"### Failed items ({len(failed)})", ""]
        for item in failed[:MAX_ITEMS]:
            violations = item.get("violations") or []
            why = violations[0] if violations else item.get("longrepr") or item.get("outcome")
            lines.append(f"- `{_code(item.get('nodeid', '?'))}`: {md(why)}")
        if len(failed) > MAX_ITEMS:
            lines.append(f"- and {len(failed) - MAX_ITEMS} more")
    return "\n".join(lines) + "\n"


def _code(text: Any) -> str:
    """A node id inside a code span: no backticks or line breaks (the span's only
    delimiters), cut to :data:`MAX_CHARS`."""
    return " ".join(str(text).replace("`", "'").split())[:MAX_CHARS]


class StepSummary:
    """Registered on the controller when ``GITHUB_STEP_SUMMARY`` is set (:mod:`..state`):
    keeps every infercheck item's entry, appends the Markdown at session finish."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.items: list[dict[str, Any]] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = entry(report)
        if found is not None:
            self.items.append(found)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.items:
            return
        with self.path.open("a", encoding="utf-8") as out:
            out.write(markdown(self.items, run_title(self.config, self.items)))
