"""pytest hook wiring only; the work lives in collect, runs, checks, metrics and report.

Importing this module must stay cheap: no mlx, numpy or httpx at load time.
"""

from __future__ import annotations

import sys
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from .fixtures import infercheck_engine, infercheck_matrix, infercheck_target, matrix_paths
from .options import add_options, results_path
from .state import finish, is_worker, start_controller, worker_input

__all__ = ["infercheck_engine", "infercheck_matrix", "infercheck_target"]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "infercheck_target(ref): the model@backend for the infercheck_target fixture"
    )
    config.pluginmanager.register(_Summary(), "infercheck-summary")
    if config.pluginmanager.hasplugin("html"):  # pytest-html installed and not -p no:html
        from .report.pytest_html import register

        register(config)
    start_controller(config)
    if config.getoption("infercheck_record", False):
        from .golden_writer import GoldenWriter

        config.pluginmanager.register(GoldenWriter(config), "infercheck-golden-writer")
    if config.getoption("infercheck_shard", None) is not None:
        from .sharding import configured_shard

        configured_shard(config)  # a bad i/n is a usage error before collection
    results = results_path(config)
    if results is not None and not is_worker(config):
        from .report.collector import ResultsCollector

        config.pluginmanager.register(ResultsCollector(config, results), "infercheck-results")
    for path in matrix_paths(config):
        if str(path) not in config.args and path.exists():
            config.args.append(str(path))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    config = parent.config
    patterns = config.getini("infercheck_files")
    explicit = {p.resolve() for p in matrix_paths(config)}
    if any(fnmatch(file_path.name, pat) for pat in patterns) or file_path.resolve() in explicit:
        from .collect import InfercheckFile

        return InfercheckFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("infercheck_shard", None) is not None:  # after -k and -m
        from .sharding import select_shard

        select_shard(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    collect = sys.modules.get("pytest_infercheck.collect")  # loaded only if a matrix was seen
    if collect is not None:
        collect.note_selected(session.items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach what an infercheck item measured to its report as ``report.infercheck`` (plain
    types: xdist ships report attributes to the controller, where reports are written)."""
    report = yield
    if not hasattr(item, "infercheck_record"):
        return report
    from .report.properties import scalar_properties

    report.user_properties = scalar_properties(report.user_properties)
    record = getattr(item, "infercheck_record", None)
    if call.when == "call" and record is not None:
        report.infercheck = record
    elif not report.passed:  # an error or a skip: the item's identity, for the JSON results
        from .report.collector import item_stub

        report.infercheck_item = item_stub(item)
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput.update(worker_input(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "load":
        return None
    from .xdist_scheduling import make_scheduler

    return make_scheduler(config, log)


class _Summary:
    """Collects aggregate results (from this process or, under xdist, from the workers'
    reports) and prints the table at the end of the run."""

    def __init__(self) -> None:
        self.aggregates: list[tuple[str, bool, dict[str, Any]]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, "infercheck", None)
        if report.when == "call" and isinstance(record, dict) and record["role"] == "aggregate":
            self.aggregates.append((report.nodeid, report.passed, record))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.aggregates:
            return
        from .report.terminal import summary_lines

        terminalreporter.write_sep("=", "infercheck summary")
        for line in summary_lines(self.aggregates):
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    finish(config)
