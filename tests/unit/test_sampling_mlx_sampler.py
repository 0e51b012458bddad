"""The mlx-lm model of :mod:`pytest_infercheck.metrics.sampling.engines` against mlx-lm's own
sampler (``mlx_lm.sample_utils.make_sampler``, run in-process on a fixed five-token
distribution): its draws fit the expected distribution, and not the one another engine's
order gives where the orders differ; and its logits processors against the mlx-lm penalty
model."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from pytest_infercheck.metrics.sampling import (
    Penalties,
    SamplingParams,
    expected_distribution,
    goodness_of_fit,
    penalized_logits,
)

mx = pytest.importorskip("mlx.core")
sample_utils = pytest.importorskip("mlx_lm.sample_utils")

RAW = [0.4, 0.3, 0.15, 0.1, 0.05]
LOGPROBS = {i: math.log(p) for i, p in enumerate(RAW)}
N = 4000


def _mlx_counts(params: SamplingParams, seed: int) -> dict[int, int]:
    sampler = sample_utils.make_sampler(
        params.temperature,
        top_p=params.top_p or 0.0,
        min_p=params.min_p or 0.0,
        top_k=params.top_k or 0,
    )
    mx.random.seed(seed)
    logprobs = mx.broadcast_to(mx.log(mx.array([RAW])), (N, len(RAW)))
    return dict(Counter(int(t) for t in sampler(logprobs).tolist()))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(0.5),
        SamplingParams(1.3),
        SamplingParams(1.0, top_k=3),
        SamplingParams(0.7, top_p=0.8),
        SamplingParams(0.5, min_p=0.3),
        SamplingParams(2.0, top_p=0.75),
        SamplingParams(1.0, top_k=2, top_p=0.5),
        SamplingParams(0.5, top_k=4, top_p=0.9, min_p=0.2),
    ],
)
def test_mlx_lm_draws_fit_the_mlx_lm_model(params: SamplingParams) -> None:
    expected = expected_distribution(LOGPROBS, params, "mlx-lm")
    fit = goodness_of_fit(_mlx_counts(params, seed=3), expected)
    assert fit.outside_support == ()
    assert fit.p_value > 1e-4, fit


@pytest.mark.parametrize(
    ("params", "other"),
    [
        (SamplingParams(1.0, top_k=2, top_p=0.5), "llama-server"),  # top-p renormalised
        (SamplingParams(0.5, min_p=0.3), "vllm"),  # min-p after temperature
        (SamplingParams(2.0, top_p=0.75), "vllm"),  # top-p after temperature
    ],
)
def test_mlx_lm_draws_do_not_fit_another_order(params: SamplingParams, other: str) -> None:
    expected = expected_distribution(LOGPROBS, params, other)
    fit = goodness_of_fit(_mlx_counts(params, seed=4), expected)
    assert fit.outside_support or fit.p_value < 1e-6, fit


LOGITS = {0: 2.0, 1: -1.0, 2: 0.5, 3: 0.0, 4: -2.0}


@pytest.mark.parametrize(
    ("history", "penalties", "context"),
    [
        ([1, 2, 2, 4, 2], Penalties(0.3, 0.5, 2.0, ((0, 1.0),)), 20),
        ([1, 2, 2, 4, 2], Penalties(0.3, 0.5, 2.0, ((2, 1.0),)), 2),
        ([3, 3, 3, 0], Penalties(frequency_penalty=0.25), 20),
        ([1, 4], Penalties(repetition_penalty=1.5, logit_bias=((1, 3.0),)), 20),
    ],
)
def test_mlx_lm_logits_processors_give_the_mlx_model(
    history: list[int], penalties: Penalties, context: int
) -> None:
    """mlx-lm's own ``make_logits_processors`` (bias, repetition, presence, frequency over
    the last ``context`` tokens of prompt and output) on raw logits."""
    processors = sample_utils.make_logits_processors(
        dict(penalties.logit_bias) or None,
        penalties.repetition_penalty,
        context,
        penalties.presence_penalty,
        context,
        penalties.frequency_penalty,
        context,
    )
    logits = mx.array([[LOGITS[t] for t in range(len(LOGITS))]])
    tokens = mx.array(history)
    for processor in processors:
        logits = processor(tokens, logits)
    got = dict(enumerate(logits[0].tolist()))
    # the whole history as prompt: mlx-lm does not tell prompt from output
    want = penalized_logits(LOGITS, penalties, "mlx-lm", prompt=history, window=context)
    assert got == pytest.approx(want, abs=1e-6)
