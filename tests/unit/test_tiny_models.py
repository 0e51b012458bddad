"""The committed tiny-adder model and examples/models/make_models.py (mlx_lm, CPU, offline)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import mlx.core as mx
import mlx_lm
import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "examples" / "models"
ADDER_DIR = MODELS_DIR / "tiny-adder"

# Pairs the model card's bf16 model answers correctly with mlx_lm greedy. (Its few wrong
# answers, listed in the card, are all single-digit + single-digit, e.g. 0+0.)
FIXED_PAIRS = [(3, 4), (9, 1), (37, 48), (50, 50), (99, 99), (12, 7), (64, 36), (0, 57)]


def _load_make_models() -> ModuleType:
    name = "infercheck_example_make_models"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MODELS_DIR / "make_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mm() -> ModuleType:
    return _load_make_models()


@pytest.fixture(scope="module")
def adder() -> tuple[Any, Any]:
    model, tokenizer = mlx_lm.load(str(ADDER_DIR))
    return model, tokenizer


def test_committed_files_are_small_and_bf16() -> None:
    weights = ADDER_DIR / "model.safetensors"
    assert weights.stat().st_size < 2_000_000
    config = json.loads((ADDER_DIR / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["torch_dtype"] == "bfloat16"
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)
    assert config["tie_word_embeddings"] is False
    tok_config = json.loads((ADDER_DIR / "tokenizer_config.json").read_text())
    assert "chat_template" not in tok_config
    # safetensors header: every tensor is BF16
    raw = weights.read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert dtypes == {"BF16"}


def test_tokenizer_layout(adder: tuple[Any, Any], mm: ModuleType) -> None:
    _, tok = adder
    assert tok.convert_tokens_to_ids(["<unk>", "<s>", "</s>"]) == [0, 1, 2]
    assert tok.bos_token_id == 1 and tok.eos_token_id == 2
    # one token per byte, id = byte + 3, no implicit BOS
    assert tok.encode("37+48=", add_special_tokens=True) == [54, 58, 46, 55, 59, 64]
    assert tok.encode("<s>37+48=") == mm.prompt_ids(37, 48)
    assert tok.encode("é ✓") == [b + 3 for b in "é ✓".encode()]
    assert tok.decode([54, 58, 46, 55, 59, 64, 59, 56]) == "37+48=85"


def test_fixed_pairs_greedy(adder: tuple[Any, Any], mm: ModuleType) -> None:
    model, _ = adder
    answers = mm.adder_answers(model, FIXED_PAIRS)
    assert answers == [str(a + b) for a, b in FIXED_PAIRS]


def test_accuracy_on_fixed_sample(adder: tuple[Any, Any], mm: ModuleType) -> None:
    model, _ = adder
    pairs = mm.sample_pairs(100, seed=0)
    assert len(set(pairs)) == 100
    assert mm.adder_accuracy(model, pairs) >= 0.7


def test_make_variants_load_and_generate(tmp_path: Path, mm: ModuleType) -> None:
    paths = mm.make_variants(tmp_path, bits=(8, 4), group_size=32)
    assert set(paths) == {"bf16", "q8", "q4", "draft"}
    assert paths["q4"] == tmp_path / "tiny-q4"
    sizes = {k: (p / "model.safetensors").stat().st_size for k, p in paths.items()}
    assert sizes["q4"] < sizes["q8"] < sizes["bf16"]
    assert sizes["draft"] < sizes["bf16"]

    pairs = FIXED_PAIRS[:4]
    for key in ("q8", "q4"):
        config = json.loads((paths[key] / "config.json").read_text())
        assert config["quantization"]["bits"] == int(key[1:])
        assert config["quantization"]["group_size"] == 32
        model, _ = mlx_lm.load(str(paths[key]))
        answers = mm.adder_answers(model, pairs)
        assert all(a is None or a.isdigit() for a in answers)
        assert sum(a == str(x + y) for a, (x, y) in zip(answers, pairs, strict=True)) >= 2

    # idempotent: a second call reuses the stamped folders untouched
    mtimes = {k: (p / "model.safetensors").stat().st_mtime_ns for k, p in paths.items()}
    again = mm.make_variants(tmp_path, bits=(8, 4), group_size=32)
    assert again == paths
    assert {k: (p / "model.safetensors").stat().st_mtime_ns for k, p in again.items()} == mtimes


def test_make_draft_is_the_first_layer(tmp_path: Path, mm: ModuleType) -> None:
    """The draft: the adder's first decoder layer with its embeddings, norm and head, and
    the adder's tokenizer files byte for byte."""
    draft = mm.make_draft(tmp_path)
    assert json.loads((draft / "config.json").read_text())["num_hidden_layers"] == 1
    weights = mx.load(str(draft / "model.safetensors"))
    source = mx.load(str(mm.SOURCE_DIR / "model.safetensors"))
    assert set(weights) == {n for n in source if not n.startswith("model.layers.1.")}
    assert all(mx.array_equal(weights[n], source[n]).item() for n in weights)
    for f in mm.TOKENIZER_FILES:
        assert (draft / f).read_bytes() == (mm.SOURCE_DIR / f).read_bytes()
    model, _ = mlx_lm.load(str(draft))
    assert len(model.layers) == 1


def test_make_random_model_is_deterministic(tmp_path: Path, mm: ModuleType) -> None:
    p0 = mm.make_random_model(tmp_path / "a", seed=0)
    p0b = mm.make_random_model(tmp_path / "b", seed=0)
    p1 = mm.make_random_model(tmp_path / "a", seed=1)
    w = "model.safetensors"
    assert (p0 / w).read_bytes() == (p0b / w).read_bytes()
    assert (p0 / w).read_bytes() != (p1 / w).read_bytes()
    model, tok = mlx_lm.load(str(p0))
    assert mm.greedy_generate(model, mm.prompt_ids(1, 2))  # generates something
    assert tok.encode("<s>1+2=") == mm.prompt_ids(1, 2)
