"""The mlx-lm backend against real mlx on the tiny models (no mocks of mlx)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.checks.comparison.gather_prompt import compare_prompt
from pytest_infercheck.checks.comparison.prompt import TEACHER_FORCED
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.suites import Prompt

EOS = 2


def backend(path: Path, **kwargs: object) -> MlxLmBackend:
    return MlxLmBackend(path.name, MlxModelSpec(str(path)), **kwargs)  # type: ignore[arg-type]


def prompt(text: str, answer: str | None = None) -> Prompt:
    return Prompt(
        id="t",
        text=text,
        category=None,
        max_tokens=8,
        answer=answer,
        answer_kind="number" if answer else None,
        system=None,
        source="test",
    )


def test_greedy_generation_stops_at_eos(tiny_models: dict[str, Path]) -> None:
    b = backend(tiny_models["bf16"])
    rendered = b.render_sync("12+34=", None, thinking=False)
    assert rendered.token_ids is not None and rendered.token_ids[0] == 1  # BOS added, raw mode
    assert not rendered.templated
    gen = b.generate_sync(rendered, GenerationParams(max_tokens=16))
    assert gen.finish_reason == "stop"
    assert gen.token_ids is not None and gen.token_ids[-1] == EOS
    assert len(gen.token_ids) < 16
    assert "</s>" not in gen.text and gen.text.isdigit()


def test_max_tokens_is_honoured(tiny_models: dict[str, Path]) -> None:
    b = backend(tiny_models["bf16"])
    gen = b.generate_sync(b.render_sync("12+34=", None, False), GenerationParams(max_tokens=1))
    assert gen.finish_reason == "length" and gen.token_ids is not None
    assert len(gen.token_ids) == 1


def test_generation_logprobs_are_float32_full_vocab(tiny_models: dict[str, Path]) -> None:
    b = backend(tiny_models["bf16"])
    gen = b.generate_sync(
        b.render_sync("50+25=", None, False), GenerationParams(max_tokens=8), full_logprobs=True
    )
    full = gen.full_logprobs
    assert full is not None
    assert full.dtype == np.float32 and full.shape[0] == len(gen.token_ids or [])
    # Each row is a full log-softmax: probabilities sum to 1.
    np.testing.assert_allclose(np.exp(full.astype(np.float64)).sum(axis=1), 1.0, atol=1e-3)
    # Greedy: the chosen token is the argmax of its step.
    assert list(full.argmax(axis=1)) == gen.token_ids
    assert gen.chosen_logprobs == pytest.approx(full.max(axis=1).tolist())


def test_teacher_forced_scoring_matches_generation(tiny_models: dict[str, Path]) -> None:
    b = backend(tiny_models["bf16"])
    rendered = b.render_sync("63+29=", None, False)
    gen = b.generate_sync(rendered, GenerationParams(max_tokens=8), full_logprobs=True)
    scored = b.score_sync(list(rendered.token_ids or ()), gen.token_ids or [])
    assert gen.full_logprobs is not None
    assert scored.shape == gen.full_logprobs.shape and scored.dtype == np.float32
    # Same model, same prefix: one forward pass equals the incremental KV-cache steps. The
    # generation's logprobs are mlx-lm's own, log-softmaxed in the model's dtype (bf16: about
    # three significant digits); scoring log-softmaxes in float32. Hence a relative tolerance.
    np.testing.assert_allclose(scored, gen.full_logprobs, rtol=1e-2, atol=1e-2)
    assert list(scored.argmax(axis=1)) == gen.token_ids


def cache_targets(
    cache: GenerationCache, a: Path, b: Path
) -> tuple[ResolvedTarget, ResolvedTarget]:
    ba, bb = backend(a), backend(b)
    return ResolvedTarget("a", ("a", str(a)), ba), ResolvedTarget("b", ("b", str(b)), bb)


def test_bf16_vs_itself_kl_is_exactly_zero(tiny_models: dict[str, Path]) -> None:
    cache = GenerationCache()
    base, test = cache_targets(cache, tiny_models["bf16"], tiny_models["bf16"])
    result = compare_prompt(cache, base, test, prompt("45+55=", "100"), GenerationParams(8))
    assert result.method == TEACHER_FORCED
    assert result.kl_per_position and all(k == 0.0 for k in result.kl_per_position)
    assert result.same_top_rate == 1.0 and result.severity == "identical"
    assert result.first_divergence is None and result.flip in ("unchanged",)


def test_bf16_vs_q4_kl_is_positive(tiny_models: dict[str, Path]) -> None:
    cache = GenerationCache()
    base, test = cache_targets(cache, tiny_models["bf16"], tiny_models["q4"])
    kls = []
    for text in ("12+34=", "99+99=", "7+8=", "81+9="):
        result = compare_prompt(cache, base, test, prompt(text), GenerationParams(8))
        assert result.method == TEACHER_FORCED
        kls.append(result.kl_mean)
    assert all(k is not None and k > 0 for k in kls), kls


def test_baseline_generation_is_reused_across_test_models(tiny_models: dict[str, Path]) -> None:
    cache = GenerationCache()
    calls: list[str] = []
    base, q8 = cache_targets(cache, tiny_models["bf16"], tiny_models["q8"])
    _, q4 = cache_targets(cache, tiny_models["bf16"], tiny_models["q4"])
    original = base.backend.generate_sync

    def counting(p, params):  # type: ignore[no-untyped-def]
        calls.append("base")
        return original(p, params)

    base.backend.generate_sync = counting  # type: ignore[method-assign]
    for test in (q8, q4):
        compare_prompt(cache, base, test, prompt("12+34="), GenerationParams(8))
    assert calls == ["base"]


def test_chat_template_applied_once_with_thinking_off_by_default(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    model = tmp_path / "chatty"
    shutil.copytree(tiny_models["bf16"], model)
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if enable_thinking %}[think]{% else %}[nothink]{% endif %}="
    )
    config_path.write_text(json.dumps(config))
    b = backend(model)
    assert b.capabilities.chat_template
    off = b.render_sync("12+34", None, thinking=False)
    on = b.render_sync("12+34", "sys", thinking=True)
    assert off.templated and off.text == "<user>12+34[nothink]="
    assert on.text == "<system>sys<user>12+34[think]="
    raw = backend(model, chat=False).render_sync("12+34=", None, thinking=False)
    assert not raw.templated and raw.text == "<s>12+34="  # the exact string of the ids


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    from pytest_infercheck.backends import BackendError

    with pytest.raises(BackendError, match="could not load"):
        backend(tmp_path / "nope").render_sync("x", None, False)
