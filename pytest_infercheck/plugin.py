"""pytest hook wiring only: each hook hands off to the module that does the work.

Importing this module must stay cheap (``pytest --help`` in a project with the plugin
installed): no mlx, numpy, httpx or pydantic. The matrix layer (config, collection, the check
kinds) is imported when a matrix file is collected; the controller's reporters are imported
when their option asks for them (see :mod:`.state`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .fixtures import infercheck_engine, infercheck_matrix, infercheck_target
from .options import add_options
from .report.item_report import attach_record
from .state import (
    add_hookspecs,
    collect_matrix_file,
    configure,
    configure_node,
    finish,
    select_items,
    write_repro,
)

__all__ = ["infercheck_engine", "infercheck_matrix", "infercheck_target"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    add_hookspecs(pluginmanager)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    configure(config)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    return collect_matrix_file(file_path, parent)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    select_items(config, items)  # after -k and -m


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    return attach_record(item, call, write_repro(item, call, report))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "load":
        return None
    from .xdist_scheduling import make_scheduler  # xdist, and the registry of kinds

    return make_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    finish(config)
