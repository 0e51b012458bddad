"""What a pytest process keeps in its config's stash: the folder of managed servers shared
with xdist workers, and the process's generation cache, each made on first use.

Below everything that reads them (:mod:`.state`, :mod:`.collect`, :mod:`.server_lifecycle`,
:mod:`.fixtures`): those hand-offs import this module, never each other.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .generation_cache import GenerationCache

GENERATION_CACHE_KEY = pytest.StashKey["GenerationCache"]()
SERVERS_DIR_KEY = pytest.StashKey[Path]()
WORKER_DIR = "infercheck_servers"
"""The xdist worker input naming the controller's servers folder."""
WORKER_CONTROLLER = "infercheck_controller"
"""The xdist worker input holding the controller's pid."""
FOLDER_NAME = "infercheck-servers"


def new_servers_dir(config: pytest.Config) -> Path:
    """A fresh servers folder in pytest's base temporary folder (where pytest keeps the last
    runs' folders), or in the system's temporary folder when pytest's is off."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return Path(tempfile.mkdtemp(prefix=f"{FOLDER_NAME}-"))
    folder: Path = factory.getbasetemp() / FOLDER_NAME
    folder.mkdir()
    return folder


def servers_dir(config: pytest.Config) -> Path:
    """The controller's folder of managed servers, made on first use (see
    :mod:`.server_lifecycle`: where it lives and when it is removed)."""
    folder = config.stash.get(SERVERS_DIR_KEY, None)
    if folder is None:
        folder = config.stash[SERVERS_DIR_KEY] = new_servers_dir(config)
    return folder


def generation_cache_for(config: pytest.Config) -> GenerationCache:
    """The process's generation cache, with its server pool, created on first use (so
    collection never loads a model)."""
    cache = config.stash.get(GENERATION_CACHE_KEY, None)
    if cache is None:
        from .generation_cache import GenerationCache  # the backends: numpy
        from .servers import ServerPool

        workerinput = getattr(config, "workerinput", {})
        if WORKER_DIR in workerinput:
            pool = ServerPool(Path(workerinput[WORKER_DIR]), int(workerinput[WORKER_CONTROLLER]))
        else:
            pool = ServerPool(servers_dir(config), os.getpid())
        cache = GenerationCache(servers=pool, hook=config.hook)
        config.stash[GENERATION_CACHE_KEY] = cache
    return cache
