"""Per-process plugin state kept on the pytest config: one engine per session and worker,
and the folder through which the controller and its xdist workers share managed servers."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .engine import Engine

ENGINE_KEY = pytest.StashKey["Engine"]()
SERVERS_DIR_KEY = pytest.StashKey[Path]()
WORKER_DIR = "infercheck_servers"
WORKER_CONTROLLER = "infercheck_controller"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def start_controller(config: pytest.Config) -> None:
    """On the controller (or a run without xdist): the shared servers folder."""
    if not is_worker(config):
        config.stash[SERVERS_DIR_KEY] = Path(tempfile.mkdtemp(prefix="infercheck-servers-"))


def worker_input(config: pytest.Config) -> dict[str, Any]:
    """What the controller hands each xdist worker."""
    return {WORKER_DIR: str(config.stash[SERVERS_DIR_KEY]), WORKER_CONTROLLER: os.getpid()}


def engine_for(config: pytest.Config) -> Engine:
    """The session's engine, created on first use (so collection never loads a model)."""
    engine = config.stash.get(ENGINE_KEY, None)
    if engine is None:
        from .engine import Engine
        from .servers import ServerPool

        workerinput = getattr(config, "workerinput", {})
        if WORKER_DIR in workerinput:
            pool = ServerPool(Path(workerinput[WORKER_DIR]), int(workerinput[WORKER_CONTROLLER]))
        else:
            pool = ServerPool(config.stash[SERVERS_DIR_KEY], os.getpid())
        engine = Engine(servers=pool)
        config.stash[ENGINE_KEY] = engine
    return engine


def finish(config: pytest.Config) -> None:
    """Close the engine; on the controller also stop every managed server, once."""
    engine = config.stash.get(ENGINE_KEY, None)
    if engine is not None:
        engine.close()
        del config.stash[ENGINE_KEY]
    folder = config.stash.get(SERVERS_DIR_KEY, None)
    if folder is not None and not is_worker(config):
        if any(folder.glob("*.json")):  # a server was started: stop it (imports httpx)
            from .servers import ServerPool

            ServerPool(folder, os.getpid()).stop_all()
        shutil.rmtree(folder, ignore_errors=True)
