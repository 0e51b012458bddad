"""Repo-level test helpers: the tiny models and the realistic models (real tokenizers and chat
templates, random weights), made locally and cached outside the repo."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).parent
MODELS_CACHE = Path(
    os.environ.get("INFERCHECK_MODELS_CACHE")
    or Path(os.environ.get("INFERCHECK_CACHE") or Path.home() / ".cache" / "pytest-infercheck")
    / "models"
)
"""The tests' models: ``$INFERCHECK_MODELS_CACHE``, else ``models`` under the cache root that the
scripts and ``examples/models`` use (``$INFERCHECK_CACHE``, else ``~/.cache/pytest-infercheck``),
so that one variable moves every cached thing (a cold run: ``INFERCHECK_CACHE=$(mktemp -d)``)."""


def _make_models_module() -> ModuleType:
    path = REPO / "examples" / "models" / "make_models.py"
    spec = importlib.util.spec_from_file_location("infercheck_make_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def _adder_folders() -> dict[str, Path]:
    """Every folder ``make_models.py`` writes: the adder's levels and its draft model."""
    paths: dict[str, Path] = _make_models_module().make_variants(MODELS_CACHE / "adder")
    return paths


@pytest.fixture(scope="session")
def tiny_models(_adder_folders: dict[str, Path]) -> dict[str, Path]:
    """The trained tiny adder in bf16 and its 8-bit and 4-bit quantizations (the models a
    test matrix lists: ``bf16``, ``q8``, ``q4``)."""
    return {level: _adder_folders[level] for level in ("bf16", "q8", "q4")}


@pytest.fixture(scope="session")
def tiny_draft(_adder_folders: dict[str, Path]) -> Path:
    """The adder's draft model (``tiny-draft``: its first layer, same tokenizer)."""
    return _adder_folders["draft"]


@pytest.fixture(scope="session")
def tiny_tool() -> Path:
    """The trained tiny tool-calling model (``tiny-tool``: Qwen 2.5 chat template, Hermes-format
    ``<tool_call>`` blocks, the four tools of the ``tool-use`` suite), a copy of the committed
    folder with its f32 GGUF inside (:func:`tiny_tool_gguf`)."""
    path: Path = _make_models_module().make_tool_model(MODELS_CACHE / "tool" / tool_cache_key())
    return path


def tool_cache_key() -> str:
    """The committed tool model's own cache folder name (its files' hash): a worktree with
    another tool model builds beside this one instead of replacing a folder that another
    session's servers may be reading."""
    module = _make_models_module()
    return str(module.dir_hash(module.TOOL_SOURCE_DIR))[:12]


@pytest.fixture(scope="session")
def tiny_tool_gguf(tiny_tool: Path) -> Path:
    """The tool-calling model's f32 GGUF (inside the ``tiny_tool`` folder; carries the chat
    template, so llama-server serves it with ``--jinja``)."""
    path: Path = _make_models_module().tool_gguf(tiny_tool)
    return path


@pytest.fixture(scope="session")
def random_model() -> Path:
    """A deterministic random-weight tiny llama with the same byte-level tokenizer."""
    path: Path = _make_models_module().make_random_model(MODELS_CACHE / "random", seed=0)
    return path


@pytest.fixture(scope="session")
def tiny_lora(tiny_models: dict[str, Path]) -> Any:
    """The tiny adder's rank-4 LoRA (``make_lora.Lora``: ``adapter`` folder in mlx-lm and PEFT
    formats, ``merged`` float32 model), made from the cached bf16 adder."""
    return load_example("make_lora").make_lora(MODELS_CACHE / "lora", base=tiny_models["bf16"])


@pytest.fixture(scope="session")
def tiny_lora2(tiny_models: dict[str, Path]) -> Any:
    """A second LoRA of the tiny adder (``make_lora`` seed 1: other random matrices, its own
    folder ``tiny-adder-lora-seed1``), served beside ``tiny_lora`` by the isolation tests."""
    make = load_example("make_lora").make_lora
    return make(MODELS_CACHE / "lora", base=tiny_models["bf16"], seed=1)


def load_example(name: str) -> ModuleType:
    """``examples/models/<name>.py`` as a module, registered in ``sys.modules`` (its
    dataclasses look their module up there); loaded once per process."""
    key = f"infercheck_example_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            key, REPO / "examples" / "models" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


@pytest.fixture(scope="session")
def realistic_qwen() -> Any:
    """A tiny random Qwen3 (``make_realistic.Realistic``): the qwen35 vocabulary (151,936
    ids, Qwen3's added tokens), the Qwen3 chat template (``enable_thinking``), HF folder and
    f32 GGUF."""
    return load_example("make_realistic").make_realistic(
        MODELS_CACHE / "realistic" / "qwen3-s0", "qwen35", seed=0
    )


@pytest.fixture(scope="session")
def realistic_qwen2() -> Any:
    """A tiny random Qwen2 (``make_realistic.Realistic``): the qwen2 vocabulary (151,643 ids
    and Qwen 2.5's added tokens), the Qwen2.5 chat template, HF folder and f32 GGUF; head size
    32, so vLLM's CPU build serves it."""
    return load_example("make_realistic").make_realistic(
        MODELS_CACHE / "realistic" / "qwen2-s0", "qwen2", seed=0
    )


LONG_CONTEXT = 128
"""The original context of the long-context variants (:func:`realistic_long`): 0.5x of it
(64 tokens) still holds the Llama 3.1 template's own 35 tokens, and 4x is 512 tokens."""
LONG_VARIANTS = ("linear", "llama3", "yarn")


def realistic_long(rope: str | None, context: int = LONG_CONTEXT) -> Any:
    """The tiny random Llama 3 of :func:`realistic_llama3` with an original context of
    ``context`` tokens and RoPE scaling ``rope`` by 8 (None: none), in the cache. The weights
    are the same for every variant (same seed, same shapes)."""
    made = load_example("make_realistic")
    long = made.LongContext(context, rope, 8.0)
    name = f"llama3-ctx{context}-{rope or 'plain'}-s0"
    return made.make_realistic(MODELS_CACHE / "realistic" / name, "llama-bpe", seed=0, long=long)


SWA_WINDOW = 128
"""The sliding window of :func:`realistic_swa`: the ``context-ladder`` is anchored at it
(0.5x, 1x, 2x and 4x = 64, 128, 256 and 512 tokens, as the RoPE variants' ladder)."""
SWA_CONTEXT = 1024
"""Its context (``max_position_embeddings``): 4x the window and the generated tokens fit."""


def realistic_swa(window: int = SWA_WINDOW) -> Any:
    """A tiny random Gemma 3 text model (``make_realistic --arch gemma3``, the llama-bpe
    vocabulary and the Llama 3.1 template) with a context of 1024 and a sliding window of
    ``window`` tokens, in the cache. The weights are the same for every window (same seed,
    same shapes): a window of 1024 or more is the same model with no window in effect."""
    made = load_example("make_realistic")
    long = made.LongContext(SWA_CONTEXT)
    name = f"gemma3-ctx{SWA_CONTEXT}-swa{window}-s0"
    return made.make_realistic(
        MODELS_CACHE / "realistic" / name,
        "llama-bpe",
        seed=0,
        long=long,
        arch="gemma3",
        sliding_window=window,
    )


@pytest.fixture(scope="session")
def realistic_llama3() -> Any:
    """A tiny random Llama 3 (``make_realistic.Realistic``): the llama-bpe vocabulary (128,256
    ids, BOS added by the tokenizer) and the Llama 3.1 chat template, HF folder and f32 GGUF."""
    return load_example("make_realistic").make_realistic(
        MODELS_CACHE / "realistic" / "llama3-s0", "llama-bpe", seed=0
    )
