"""The verdict matrix that opens the HTML report's infercheck section (element id
``infercheck-verdicts``): a row per check x suite, a column per test side, level or target,
each cell the verdict and the number that decided it, linking to the check's detail.

A kind gives its cells (:attr:`..checks.framework.kind.CheckKind.verdicts`, a comparison's per
test side); otherwise a cell per column of the kind's summary table, judged by the column's
own ``violations`` when it has them (a stress level), else one cell for the target judged by
the aggregate. A failed cell shows its first broken gate (value against threshold), a passed
one the kind's headline measure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
            cells.append(Verdict(title, "pass" if ok else "fail", deciding))
        if cells:
            return cells
    target = str(data.get("target", "?"))
    if passed:
        return [Verdict(target, "pass", _headline(kind, data))]
    return [Verdict(target, "fail", str(violations[0]) if violations else "failed")]


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


Row = tuple[str, str, str, list[Verdict]]
"""``(check, suite, anchor, cells)``."""


def verdict_matrix(rows: list[Row]) -> str:
    """The matrix: a column per distinct cell column in order of first appearance; a check
    without a cell in a column shows nothing there."""
    columns = list(dict.fromkeys(v.column for _, _, _, cells in rows for v in cells))
    head = "<th>check</th><th>suite</th>" + "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for check, suite, link, cells in rows:
        by_column = {v.column: v for v in cells}
        tds = []
        for column in columns:
            v = by_column.get(column)
            if v is None:
                tds.append("<td></td>")
                continue
            tds.append(
                f'<td class="ic-{esc(v.verdict)}"><a href="#{esc(link)}">'
                f"<strong>{esc(v.verdict)}</strong></a> "
                f'<span class="ic-deciding">{esc(v.deciding)}</span></td>'
            )
        body.append(
            f'<tr><th><a href="#{esc(link)}">{esc(check)}</a></th><td>{esc(suite)}</td>'
            + "".join(tds)
            + "</tr>"
        )
    return (
        '<table id="infercheck-verdicts" class="ic-verdicts">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )
