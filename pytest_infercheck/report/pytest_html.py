"""pytest-html hooks: sortable KL / flip / similarity columns, each item's detail view as an
HTML extra, and the summary tables and charts above the results table.

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
import yaml
from pytest_html import extras

from ..checks.framework.kind import Distribution
from ..checks.registry import kind_named
from ..render.markup import CSS, TO_TOP_SCRIPT, esc, mapping
from .html import COLUMNS, result_cells
from .overview import banner_html, item_anchor, overview
from .summary import RunView, summary_html
from .views import item_detail

KEPT_DATA = ("flip", "test", "target")
"""What the banner and the matrix's links read of an item's data (:mod:`.overview`)."""


def slim(record: Mapping[str, Any], dist: Distribution | None) -> dict[str, Any]:
    """What the summary needs of an item that is not an aggregate: its identity, violations
    and :data:`KEPT_DATA`, and the value and group of the distribution its kind draws, so a
    run of many prompts does not keep every output in memory until the end."""
    data = mapping(record.get("data"))
    keep = (*KEPT_DATA, *((dist.group, dist.value) if dist is not None else ()))
    return {
        **{k: record.get(k) for k in ("check", "kind", "suite", "role", "name", "violations")},
        "data": {k: data[k] for k in keep if k in data},
    }


def entry(report: pytest.TestReport) -> dict[str, Any] | None:
    """The summary's entry of an infercheck item's report (None for other reports): the
    whole record of an aggregate, a :func:`slim` one of any other item (its call report);
    the identity of an item that failed before its call, as ``error``."""
    record = getattr(report, "infercheck", None)
    if report.when == "call" and isinstance(record, Mapping):
        kind = kind_named(record.get("kind"))
        dist = None if kind is None else kind.present.distribution
        kept = dict(record) if record.get("role") == "aggregate" else slim(record, dist)
        return {**kept, "nodeid": report.nodeid, "outcome": report.outcome}
    stub = getattr(report, "infercheck_item", None)
    if report.when == "setup" and report.failed and isinstance(stub, Mapping):
        return {**stub, "nodeid": report.nodeid, "outcome": "error", "longrepr": _last(report)}
    return None


def _last(report: pytest.TestReport) -> str:
    lines = str(report.longrepr or "").strip().splitlines()
    return lines[-1] if lines else ""


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


def matrix_title(paths: Iterable[Path]) -> str | None:
    """The ``settings: title:`` of the matrices (read as plain YAML; several joined with
    `` · ``), None when none writes one."""
    titles: list[str] = []
    for path in paths:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        title = mapping(mapping(data).get("settings")).get("title")
        if isinstance(title, str) and title.strip() and title not in titles:
            titles.append(title.strip())
    return " · ".join(titles) or None


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
        """``--infercheck-title``, else the matrices' ``title`` setting, else
        ``infercheck: `` and the matrices' file names."""
        given = self.config.getoption("infercheck_title", None)
        if given:
            return str(given)
        files = dict.fromkeys(str(i.get("nodeid", "")).split("::")[0] for i in self.items)
        root = self.config.rootpath
        written = matrix_title(root / f for f in files if f)
        return written or "infercheck: " + (", ".join(f for f in files if f) or "no matrix")

    def pytest_html_report_title(self, report: Any) -> None:
        self.report_data = report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = entry(report)
        if found is not None:
            self.items.append(found)
        record = getattr(report, "infercheck", None)
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
            prefix.insert(1, banner_html(overview(self.items), title) + TO_TOP_SCRIPT)
            postfix.append(summary_html([RunView("this run", self.items)], banner=False))

    def _environment(self) -> dict[str, Any]:
        """pytest-metadata's dict, which pytest-html's environment table shows (it keeps that
        dict, and writes it out at the end)."""
        try:
            from pytest_metadata.plugin import metadata_key
        except ImportError:  # pragma: no cover - pytest-html requires pytest-metadata
            return {}
        return self.config.stash.setdefault(metadata_key, {})
