"""A LoRA adapter applied by mlx-lm in-process (``models: {m: {adapter: FOLDER}}``), through
the plugin on the tiny adder: diffed against its merged model (the same weights, merged: a
diff entry ``merged@f32``), every item is identical; the base model diffed against the
merged model is not, so the adapter was applied. Numbers (mlx 0.32, mlx-lm 0.32.2, CPU,
float32, the 8 prompts of ``helpers.ADDITION``, 5 tokens): base + adapter against merged,
8/8 identical, KL max 1.8e-6 over 27 positions; base against merged, 5 of 8 differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import suite_jsonl


def _run(pytester: pytest.Pytester, models: str, checks: str) -> tuple[Any, list[dict[str, Any]]]:
    pytester.makefile(".jsonl", addition=suite_jsonl())
    text = (
        f"models:\n{models}backends:\n  f32: {{kind: mlx-lm, dtype: float32}}\n"
        f"suites: [addition.jsonl]\nchecks:\n{checks}"
    )
    pytester.makefile(".yaml", infercheck=text)
    result = pytester.runpytest_subprocess(
        "--infercheck-results=out.json", "-p", "no:cacheprovider"
    )
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    return result, items


def _models(tiny_models: dict[str, Path], lora: Any) -> str:
    return (
        f"  tuned: {{path: '{tiny_models['bf16']}', adapter: '{lora.adapter}'}}\n"
        f"  base: {{path: '{tiny_models['bf16']}'}}\n"
        f"  merged: {{path: '{lora.merged}'}}\n"
    )


def test_adapter_in_mlx_lm_is_identical_to_its_merged_model(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], tiny_lora: Any
) -> None:
    checks = (
        "  - diff: {model: tuned, backends: [merged@f32, f32]}\n"
        "  - diff: {model: base, backends: [merged@f32, f32]}\n"
    )
    result, items = _run(pytester, _models(tiny_models, tiny_lora), checks)
    adapted = [i for i in items if i["check"] == "diff(merged)" and i["role"] == "prompt"]
    base = [i for i in items if i["check"] == "diff(merged-2)" and i["role"] == "prompt"]
    assert len(adapted) == len(base) == 8
    assert all(i["outcome"] == "passed" for i in adapted), [i["violations"] for i in adapted]
    assert all(i["data"]["sameness"] == "identical" for i in adapted)
    differ = sorted(i["name"].partition("[")[0] for i in base if i["outcome"] == "failed")
    assert differ == ["s02", "s03", "s04", "s06", "s07"]  # the adapter was applied
    result.assert_outcomes(passed=9 + 3, failed=5 + 1)


def test_an_adapter_that_changes_nothing_is_unexercised(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], tiny_lora: Any, tmp_path: Path
) -> None:
    """An adapter whose ``lora_b`` is all zeros leaves every output as the base model's: the
    engine applied it and nothing changed, as when a server silently drops it. Each item's
    record says so (``unexercised``), and ``require_engaged: true`` fails every item and the
    aggregate; the real adapter on the same check is engaged on every item."""
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    zero = tmp_path / "zero-adapter"
    shutil.copytree(tiny_lora.adapter, zero)
    weights = load_file(str(zero / "adapters.safetensors"))
    weights = {k: np.zeros_like(v) if k.endswith("lora_b") else v for k, v in weights.items()}
    save_file(weights, str(zero / "adapters.safetensors"))
    models = _models(tiny_models, tiny_lora) + (
        f"  zeroed: {{path: '{tiny_models['bf16']}', adapter: '{zero}'}}\n"
    )
    checks = (
        "  - diff: {model: zeroed, backends: [base@f32, f32]}\n    require_engaged: true\n"
        "  - diff: {model: tuned, backends: [merged@f32, f32]}\n    require_engaged: true\n"
    )
    result, items = _run(pytester, models, checks)
    zeroed = [i for i in items if i["check"] == "diff(base)" and i["role"] == "prompt"]
    tuned = [i for i in items if i["check"] == "diff(merged)" and i["role"] == "prompt"]
    assert len(zeroed) == len(tuned) == 8
    for item in zeroed:
        assert item["outcome"] == "failed"
        (record,) = item["data"]["feature_activity"]
        assert record["features"] == [f"LoRA adapter ({zero})"]
        assert record["unexercised"] == [
            f"LoRA adapter never engaged: the output equals the base model's on the same "
            f"engine, token for token and logprob for logprob ({zero})"
        ]
        assert item["data"]["sameness"] == "identical"  # identical, and proves nothing
    for item in tuned:
        assert item["outcome"] == "passed"
        (record,) = item["data"]["feature_activity"]
        assert "unexercised" not in record
    result.assert_outcomes(passed=9, failed=9)
    result.stdout.fnmatch_lines(["*unexercised: test zeroed@f32: LoRA adapter never engaged*"])
