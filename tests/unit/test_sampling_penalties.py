"""Presence, frequency, repetition penalties and logit_bias per engine, by hand.

Logits of five tokens: 0: 2.0, 1: -1.0, 2: 0.5, 3: 0.0, 4: -2.0. Prompt [1, 2], generated
[2, 4, 2]. theta = 2, alpha_f = 0.5, alpha_p = 0.3, bias +1 on token 0.
"""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.metrics.sampling import Penalties, penalized_logits, penalized_logprobs

LOGITS = {0: 2.0, 1: -1.0, 2: 0.5, 3: 0.0, 4: -2.0}
PROMPT = [1, 2]
GENERATED = [2, 4, 2]
ALL = Penalties(
    presence_penalty=0.3, frequency_penalty=0.5, repetition_penalty=2.0, logit_bias=((0, 1.0),)
)


def _run(engine: str, penalties: Penalties = ALL, **kw: object) -> dict[int, float]:
    return penalized_logits(
        LOGITS,
        penalties,
        engine,
        generated=GENERATED,
        prompt=PROMPT,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("engine", ["vllm", "openai"])
def test_vllm_and_openai_count_the_output_only(engine: str) -> None:
    # repetition over prompt + output {1, 2, 4}; counts in the output: 2 x2, 4 x1
    assert _run(engine) == pytest.approx({
        0: 2.0 + 1.0,                    # bias only
        1: -1.0 * 2,                     # in the prompt: repetition, no count
        2: 0.5 / 2 - 2 * 0.5 - 0.3,      # positive: divided; c = 2
        3: 0.0,
        4: -2.0 * 2 - 1 * 0.5 - 0.3,     # negative: multiplied; c = 1
    })  # fmt: skip


@pytest.mark.parametrize("engine", ["llama-server", "mlx-lm", "mlx_lm.server"])
def test_llama_and_mlx_count_prompt_and_output_in_a_window(engine: str) -> None:
    # history [1, 2, 2, 4, 2]: counts 1 x1, 2 x3, 4 x1
    assert _run(engine) == pytest.approx({
        0: 3.0,
        1: -1.0 * 2 - 0.5 - 0.3,
        2: 0.5 / 2 - 3 * 0.5 - 0.3,
        3: 0.0,
        4: -2.0 * 2 - 0.5 - 0.3,
    })  # fmt: skip
    # a window of the last 2 tokens [4, 2]: token 1 is no longer penalised, 2 counts once
    assert _run(engine, window=2) == pytest.approx(
        {0: 3.0, 1: -1.0, 2: 0.5 / 2 - 0.5 - 0.3, 3: 0.0, 4: -2.0 * 2 - 0.5 - 0.3}
    )
    assert _run(engine, window=0) == pytest.approx({**LOGITS, 0: 3.0})


def test_the_default_windows_differ() -> None:
    """llama-server looks 64 tokens back, mlx-lm 20: a token 30 tokens back is penalised by
    the one only."""
    prompt = [1] + [3] * 30
    penalties = Penalties(presence_penalty=1.0)
    llama = penalized_logits(LOGITS, penalties, "llama-server", prompt=prompt)
    mlx = penalized_logits(LOGITS, penalties, "mlx-lm", prompt=prompt)
    vllm = penalized_logits(LOGITS, penalties, "vllm", prompt=prompt)
    assert llama[1] == -2.0 and mlx[1] == -1.0 and vllm[1] == -1.0  # vLLM: output only


def test_bias_comes_before_the_repetition_penalty() -> None:
    # (0.5 + 1) / 2, not 0.5 / 2 + 1
    out = penalized_logits(
        LOGITS, Penalties(repetition_penalty=2.0, logit_bias=((2, 1.0),)), "vllm", generated=[2]
    )
    assert out[2] == pytest.approx(0.75)


def test_bias_bans_and_forces() -> None:
    banned = penalized_logprobs(LOGITS, Penalties(logit_bias=((0, -100.0),)), "vllm")
    assert math.exp(banned[0]) < 1e-40
    forced = penalized_logprobs(LOGITS, Penalties(logit_bias=((4, 100.0),)), "llama-server")
    assert math.exp(forced[4]) == pytest.approx(1.0)
    minus_inf = penalized_logprobs(LOGITS, Penalties(logit_bias=((0, -math.inf),)), "mlx-lm")
    assert minus_inf[0] == -math.inf
    assert sum(math.exp(v) for v in minus_inf.values()) == pytest.approx(1.0)


def test_logprobs_are_the_log_softmax_of_the_penalised_logits() -> None:
    out = penalized_logprobs(LOGITS, ALL, "vllm", generated=GENERATED, prompt=PROMPT)
    logits = _run("vllm")
    z = math.log(sum(math.exp(v) for v in logits.values()))
    assert out == pytest.approx({t: v - z for t, v in logits.items()})


def test_vllm_mlx_has_no_frequency_penalty_and_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="frequency_penalty"):
        _run("vllm-mlx")
    plain = Penalties(presence_penalty=0.3, repetition_penalty=2.0)
    assert _run("vllm-mlx", plain) == _run("mlx-lm", plain)
    with pytest.raises(ValueError, match="unknown engine"):
        _run("sglang")
    with pytest.raises(ValueError, match="not finite"):
        penalized_logits({0: math.nan}, ALL, "vllm")
    with pytest.raises(ValueError):
        Penalties(repetition_penalty=0.0)
    with pytest.raises(ValueError):
        Penalties(logit_bias=((0, math.inf),))
