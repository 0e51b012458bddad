"""Per-process plugin state kept on the pytest config (one engine per session and worker)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .engine import Engine

ENGINE_KEY = pytest.StashKey["Engine"]()


def engine_for(config: pytest.Config) -> Engine:
    """The session's engine, created on first use (so collection never loads a model)."""
    engine = config.stash.get(ENGINE_KEY, None)
    if engine is None:
        from .engine import Engine

        engine = Engine()
        config.stash[ENGINE_KEY] = engine
    return engine


def close_engine(config: pytest.Config) -> None:
    engine = config.stash.get(ENGINE_KEY, None)
    if engine is not None:
        engine.close()
        del config.stash[ENGINE_KEY]
