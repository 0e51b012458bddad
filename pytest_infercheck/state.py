"""The plugin's per-process state, in the config's stash, and the hand-offs of its hooks.

Registered only where needed, as pytest's junitxml does: the controller (or a run without
xdist) keeps the folder of managed servers shared with its workers and the reporters (terminal
summary, JSON results, HTML); every process keeps its generation cache and, under
``--infercheck-record``, the golden writer. Everything is unregistered at unconfigure.

Imports of the pydantic- and numpy-based layers (config, collection, the kinds, the
reporters) happen inside these functions, when an option or a matrix asks for them, so that
loading the plugin stays cheap.
"""

from __future__ import annotations

import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from .fast_exit import freeze_at_exit
from .golden import GoldenWriter
from .options import is_worker, matrix_paths, results_path
from .report.env import step_summary_path
from .report.terminal_plugin import TerminalSummary
from .server_lifecycle import ServerLifecycle, close_servers_dir
from .stash import (
    GENERATION_CACHE_KEY,
    SERVERS_DIR_KEY,
    WORKER_CONTROLLER,
    WORKER_DIR,
    servers_dir,
)

PLUGINS_KEY = pytest.StashKey[list[object]]()
"""The plugin objects this process registered, unregistered at unconfigure."""


def _register(config: pytest.Config, plugin: object, name: str) -> None:
    config.pluginmanager.register(plugin, name)
    config.stash.setdefault(PLUGINS_KEY, []).append(plugin)


def add_hookspecs(pluginmanager: pytest.PytestPluginManager) -> None:
    """``pytest_addhooks``: the plugin's own hooks (:mod:`.hookspecs`)."""
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def configure(config: pytest.Config) -> None:
    """``pytest_configure``: the marker, the shared servers folder and the reporters on the
    controller, the golden writer, the shard option checked, matrices named by options
    added to the arguments."""
    config.addinivalue_line(
        "markers", "infercheck_target(ref): the model@backend for the infercheck_target fixture"
    )
    _register(config, ServerLifecycle(config, not is_worker(config)), "infercheck-servers")
    if not is_worker(config):
        _register(config, TerminalSummary(), "infercheck-summary")
        if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
            from .report.pytest_html import HtmlReport  # pytest-html, and the kinds' views

            start = config.invocation_params.dir
            html_dir = (start / config.getoption("htmlpath")).resolve().parent
            _register(config, HtmlReport(config, start, html_dir), "infercheck-html")
        summary = step_summary_path()
        if summary is not None:
            from .report.step_summary import StepSummary  # the kinds' verdicts

            _register(config, StepSummary(config, summary), "infercheck-step-summary")
        results = results_path(config)
        if results is not None:
            from .report.collector import ResultsCollector  # pydantic (results schema)

            _register(config, ResultsCollector(config, results), "infercheck-results")
    if config.getoption("infercheck_repro", None):
        from .report.repro import start_recording  # httpx

        start_recording(config)
    if config.getoption("infercheck_record", False):
        _register(config, GoldenWriter(config), "infercheck-golden-writer")
    if config.getoption("infercheck_shard", None) is not None:
        from .sharding import configured_shard  # the collection layer (pydantic)

        configured_shard(config)  # a bad i/n is a usage error before collection
    for path in matrix_paths(config):
        if str(path) not in config.args and path.exists():
            config.args.append(str(path))


def collect_matrix_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """``pytest_collect_file``: a YAML file matching ``infercheck_files`` or named by
    ``--infercheck-config`` is a matrix."""
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    config = parent.config
    patterns = config.getini("infercheck_files")
    explicit = {p.resolve() for p in matrix_paths(config)}
    if any(fnmatch(file_path.name, pat) for pat in patterns) or file_path.resolve() in explicit:
        from .collect import InfercheckFile  # the matrix layer: pydantic and the kinds

        freeze_at_exit()
        return InfercheckFile.from_parent(parent, path=file_path)
    return None


def select_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``pytest_collection_modifyitems``: keep this shard's items."""
    if config.getoption("infercheck_shard", None) is not None:
        from .sharding import select_shard  # the collection layer (pydantic)

        select_shard(config, items)


def write_repro(item: pytest.Item, call: pytest.CallInfo[None], report: Any) -> Any:
    """``pytest_runtest_makereport``: under ``--infercheck-repro``, a failed infercheck
    item's repro bundle (:mod:`.report.repro`); returns ``report``."""
    if item.config.getoption("infercheck_repro", None) and call.when == "call" and report.failed:
        from .report.repro import write_item_repro

        write_item_repro(item, report)
    return report


def configure_node(node: Any) -> None:
    """``pytest_configure_node`` (xdist): what the controller hands each worker."""
    node.workerinput.update(
        {WORKER_DIR: str(servers_dir(node.config)), WORKER_CONTROLLER: os.getpid()}
    )


def finish(config: pytest.Config) -> None:
    """``pytest_unconfigure``: close the generation cache (its backends); on the controller,
    if the session did not finish (its servers are stopped at session finish, see
    :mod:`.server_lifecycle`), stop every managed server and keep their logs; unregister
    this process's plugin objects."""
    cache = config.stash.get(GENERATION_CACHE_KEY, None)
    if cache is not None:
        cache.close()
        del config.stash[GENERATION_CACHE_KEY]
    folder = config.stash.get(SERVERS_DIR_KEY, None)
    if folder is not None and not is_worker(config):  # the session did not finish
        close_servers_dir(folder, failed=True)
        del config.stash[SERVERS_DIR_KEY]
    if config.getoption("infercheck_repro", None):
        from .report.repro import stop_recording

        stop_recording(config)
    for plugin in config.stash.get(PLUGINS_KEY, []):
        config.pluginmanager.unregister(plugin)
    config.stash[PLUGINS_KEY] = []
