"""Lossless and budgeted features of mlx-lm, through the plugin on the tiny adder: a draft
model (speculative decoding) must change nothing (``expect: identical``) and must show that
it drafted; a quantized KV cache is held to a KL budget (``expect: budget``); a feature that
never engaged is ``unexercised`` (a warning, a failure under ``require_engaged``); and no
path that generates or scores for a configured backend goes through a plain cache.

Numbers (mlx 0.32, mlx-lm 0.32.2, CPU, the 8 prompts of ``helpers.ADDITION``, 5 tokens):
the draft (``tiny-draft``, the adder's first layer, 3 tokens per step) proposes 73 tokens
of which 9 are accepted, and the outputs are identical; the KV cache quantized from token 0
(group 32) gives a pooled mean KL of 4.2e-4 at 4 bits
and 6.3e-6 at 8 bits, so ``max_mean_kl: 1.0e-4`` fails 4 bits and ``max_mean_kl: 0.001``
passes 8 bits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_infercheck.backends.base import GenerationParams
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.backends.options import MlxLmOptions

from .helpers import matrix_yaml, suite_jsonl

DRAFTED, ACCEPTED = 73, 9
"""Draft tokens proposed and accepted over the 8 prompts (3 per step, measured)."""


def _run(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], backends: str, checks: str
) -> tuple[Any, dict[str, dict[str, Any]]]:
    pytester.makefile(".jsonl", addition=suite_jsonl())
    text = matrix_yaml({"bf16": tiny_models["bf16"]}, checks).replace(
        "suites:", f"backends:\n{backends}suites:", 1
    )
    pytester.makefile(".yaml", infercheck=text)
    result = pytester.runpytest_subprocess(
        "--infercheck-results=out.json", "-p", "no:cacheprovider"
    )
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    return result, {f"{i['check']}::{i['name']}": i for i in items}


def test_draft_model_is_identical_and_drafts(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], tiny_draft: Path
) -> None:
    """``expect: identical`` with ``require_engaged``: every item identical, and each one's
    ``feature_activity`` counts drafted and accepted tokens from mlx-lm's ``from_draft``."""
    draft = tiny_draft
    backends = (
        "  plain: {kind: mlx-lm}\n"
        f"  spec: {{kind: mlx-lm, draft_model: '{draft}', num_draft_tokens: 3}}\n"
    )
    checks = "  - diff: {model: bf16, backends: [plain, spec]}\n    require_engaged: true\n"
    result, items = _run(pytester, tiny_models, backends, checks)
    result.assert_outcomes(passed=9)
    prompts = [i for i in items.values() if i["role"] == "prompt"]
    assert len(prompts) == 8
    for item in prompts:
        (record,) = item["data"]["feature_activity"]
        assert record["side"] == "test" and record["features"] == [
            f"speculative decoding (draft model {draft}, 3 tokens per step)"
        ]
        assert record["drafted"] > 0 and "unexercised" not in record
        assert item["data"]["sameness"] == "identical"
    drafted = sum(i["data"]["feature_activity"][0]["drafted"] for i in prompts)
    accepted = sum(i["data"]["feature_activity"][0]["accepted"] for i in prompts)
    assert (drafted, accepted) == (DRAFTED, ACCEPTED)


def test_a_draft_that_drafts_nothing_is_unexercised(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], tiny_draft: Path
) -> None:
    """``num_draft_tokens: 0``: the draft model is loaded and never used. The outputs are
    identical, so ``expect: identical`` alone passes with a warning per item; with
    ``require_engaged: true`` every item fails."""
    draft = tiny_draft
    backends = (
        "  plain: {kind: mlx-lm}\n"
        f"  idle: {{kind: mlx-lm, draft_model: '{draft}', num_draft_tokens: 0}}\n"
    )
    checks = (
        "  - diff: {model: bf16, backends: [plain, idle]}\n    name: warned\n"
        "  - diff: {model: bf16, backends: [plain, idle]}\n    name: required\n"
        "    require_engaged: true\n"
    )
    result, items = _run(pytester, tiny_models, backends, checks)
    result.assert_outcomes(passed=9, failed=9)  # required: 8 items and their aggregate
    result.stdout.fnmatch_lines(
        ["*UnexercisedFeatureWarning*speculative decoding never engaged: nothing drafted*"]
    )
    for name, item in items.items():
        if item["role"] != "prompt":
            continue
        (record,) = item["data"]["feature_activity"]
        assert (record["drafted"], record["accepted"]) == (0, 0)
        assert record["unexercised"] == ["speculative decoding never engaged: nothing drafted"]
        failed = bool(item["violations"])
        assert failed == name.startswith("diff(required)"), name


def test_kv_bits_4_breaks_a_tight_budget_and_8_keeps_a_loose_one(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """``expect: budget``: 4 bits (pooled mean KL 4.2e-4, measured) exceeds
    ``max_mean_kl: 1.0e-4``; 8 bits (6.3e-6) stays within ``0.001``. Each item records the
    bits in use, read from mlx-lm's cache objects."""
    kv = "kind: mlx-lm, kv_group_size: 32, quantized_kv_start: 0"
    backends = (
        f"  plain: {{kind: mlx-lm}}\n  kv4: {{{kv}, kv_bits: 4}}\n  kv8: {{{kv}, kv_bits: 8}}\n"
    )
    checks = (
        "  - diff: {model: bf16, backends: [plain, kv4]}\n"
        "    expect: budget\n    max_mean_kl: 1.0e-4\n"
        "  - diff: {model: bf16, backends: [plain, kv8]}\n"
        "    expect: budget\n    max_mean_kl: 0.001\n"
    )
    result, items = _run(pytester, tiny_models, backends, checks)
    result.assert_outcomes(passed=17, failed=1)
    aggregates = {k: i for k, i in items.items() if i["role"] == "aggregate"}
    assert len(aggregates) == 2
    assert aggregates["diff(bf16)::aggregate"]["violations"][0].startswith("bf16@kv4: mean KL")
    assert aggregates["diff(bf16-2)::aggregate"]["violations"] == []
    bits = {
        i["data"]["feature_activity"][0]["kv_bits"] for i in items.values() if i["role"] == "prompt"
    }
    assert bits == {4, 8}


def test_every_path_applies_kv_bits_and_the_draft(
    tiny_models: dict[str, Path], tiny_draft: Path
) -> None:
    """A backend with ``kv_bits`` never goes through a plain cache: its generation, its
    batch and its teacher-forced scores all differ from the plain backend's and equal mlx-lm's
    own quantized-cache numbers (float32 weights, so each score row is the generation's row
    bit for bit); it does not step in lockstep. A backend with a draft model batches one
    prompt at a time through speculative decoding (its activity says so)."""
    bf16 = tiny_models["bf16"]
    options = MlxLmOptions(kv_bits=4, kv_group_size=32, quantized_kv_start=0)
    kv = MlxLmBackend("kv", MlxModelSpec(str(bf16), dtype="float32"), options=options)
    plain = MlxLmBackend("plain", MlxModelSpec(str(bf16), dtype="float32"))
    prompt = kv.render_sync("63+29=", None, False)
    params = GenerationParams(5)
    gen = kv.generate_sync(prompt, params, full_logprobs=True)
    ref = plain.generate_sync(prompt, params, full_logprobs=True)
    assert gen.activity is not None and gen.activity.kv_bits == 4
    assert ref.activity is None
    assert gen.token_ids == ref.token_ids  # the answer survives; its numbers do not
    assert gen.full_logprobs is not None and ref.full_logprobs is not None
    assert not np.array_equal(gen.full_logprobs, ref.full_logprobs)
    ids = list(prompt.token_ids or ())
    rows = kv.score_sync(ids, gen.token_ids or [])
    assert np.array_equal(rows, gen.full_logprobs)  # scored through the quantized cache
    assert not np.array_equal(plain.score_sync(ids, gen.token_ids or []), rows)
    (batched,) = kv.generate_batch_sync([prompt], params)
    assert not isinstance(batched, BaseException)
    assert batched.chosen_logprobs == gen.chosen_logprobs and batched.activity == gen.activity
    assert kv.stepper() is None and plain.stepper() is not None

    spec = MlxLmBackend(
        "spec", MlxModelSpec(str(bf16)), options=MlxLmOptions(draft_model=str(tiny_draft))
    )
    (drafted,) = spec.generate_batch_sync([prompt], params)
    assert not isinstance(drafted, BaseException) and drafted.activity is not None
    assert drafted.activity.drafted is not None and drafted.activity.drafted > 0
    assert spec.stepper() is None and "one prompt at a time" in str(spec.batching)
