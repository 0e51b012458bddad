"""examples/models/make_lora.py: the tiny adder's LoRA in mlx-lm's and PEFT's formats and its
merged model (mlx-lm, CPU, offline). The GGUF conversion needs torch: it is exercised by the
llama-server integration tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import load_example


@pytest.fixture(scope="module")
def make_lora() -> Any:
    return load_example("make_lora")


@pytest.fixture(scope="module")
def mm() -> Any:
    return load_example("make_models")


@pytest.fixture(scope="module")
def lora(make_lora: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_lora.make_lora(tmp_path_factory.mktemp("lora"))


@pytest.fixture(scope="module")
def models(make_lora: Any, lora: Any) -> dict[str, Any]:
    """The base, base + adapter (``adapter_path``) and the merged model, all float32."""
    base, _ = mlx_lm.load(str(make_lora.SOURCE_DIR))
    adapted, _ = mlx_lm.load(str(make_lora.SOURCE_DIR), adapter_path=str(lora.adapter))
    merged, _ = mlx_lm.load(str(lora.merged))
    for model in (base, adapted):
        model.set_dtype(mx.float32)
    return {"base": base, "adapted": adapted, "merged": merged}


def _prompts(mm: Any) -> mx.array:
    pairs = [(a, b) for a, b in mm.sample_pairs(60) if a > 9 and b > 9][:12]
    return mx.array([mm.prompt_ids(a, b) for a, b in pairs])


def test_merged_logits_equal_base_plus_adapter(models: dict[str, Any], mm: Any) -> None:
    """W' = W + 2 B A computed once equals W x + 2 B (A x) in float32 to float rounding: the
    largest logit difference over 12 prompts x 6 positions is at most 1e-5 of the largest
    logit (measured 1.8e-5 absolute on logits up to about 20)."""
    ids = _prompts(mm)
    adapted = np.array(models["adapted"](ids), dtype=np.float64)
    merged = np.array(models["merged"](ids), dtype=np.float64)
    base = np.array(models["base"](ids), dtype=np.float64)
    assert models["merged"].layers[0].self_attn.q_proj.weight.dtype == mx.float32
    scale = np.abs(adapted).max()
    assert np.abs(adapted - merged).max() <= 1e-5 * scale
    assert np.abs(adapted - base).max() > 1.0  # the adapter moves logits by whole nats


def test_the_adapter_changes_answers_and_keeps_them_numbers(
    models: dict[str, Any], mm: Any
) -> None:
    pairs = mm.sample_pairs(100)
    base = mm.adder_answers(models["base"], pairs)
    adapted = mm.adder_answers(models["adapted"], pairs)
    merged = mm.adder_answers(models["merged"], pairs)
    changed = sum(b != a for b, a in zip(base, adapted, strict=True))
    assert adapted == merged
    assert 10 <= changed <= 60, changed  # measured 28 of 100 (seed 0)
    assert all(a is not None and a.isdigit() for a in adapted)


def test_formats_hold_the_same_matrices(make_lora: Any, lora: Any) -> None:
    """mlx-lm's ``lora_a``/``lora_b`` are PEFT's ``lora_A``/``lora_B`` transposed; the merged q
    weight of layer 1 is the base's plus ``(alpha / r) * B @ A``, checked at one entry by an
    explicit sum."""
    mlx = load_file(str(lora.adapter / "adapters.safetensors"))
    peft = load_file(str(lora.adapter / "adapter_model.safetensors"))
    assert len(mlx) == len(peft) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)
    for layer in (0, 1):
        for proj in ("q_proj", "v_proj"):
            path = f"model.layers.{layer}.self_attn.{proj}"
            a = peft[f"base_model.model.{path}.lora_A.weight"]
            b = peft[f"base_model.model.{path}.lora_B.weight"]
            assert a.shape == (4, 128) and b.shape == (128, 4)
            assert np.array_equal(mlx[f"{path}.lora_a"], a.T)
            assert np.array_equal(mlx[f"{path}.lora_b"], b.T)
    config = json.loads((lora.adapter / "adapter_config.json").read_text())
    assert config["lora_alpha"] / config["r"] == config["lora_parameters"]["scale"] == 2.0
    base = load_example("make_gguf").read_safetensors(make_lora.SOURCE_DIR / "model.safetensors")
    merged = load_file(str(lora.merged / "model.safetensors"))
    path = "model.layers.1.self_attn.q_proj"
    a = peft[f"base_model.model.{path}.lora_A.weight"].astype(np.float64)
    b = peft[f"base_model.model.{path}.lora_B.weight"].astype(np.float64)
    i, j = 5, 17
    expected = float(base[f"{path}.weight"][i, j]) + 2.0 * sum(b[i, k] * a[k, j] for k in range(4))
    assert merged[f"{path}.weight"][i, j] == pytest.approx(expected, abs=1e-6)
    k_path = "model.layers.1.self_attn.k_proj.weight"
    assert np.array_equal(merged[k_path], base[k_path])  # k is not adapted


def test_made_deterministically(make_lora: Any, lora: Any, tmp_path: Path) -> None:
    again = make_lora.make_lora(tmp_path)
    for name in ("adapter/adapters.safetensors", "adapter/adapter_model.safetensors"):
        assert (again.folder / name).read_bytes() == (lora.folder / name).read_bytes()
    merged = "merged/model.safetensors"
    assert (again.folder / merged).read_bytes() == (lora.folder / merged).read_bytes()
