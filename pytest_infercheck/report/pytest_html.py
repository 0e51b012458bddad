"""pytest-html hooks: the report's title (:mod:`.titles`), the banner under it
(:mod:`.overview`), the engines' versions in the environment table, sortable KL / flip /
similarity columns, each item's detail view as an HTML extra (with the id the verdict matrix
links to), and the summary tables and charts above the results table.

Registered (:mod:`..state`) only when pytest-html is installed and writing a report, in the
process that writes it (the xdist controller): everything comes from the reports' records
(``report.infercheck``), which xdist ships from the workers, so the same code serves runs
with and without ``-n``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pytest_html import extras

from ..render.markup import CSS, TO_TOP_SCRIPT, esc, mapping
from .html import COLUMNS, result_cells
from .overview import banner_html, entry, item_anchor, overview
from .summary import RunView, summary_html
from .titles import run_title
from .views import item_detail


def engine_versions(identities: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The versions of the engines the run used, from their identities (:meth:`~pytest_
    infercheck.backends.base.Backend.identity`), as ``{name: version}`` for pytest-html's
    environment table: mlx-lm's ``mlx`` and ``mlx-lm``, llama-server's build
    (``llama.cpp build``), a server's reported ``version`` (``vllm``, ``sglang``, ...); a
    backend that reports none is named with ``not reported``. Several values of one name
    are joined with ``, ``. Escaped: pytest-html's script inserts these values as HTML."""
    found: dict[str, list[str]] = {}
    for ident in identities:
        kind = str(ident.get("kind", "?"))
        pairs = [(k, ident.get(k)) for k in ("mlx", "mlx-lm") if ident.get(k) is not None]
        if ident.get("build_info") is not None:
            pairs.append(("llama.cpp build", ident["build_info"]))
        if ident.get("version") is not None:
            pairs.append((kind, ident["version"]))
        if not pairs:
            pairs.append((f"{kind} ({ident.get('name', '?')})", "not reported"))
        for name, value in pairs:
            values = found.setdefault(esc(name), [])
            if esc(value) not in values:
                values.append(esc(value))
    return {name: ", ".join(values) for name, values in found.items()}


class HtmlReport:
    """The hooks; keeps every infercheck item's entry (:func:`entry`) for the summary."""

    def __init__(self, config: pytest.Config, start_dir: Path, html_dir: Path) -> None:
        self.config = config
        self.items: list[dict[str, Any]] = []
        self.start_dir = start_dir
        """Where pytest was started: a record's ``repro`` path is relative to it."""
        self.html_dir = html_dir
        self.report_data: Any = None
        """pytest-html's report data (its title is set at the end, when the matrices are
        known: under xdist the controller collects none)."""

    @property
    def title(self) -> str:
        return run_title(self.config, self.items)

    def pytest_html_report_title(self, report: Any) -> None:
        self.report_data = report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = entry(report)
        if found is not None:
            self.items.append(found)
        record = getattr(report, "infercheck", None)
        if found is not None and not isinstance(record, Mapping):  # failed without a record
            title = " · ".join(str(found.get(k)) for k in ("check", "suite", "name"))
            anchor = esc(item_anchor(report.nodeid))
            view = (
                f'<details id="{anchor}" class="ic-detail ic-{esc(found["outcome"])}" open>'
                f"<summary>{esc(title)}</summary>"
                f'<pre class="ic-text">{esc(found.get("longrepr", ""))}</pre></details>'
            )
            report.extras = [*getattr(report, "extras", []), extras.html(view)]  # type: ignore[attr-defined]
        if report.when != "call" or not isinstance(record, Mapping):
            return
        detail = item_detail(record, report.outcome, item_anchor(report.nodeid))
        links = [extras.html(detail)]
        if isinstance(record.get("repro"), str):  # --infercheck-repro: the item's bundle
            bundle = os.path.relpath(self.start_dir / record["repro"], self.html_dir)
            links.append(extras.url(bundle, name="repro bundle"))
        report.extras = [*getattr(report, "extras", []), *links]  # type: ignore[attr-defined]

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
        """The banner first (moved to the top of the page by :data:`~..render.markup.
        TO_TOP_SCRIPT`; it stands in the summary without scripts), the title, the engines'
        versions in the environment table, the summary section."""
        title = self.title
        if self.report_data is not None:
            self.report_data.title = title
        versions = engine_versions(
            mapping(ident)
            for item in self.items
            if item.get("role") == "aggregate"
            for ident in mapping(mapping(item.get("data")).get("engines")).values()
        )
        if versions:
            self._environment()["Engines"] = versions
        prefix.insert(0, f"<style>{CSS}</style>")
        if self.items:
            prefix.insert(1, banner_html(overview(self.items)) + TO_TOP_SCRIPT)
            postfix.append(summary_html([RunView("this run", self.items)], banner=False))

    def _environment(self) -> dict[str, Any]:
        """pytest-metadata's dict, which pytest-html's environment table shows (it keeps that
        dict, and writes it out at the end)."""
        try:
            from pytest_metadata.plugin import metadata_key
        except ImportError:  # pragma: no cover - pytest-html requires pytest-metadata
            return {}
        return self.config.stash.setdefault(metadata_key, {})
