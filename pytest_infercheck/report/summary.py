"""The summary section: the verdict matrix (:mod:`.verdicts`), one table per check x suite,
the engines and the charts, for one or more runs.

A table has a row per measure and a column per run x the kind's columns (a sweep's levels,
a stress check's concurrencies), so two runs (old engine, new engine) read side by side.
Each kind declares its measures, columns, bars, charts and per-item distribution
(:class:`..checks.framework.kind.CheckKind`); a kind this report does not know still shows every
scalar its aggregate recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks.framework.kind import BarSeries, Distribution, MeasureSpec
from ..checks.registry import kind_named
from ..render.charts import bar_chart, histogram
from ..render.markup import esc, is_number, kv_table, mapping, plain
from ..render.views import engines
from .overview import banner_html, failing_by_cell, item_anchor, overview
from .verdicts import Row, anchor, verdict_matrix, verdicts_of

MAX_KL_CHARTS = 24
"""KL distribution charts drawn at most (one per run x check x suite x test side)."""
MAX_BARS = 40


@dataclass
class RunView:
    """One run's items as the report sees them: dicts with the record's keys (check, kind,
    suite, role, name, thresholds, violations, data) plus ``nodeid`` and ``outcome``."""

    label: str
    items: Sequence[Mapping[str, Any]]
    engines: Mapping[str, Any] = field(default_factory=dict)
    """Engine identities by target label; empty: those recorded by the aggregates."""
    anchors: str = ""
    """What the ids of this run's item views are made from besides the node id
    (:func:`.overview.item_anchor`): the run's label when a page shows several runs."""

    def anchor(self, item: Mapping[str, Any]) -> str:
        """The id of ``item``'s detail view in the page."""
        return item_anchor(item.get("nodeid"), self.anchors)


Measure = tuple[str, Callable[[Mapping[str, Any]], str]]
_NOT_MEASURES = {"target", "level", "engines", "levels", "check", "suite", "baseline", "test"}


def _measure(spec: MeasureSpec) -> Measure:
    title, keys, show = spec
    return title, lambda c: show(*(c.get(k) for k in keys))


def columns(item: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(column title, numbers)`` of an aggregate item: the kind's columns (a comparison's
    test sides, a stress check's levels), else one for the target."""
    data = mapping(item.get("data"))
    kind = kind_named(item.get("kind"))
    if kind is not None and kind.present.columns is not None:
        return kind.present.columns(data)
    return [(str(data.get("target", item.get("name", "?"))), data)]


def measures(kind_name: Any, cols: list[Mapping[str, Any]]) -> list[Measure]:
    """The rows of a check x suite table: the kind's measures, then (unless the kind says
    otherwise) any other scalar recorded by any column, so a kind this report does not know
    still shows its numbers."""
    kind = kind_named(kind_name)
    specs = list(kind.present.measures) if kind is not None else []
    known = [_measure(spec) for spec in specs]
    if kind is not None and not kind.present.other_measures:
        return known
    used = {k for _, keys, _ in specs for k in keys} | _NOT_MEASURES
    extra = dict.fromkeys(
        k for c in cols for k, v in c.items() if k not in used and not isinstance(v, dict | list)
    )
    return known + [(label(k), lambda c, k=k: plain(c.get(k, "-"))) for k in extra]


LABELS = {
    "n_match": "matching",
    "n_mismatch": "mismatching",
    "n_failed": "failed items",
    "n_flips": "answer flips",
    "n_errors": "errors",
    "n_hostile": "hostile requests",
    "n_dead": "dead servers",
    "n_polluted": "polluted",
    "measured_by": "measured in (xdist worker, or main process)",
    "max_in_flight": "most requests in flight",
    "consistent": "consistent outputs",
    "count_only": "count-only (counts equal)",
    "batched_by": "batched by",
}
"""Readable titles of the record fields a summary table shows without a kind's measure."""


def label(key: str) -> str:
    """A record field's title in a summary table: :data:`LABELS`, else its words."""
    return LABELS.get(key, key.replace("_", " "))


def _aggregates(
    runs: list[RunView],
) -> dict[tuple[str, str], list[tuple[RunView, Mapping[str, Any]]]]:
    groups: dict[tuple[str, str], list[tuple[RunView, Mapping[str, Any]]]] = {}
    for run in runs:
        for item in run.items:
            if item.get("role") == "aggregate":
                key = (str(item.get("check", "?")), str(item.get("suite", "?")))
                groups.setdefault(key, []).append((run, item))
    return groups


def _engines(run: RunView) -> dict[str, Any]:
    """The union of the engine identities recorded by the run's aggregates."""
    out: dict[str, Any] = {}
    for item in run.items:
        if item.get("role") == "aggregate":
            out.update(mapping(mapping(item.get("data")).get("engines")))
    return out


def check_table(entries: list[tuple[RunView, Mapping[str, Any]]], several_runs: bool) -> str:
    """The table of one check x suite over the runs that have it."""
    cols: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
    for run, item in entries:
        for title, numbers in columns(item):
            cols.append((f"{run.label}: {title}" if several_runs else title, numbers, item))
    kind = entries[0][1].get("kind")
    thresholds = mapping(entries[0][1].get("thresholds"))
    rows = measures(kind, [c for _, c, _ in cols])
    confidence = mapping(thresholds.get("flips")).get("confidence", 0.95)
    if is_number(confidence):
        rows = [
            (f"flip rate [{confidence:.0%} CI]" if n == "flip rate [CI]" else n, f) for n, f in rows
        ]
    head = "<th>measure</th>" + "".join(f"<th>{esc(t)}</th>" for t, _, _ in cols)
    body = [
        f"<tr><th>{esc(label)}</th>" + "".join(f"<td>{fn(c)}</td>" for _, c, _ in cols) + "</tr>"
        for label, fn in rows
    ]
    verdicts = "".join(_verdict_cell(title, item) for title, _, item in _titled(entries))
    body.append(f"<tr><th>verdict</th>{verdicts}</tr>")
    return (
        f'<table class="ic-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        "</table><details><summary>thresholds</summary>" + kv_table(thresholds) + "</details>"
    )


def verdicts_html(runs: list[RunView]) -> str:
    """The verdict matrix (:mod:`.verdicts`) of the runs' aggregates, a row per check x
    suite linking to its table (:func:`summary_html`), each cell to its failing items; with
    several runs each column is named by its run."""
    several = len(runs) > 1
    rows: list[Row] = []
    for index, ((check, suite), entries) in enumerate(_aggregates(runs).items()):
        row = Row(check, suite, anchor(index), [])
        for run, item in entries:
            cells = verdicts_of(item)
            prefix = f"{run.label}: " if several else ""
            for column, failing in failing_by_cell(run.items, check, suite, cells).items():
                key = None if column is None else prefix + column
                row.links.setdefault(key, []).extend(
                    (str(i.get("name", "?")), run.anchor(i)) for i in failing
                )
            row.cells += [v._replace(column=prefix + v.column) for v in cells]
            kind = kind_named(item.get("kind"))
            if kind is not None:
                row.notes += [prefix + n for n in kind.present.notes(mapping(item.get("data")))]
        rows.append(row)
    return verdict_matrix(rows)


def _titled(
    entries: list[tuple[RunView, Mapping[str, Any]]],
) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """``(column title, numbers, aggregate item)`` of each column without the run's label."""
    return [(title, numbers, item) for _, item in entries for title, numbers in columns(item)]


def _verdict_cell(title: str, item: Mapping[str, Any]) -> str:
    """The column's verdict and what decided it (:mod:`.verdicts`): a sweep level shows its
    own gates only."""
    found = [v for v in verdicts_of(item) if v.column == title]
    if not found:
        return "<td>-</td>"
    v = found[0]
    shown = esc(v.verdict.upper())
    return f'<td class="ic-{esc(v.verdict)}"><strong>{shown}</strong>: {esc(v.deciding)}</td>'


def summary_html(runs: list[RunView], banner: bool = True, title: str | None = None) -> str:
    """The summary section of ``runs``: the banner (one run; :mod:`.overview`), the verdict
    matrix, one table per check x suite, engines, charts."""
    several = len(runs) > 1
    parts = ['<section class="ic-summary">', "<h2>infercheck summary</h2>", verdicts_html(runs)]
    if banner:
        titles = [run.label for run in runs] if several else [title]
        banners = [banner_html(overview(r.items), t) for r, t in zip(runs, titles, strict=True)]
        parts[1:1] = banners
    for index, ((check, suite), entries) in enumerate(_aggregates(runs).items()):
        parts.append(f'<h3 id="{anchor(index)}">{esc(check)} · {esc(suite)}</h3>')
        parts.append(check_table(entries, several))
    for run in runs:
        identities = run.engines or _engines(run)
        if identities:
            parts.append(f"<h3>engines{': ' + esc(run.label) if several else ''}</h3>")
            parts.append(engines(identities).removeprefix("<h4>engines</h4>"))
    parts.append('<h3>charts</h3><div class="ic-charts">')
    parts.extend(charts(runs))
    parts.append("</div></section>")
    return "".join(parts)


def charts(runs: list[RunView]) -> list[str]:
    """Every summary chart the runs have data for: each kind's bars (a value with its interval
    per column), each aggregate's own charts, then the per-item distributions."""
    several = len(runs) > 1
    bars: dict[BarSeries, list[tuple[str, Any, Any, Any]]] = {}
    per_aggregate: list[str] = []
    for run, item in ((r, i) for r in runs for i in r.items if i.get("role") == "aggregate"):
        prefix = f"{run.label}: " if several else ""
        kind = kind_named(item.get("kind"))
        if kind is None:
            continue
        if kind.present.bars is not None:
            series = bars.setdefault(kind.present.bars, [])
            for title, c in columns(item):
                label = f"{item.get('suite', '?')}/{title}" if kind.present.bars.by_suite else title
                b = kind.present.bars
                series.append((f"{prefix}{label}", c.get(b.value), c.get(b.low), c.get(b.high)))
        name = f"{prefix}{item.get('check', '?')} · {item.get('suite', '?')}"
        per_aggregate.extend(kind.present.charts(name, mapping(item.get("data"))))
    out = [
        bar_chart(values[:MAX_BARS], title=series.title, y_label=series.y_label)
        for series, values in bars.items()
        if any(is_number(v) for _, v, _, _ in values)
    ]
    return out + per_aggregate + _distributions(runs)


def _distributions(runs: list[RunView]) -> list[str]:
    groups: dict[tuple[Distribution, str], list[Any]] = {}
    several = len(runs) > 1
    for run in runs:
        for item in run.items:
            kind = kind_named(item.get("kind"))
            dist = None if kind is None else kind.present.distribution
            data = item.get("data")
            if dist is None or item.get("role") != dist.role or not isinstance(data, Mapping):
                continue
            title = (
                f"{item.get('check', '?')} · {item.get('suite', '?')} · {data.get(dist.group, '?')}"
            )
            title = f"{run.label}: {title}" if several else title
            groups.setdefault((dist, title), []).append(data.get(dist.value))
    return [
        histogram(values, title=f"{dist.title}: {title}", bins=12, log10=True, x_label=dist.x_label)
        for (dist, title), values in list(groups.items())[:MAX_KL_CHARTS]
        if any(is_number(v) for v in values)
    ]
