"""pytest-html hooks: sortable KL / flip / similarity columns, each item's detail view as an
HTML extra, and the summary tables and charts above the results table.

Registered (:mod:`..state`) only when pytest-html is installed and writing a report, in the
process that writes it (the xdist controller): everything comes from the reports' records
(``report.infercheck``), which xdist ships from the workers, so the same code serves runs
with and without ``-n``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pytest_html import extras

from ..checks.framework.kind import Distribution
from ..checks.registry import kind_named
from ..render.markup import CSS, mapping
from .html import COLUMNS, result_cells
from .summary import RunView, summary_html
from .views import item_detail


def _slim(record: Mapping[str, Any], dist: Distribution) -> dict[str, Any]:
    """What the summary needs of an item its kind draws a distribution of (its value and
    group), so a run of many prompts does not keep every output in memory until the end."""
    data = mapping(record.get("data"))
    return {
        "check": record.get("check"),
        "kind": record.get("kind"),
        "suite": record.get("suite"),
        "role": record.get("role"),
        "data": {dist.group: data.get(dist.group), dist.value: data.get(dist.value)},
    }


class HtmlReport:
    """The hooks; keeps the aggregates (and each comparison prompt's mean KL) for the summary."""

    def __init__(self, start_dir: Path, html_dir: Path) -> None:
        self.items: list[dict[str, Any]] = []
        self.start_dir = start_dir
        """Where pytest was started: a record's ``repro`` path is relative to it."""
        self.html_dir = html_dir

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, "infercheck", None)
        if report.when != "call" or not isinstance(record, Mapping):
            return
        detail = item_detail(record, report.outcome)
        links = [extras.html(detail)]
        if isinstance(record.get("repro"), str):  # --infercheck-repro: the item's bundle
            bundle = os.path.relpath(self.start_dir / record["repro"], self.html_dir)
            links.append(extras.url(bundle, name="repro bundle"))
        report.extras = [*getattr(report, "extras", []), *links]  # type: ignore[attr-defined]
        kind = kind_named(record.get("kind"))
        dist = None if kind is None else kind.present.distribution
        if record.get("role") == "aggregate":
            self.items.append({**record, "nodeid": report.nodeid, "outcome": report.outcome})
        elif dist is not None and record.get("role") == dist.role:
            self.items.append(_slim(record, dist))

    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        for k, (col, title) in enumerate(COLUMNS):
            cells.insert(2 + k, f'<th class="sortable" data-column-type="{col}">{title}</th>')

    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[str]) -> None:
        record = getattr(report, "infercheck", None)
        values = result_cells(record if isinstance(record, Mapping) else None)
        for k, (col, _) in enumerate(COLUMNS):
            key, html = values[col]
            hidden = f"<span hidden>{key}</span>" if key else ""
            cells.insert(2 + k, f'<td class="col-{col}">{hidden}{html}</td>')

    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        postfix.append(f"<style>{CSS}</style>")
        if self.items:
            postfix.append(summary_html([RunView("this run", self.items)]))
