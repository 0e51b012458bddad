"""When managed servers stop, and what the run tells about them: a pytest plugin object
(:class:`ServerLifecycle`, registered by :mod:`.state` in every process; the servers
folder and the generation cache it reads are in :mod:`.stash`).

- **Stopped once no remaining item needs it.** After collection each process counts, per
  server (:attr:`~.servers.ServerSpec.key`), the selected items that may use it
  (:func:`item_servers`: an infercheck item, the servers of its check's sides; a Python test
  that uses ``infercheck_engine``: unknown, counted as :data:`.servers.ANY`). After each item the
  process adds it to the run's counts of finished items (a file in the servers folder, so
  xdist workers add up: each worker runs only some items and never knows what it will be
  given next); the item that finishes a server's last item (and every item of unknown use)
  stops it, waiting until it is gone, so two large servers of one session do not live at
  once. Every process collects the same items, so they all count the same totals. An item
  that never finishes (a crashed worker, ``-x``) leaves its servers to the end of the run.
- **How long a server took to start** is shown on the item that started it (a report
  section ``infercheck servers`` and the user property ``infercheck_server_started``), and
  in the terminal summary.
- **Logs of a failed run are kept.** The servers folder lives in pytest's base temporary
  folder (``basetemp``: pytest keeps the last 3 runs' and removes older ones). At the end
  the controller stops every server; if the run failed (an exit status other than 0 or 5,
  or a server that failed to start or died) it keeps the servers' logs there and prints
  their folder, else it removes the folder: a passing run leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .stash import GENERATION_CACHE_KEY, SERVERS_DIR_KEY, generation_cache_for

if TYPE_CHECKING:
    from .servers import ServerPool, ServerState


def item_servers(item: pytest.Item, memo: dict[int, frozenset[str]]) -> frozenset[str] | None:
    """The keys of the managed servers ``item`` may use; None when unknown (a Python test
    using ``infercheck_engine``, directly or through ``infercheck_target``). ``memo`` keeps
    each check's answer (by its collector) for its other items."""
    collect = sys.modules.get("pytest_infercheck.collect")  # not imported: no infercheck item
    if collect is not None and isinstance(item, collect.PlannedItem | collect.AggregateItem):
        checker = item.suite_node.check_collector
        if id(checker) not in memo:
            memo[id(checker)] = check_servers(checker.loaded, checker.check, checker.index)
        return memo[id(checker)]
    if "infercheck_engine" in getattr(item, "fixturenames", ()):
        return None
    return frozenset()


def check_servers(loaded: Any, check: Any, index: int) -> frozenset[str]:
    """The keys of the managed servers behind a check's sides (its baseline and tests), as
    :meth:`~.generation_cache.GenerationCache.resolve` starts them."""
    from .servers import server_spec
    from .yamlpos import SourceError

    keys = set()
    for side in [check.baseline_side(index), *check.test_sides(index)]:
        target = loaded.target(side.ref, side.loc)
        spec = loaded.matrix.backends.get(target.backend)
        if target.golden is not None or spec is None or spec.serve is None:
            continue
        try:
            source, _ = loaded.model_source(target.model, spec.kind)
        except SourceError:
            continue  # no model to serve: the items fail without starting anything
        keys.add(server_spec(spec, source).key)
    return frozenset(keys)


def needed_counts(items: list[pytest.Item]) -> Counter[str]:
    """Per server key, how many of ``items`` may use it; :data:`.servers.ANY` counts the
    items of unknown use. Empty when no item uses a managed server (then :mod:`.servers`, with
    the backends' specs, is not imported: a run without a matrix pays nothing for it)."""
    memo: dict[int, frozenset[str]] = {}
    uses = [item_servers(item, memo) for item in items]
    if not any(uses):  # None (unknown use) and empty sets alike
        return Counter()
    from .servers import ANY

    counts: Counter[str] = Counter()
    for keys in uses:
        counts.update([ANY] if keys is None else keys)
    return counts


class ServerLifecycle:
    """See the module docstring; ``pool`` gives this process's server pool (created on first
    use) and ``folder`` the servers folder if one was made."""

    def __init__(self, config: pytest.Config, controller: bool) -> None:
        self.config = config
        self.controller = controller
        self.needed: Counter[str] = Counter()
        self.memo: dict[int, frozenset[str]] = {}
        self.summary: list[str] = []

    def _pool(self) -> ServerPool | None:
        return generation_cache_for(self.config).servers

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.needed = needed_counts(session.items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        try:
            return (yield)
        finally:
            self._show_started(item)

    def _show_started(self, item: pytest.Item) -> None:
        cache = self.config.stash.get(GENERATION_CACHE_KEY, None)
        if cache is None or cache.servers is None:
            return
        for started in cache.servers.take_started():
            text = started_line(started.name, started.startup_s, started.log)
            item.add_report_section("call", "infercheck servers", text)
            item.user_properties.append(("infercheck_server_started", text))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        try:
            return (yield)
        finally:
            keys = item_servers(item, self.memo) if self.needed else frozenset()
            pool = self._pool() if keys != frozenset() else None
            if pool is not None:
                from .servers import ANY

                pool.finished_item([ANY] if keys is None else sorted(keys), self.needed)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The controller stops every server still running, then keeps the logs of a
        failed run or removes the folder of a passing one (before pytest's own end-of-session
        clean-up of its temporary folders)."""
        folder = self.config.stash.get(SERVERS_DIR_KEY, None)
        if not self.controller or folder is None:
            return
        del self.config.stash[SERVERS_DIR_KEY]
        failed = int(exitstatus) not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
        self.summary = close_servers_dir(folder, failed)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary:
            terminalreporter.write_sep("-", "infercheck servers")
            for line in self.summary:
                terminalreporter.write_line(line)


def started_line(name: str, startup_s: float, log: str | None = None) -> str:
    where = "" if log is None else f" (log {log})"
    return f"server {name!r} started in {startup_s:.2f} s{where}"


def close_servers_dir(folder: Path, failed: bool) -> list[str]:
    """Stop every server recorded in ``folder``; keep its logs if the run ``failed`` or a
    server failed, else remove it. Returns the lines of the terminal summary."""
    from .servers import ServerPool

    pool = ServerPool(folder, os.getpid())
    states: list[ServerState] = pool.states()
    pool.stop_all()
    keep = failed or pool.had_failures()
    lines = [started_line(s.name, s.startup_s) for s in states]
    if keep and any(folder.glob("*.log")):
        for path in folder.iterdir():
            if path.suffix not in (".log", ".exit", ".failed"):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        lines.append(f"server logs kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return lines
