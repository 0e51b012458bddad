"""Repo-level test helpers: the tiny models (made locally, cached outside the repo)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).parent
MODELS_CACHE = Path(
    os.environ.get("INFERCHECK_MODELS_CACHE")
    or Path.home() / ".cache" / "pytest-infercheck" / "models"
)


def _make_models_module() -> ModuleType:
    path = REPO / "examples" / "models" / "make_models.py"
    spec = importlib.util.spec_from_file_location("infercheck_make_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    """The trained tiny adder in bf16 and its 8-bit and 4-bit quantizations."""
    paths: dict[str, Path] = _make_models_module().make_variants(MODELS_CACHE / "adder")
    return paths


@pytest.fixture(scope="session")
def random_model() -> Path:
    """A deterministic random-weight tiny llama with the same byte-level tokenizer."""
    path: Path = _make_models_module().make_random_model(MODELS_CACHE / "random", seed=0)
    return path
