"""The verdict matrix that opens the HTML report's infercheck section (element id
``infercheck-verdicts``): a row per check x suite, a column per test side, level or target,
each cell the verdict and the number that decided it, linking to the check's detail.

A kind gives its cells (:attr:`..checks.framework.kind.CheckKind.verdicts`, a comparison's per
test side); otherwise a cell per column of the kind's summary table, judged by the column's
own ``violations`` when it has them (a stress level), else one cell for the target judged by
the aggregate. A failed cell shows its first broken gate (value against threshold), then every
other reason it failed, and links to its failing items; a passed one the kind's headline
measure. A kind's notes (a sweep's degradation cliff) follow the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import unescape
from typing import Any

from ..checks.framework.kind import CheckKind, Verdict
from ..checks.registry import kind_named
from ..render.markup import esc, mapping


def anchor(index: int) -> str:
    """The id of the ``index``-th check x suite's detail in the summary section."""
    return f"ic-check-{index}"


def _text(html: str) -> str:
    """A measure's cell (escaped HTML: ``<b>``, entities) as plain text."""
    return unescape(re.sub(r"<[^>]*>", "", html))


def _headline(kind: CheckKind | None, numbers: Mapping[str, Any]) -> str:
    """The kind's headline measure of ``numbers`` (``determinism score [CI] 1.000 [...]``);
    empty for a kind without measures."""
    if kind is None or not kind.present.measures:
        return ""
    specs = [s for s in kind.present.measures if s[0] == kind.present.headline] or list(
        kind.present.measures
    )
    title, keys, show = specs[0]
    return f"{title} {_text(show(*(numbers.get(k) for k in keys)))}"


def default_verdicts(
    kind: CheckKind | None, data: Mapping[str, Any], passed: bool, violations: Sequence[str]
) -> list[Verdict]:
    """The cells of a kind that gives none (see the module docstring)."""
    if kind is not None and kind.present.columns is not None:
        cells = []
        for title, numbers in kind.present.columns(data):
            own = numbers.get("violations")
            if isinstance(own, list):
                ok, reasons = not own, [str(v) for v in own]
            else:
                ok, reasons = passed, list(violations)
            deciding = _headline(kind, numbers) if ok else (reasons or ["failed"])[0]
            shown = () if ok else tuple(reasons)
            cells.append(Verdict(title, "pass" if ok else "fail", deciding, shown))
        if cells:
            return cells
    target = str(data.get("target", "?"))
    if passed:
        return [Verdict(target, "pass", _headline(kind, data))]
    return [
        Verdict(target, "fail", str(violations[0]) if violations else "failed", tuple(violations))
    ]


def verdicts_of(item: Mapping[str, Any]) -> list[Verdict]:
    """The cells of one aggregate item (a record with ``outcome``); a kind's cells that
    cannot be read (a results file of another version) fall back on the default."""
    kind = kind_named(item.get("kind"))
    data = mapping(item.get("data"))
    passed = item.get("outcome") == "passed"
    violations = [str(v) for v in item.get("violations") or []]
    if kind is not None and kind.present.verdicts is not None:
        try:
            return kind.present.verdicts(data, passed, violations)
        except ValueError:
            pass
    return default_verdicts(kind, data, passed, violations)


Link = tuple[str, str]
"""``(text, anchor)``: a link to a failing item's detail."""
MAX_LINKS = 12
"""Failing items linked from one cell before ``and N more``."""


@dataclass
class Row:
    """A row of the verdict matrix: a check x suite, the anchor of its table, its cells, the
    failing items of each cell (by column; None: the row's own) and the notes of its kind
    (a sweep's degradation cliff)."""

    check: str
    suite: str
    anchor: str
    cells: list[Verdict]
    links: dict[str | None, list[Link]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _links(links: list[Link]) -> str:
    if not links:
        return ""
    shown = " ".join(f'<a href="#{esc(a)}">{esc(text)}</a>' for text, a in links[:MAX_LINKS])
    more = f" and {len(links) - MAX_LINKS} more" if len(links) > MAX_LINKS else ""
    return f'<div class="ic-failed-items">failed items: {shown}{more}</div>'


def _cell(v: Verdict, row: Row) -> str:
    """A cell: the verdict (linking to the first failing item of the cell, else the check's
    table), what decided it, every other reason it failed, its note, its failing items."""
    links = row.links.get(v.column, [])
    target = links[0][1] if links else row.anchor
    others = [r for r in v.reasons if r != v.deciding]
    also = "".join(f"<li>{esc(r)}</li>" for r in others)
    note = f' <span class="ic-note">{esc(v.note)}</span>' if v.note else ""
    return (
        f'<td class="ic-{esc(v.verdict)}"><a href="#{esc(target)}">'
        f"<strong>{esc(v.verdict.upper())}</strong></a>{note} "
        f'<span class="ic-deciding">{esc(v.deciding)}</span>'
        + (f'<ul class="ic-also">{also}</ul>' if also else "")
        + _links(links)
        + "</td>"
    )


def verdict_matrix(rows: list[Row]) -> str:
    """The matrix: a column per distinct cell column in order of first appearance; a check
    without a cell in a column shows nothing there. Each kind's notes follow the table."""
    columns = list(dict.fromkeys(v.column for row in rows for v in row.cells))
    head = "<th>check</th><th>suite</th>" + "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        by_column = {v.column: v for v in row.cells}
        tds = [
            "<td></td>" if by_column.get(c) is None else _cell(by_column[c], row) for c in columns
        ]
        body.append(
            f'<tr><th><a href="#{esc(row.anchor)}">{esc(row.check)}</a>'
            f"{_links(row.links.get(None, []))}</th><td>{esc(row.suite)}</td>"
            + "".join(tds)
            + "</tr>"
        )
    notes = "".join(
        f"<li>{esc(row.check)} · {esc(row.suite)}: {esc(note)}</li>"
        for row in rows
        for note in row.notes
    )
    return (
        '<table id="infercheck-verdicts" class="ic-verdicts">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        + (f'<ul class="ic-notes">{notes}</ul>' if notes else "")
    )
