"""Fixtures for plugin tests that run real mlx-lm on the tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy  # noqa: F401
import pytest

from .helpers import matrix_yaml, suite_jsonl
from .quickstart_run import quickstart_run  # noqa: F401 (the fixture, shared by modules)

# Collecting a matrix imports the check kinds and with them numpy, whose C extension cannot be
# loaded twice in one process; pytester's in-process runs unload what they imported, so numpy
# is imported here, outside them, once.

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture(autouse=True)
def _inner_ini(pytester: pytest.Pytester) -> None:
    """An ini for the inner runs (pytest-asyncio warns when its loop scope is unset)."""
    pytester.makefile(".ini", pytest=INI)


@pytest.fixture
def write_matrix(pytester: pytest.Pytester, tiny_models: dict[str, Path]) -> Any:
    """Write addition.jsonl and an infercheck.yaml with the given checks block."""
    pytester.makefile(".jsonl", addition=suite_jsonl())

    def write(checks: str, **kwargs: Any) -> None:
        pytester.makefile(".yaml", infercheck=matrix_yaml(tiny_models, checks, **kwargs))

    return write
