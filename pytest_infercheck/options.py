"""Command-line and ini options, and how they override the YAML ``settings:``.

Precedence: command line over ini over YAML. ``max_tokens``, when set anywhere, replaces
every prompt's own ``max_tokens``; ``num_prompts`` keeps the first N prompts of each suite.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .matrix import Settings

INT_OPTIONS = {
    "num_prompts": "keep the first N prompts of every suite",
    "max_tokens": "generate at most N tokens per prompt (replaces the suites' own max_tokens)",
}
DEFAULT_FILE_PATTERNS = "infercheck*.yaml infercheck*.yml"
ASYNCIO_LOOP_SCOPE = "asyncio_default_fixture_loop_scope"
"""pytest-asyncio's ini key, which the quickstart's and ``init``'s ``pytest.ini`` set so that
pytest-asyncio (where installed) prints no deprecation warning."""


def add_asyncio_scope(parser: pytest.Parser) -> None:
    """Declare :data:`ASYNCIO_LOOP_SCOPE` where pytest-asyncio is not installed (it declares
    it itself), so a ``pytest.ini`` that sets it draws no "Unknown config option" warning."""
    if importlib.util.find_spec("pytest_asyncio") is None:
        parser.addini(ASYNCIO_LOOP_SCOPE, "read by pytest-asyncio (not installed): ignored")


def add_options(parser: pytest.Parser) -> None:
    add_asyncio_scope(parser)
    group = parser.getgroup("infercheck", "inference-engine correctness checks")
    for name, help_text in INT_OPTIONS.items():
        flag = "--infercheck-" + name.replace("_", "-")
        group.addoption(flag, dest=f"infercheck_{name}", type=int, default=None, help=help_text)
        parser.addini(f"infercheck_{name}", help_text + " (ini)", default=None)
    group.addoption(
        "--infercheck-config",
        dest="infercheck_config",
        action="append",
        default=[],
        metavar="PATH",
        help="collect this matrix YAML even if its name does not match infercheck_files",
    )
    parser.addini(
        "infercheck_config", "matrix YAML files to collect (paths from rootdir)", type="args"
    )
    group.addoption(
        "--infercheck-thinking",
        dest="infercheck_thinking",
        action="store_true",
        default=None,
        help="let models think (chat templates get enable_thinking=True); off by default",
    )
    group.addoption(
        "--infercheck-title",
        dest="infercheck_title",
        default=None,
        metavar="TEXT",
        help="the HTML report's title and the job summary's heading (default: the matrix's "
        "title setting, else its file name)",
    )
    group.addoption(
        "--infercheck-record",
        dest="infercheck_record",
        action="store_true",
        default=False,
        help="record the test side of each compare against a golden:NAME baseline into the "
        "golden's file, instead of comparing",
    )
    group.addoption(
        "--infercheck-no-batching",
        dest="infercheck_no_batching",
        action="store_true",
        default=False,
        help="generate and score comparisons one prompt at a time (no batched or lockstep "
        "batches, whatever the probes say)",
    )
    group.addoption(
        "--infercheck-results",
        dest="infercheck_results",
        default=None,
        metavar="PATH",
        help="write every infercheck item's results to this JSON file at the end of the run",
    )
    parser.addini("infercheck_results", "JSON results file written at the end of the run")
    group.addoption(
        "--infercheck-repro",
        dest="infercheck_repro",
        default=None,
        metavar="DIR",
        help="write a repro bundle (a matrix and suite of the item alone, its HTTP requests "
        "and answers, BUG.md) into DIR/<item> for every failed infercheck item",
    )
    group.addoption(
        "--infercheck-shard",
        dest="infercheck_shard",
        default=None,
        metavar="I/N",
        help="run shard I of N (1-based): a deterministic share of the items, by node id",
    )
    group.addoption(
        "--infercheck-run-id",
        dest="infercheck_run_id",
        default=None,
        metavar="ID",
        help="id of this run in the results file; shards of one run must share it "
        "(default: the CI run id or a fingerprint of the matrices and arguments)",
    )
    parser.addini(
        "infercheck_files",
        "glob patterns of matrix YAML files collected automatically",
        type="args",
        default=DEFAULT_FILE_PATTERNS.split(),
    )


def _int_option(config: pytest.Config, name: str) -> int | None:
    value = config.getoption(f"infercheck_{name}")
    if value is None:
        raw = config.getini(f"infercheck_{name}")
        if raw in (None, ""):
            return None
        try:
            value = int(str(raw))
        except ValueError:
            raise pytest.UsageError(
                f"ini option infercheck_{name} must be an integer: {raw!r}"
            ) from None
    if value <= 0:
        raise pytest.UsageError(f"infercheck {name} must be positive, got {value}")
    return int(value)


def effective_settings(config: pytest.Config, settings: Settings) -> Settings:
    """``settings`` from the YAML with command-line and ini values laid over them."""
    update: dict[str, object] = {}
    for name in INT_OPTIONS:
        value = _int_option(config, name)
        if value is not None:
            update[name] = value
    if config.getoption("infercheck_thinking"):
        update["thinking"] = True
    if config.getoption("infercheck_record", False):
        update["record"] = True
    if config.getoption("infercheck_no_batching", False):
        update["batching"] = False
    return settings.model_copy(update=update)


def results_path(config: pytest.Config) -> Path | None:
    """Where to write the JSON results: ``--infercheck-results``, else ini ``infercheck_results``
    (relative to the rootdir), else None."""
    value = config.getoption("infercheck_results", None)
    if value:
        return Path(value)
    raw = config.getini("infercheck_results")
    return config.rootpath / str(raw) if raw else None


def matrix_paths(config: pytest.Config) -> list[Path]:
    """Matrix files named by ``--infercheck-config`` and the ini, relative to rootdir."""
    names = list(config.getoption("infercheck_config")) + list(config.getini("infercheck_config"))
    return [p if p.is_absolute() else config.rootpath / p for p in map(Path, names)]


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (not the controller, not a plain run)."""
    return hasattr(config, "workerinput")
