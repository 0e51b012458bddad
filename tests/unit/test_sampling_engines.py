"""Each engine's transform of a reference distribution, against values computed by hand.

The reference: five tokens (ids deliberately not in rank order) with raw probabilities
0.4, 0.3, 0.15, 0.1, 0.05.
"""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.metrics.sampling import (
    ENGINES,
    Expected,
    SamplingParams,
    expected_distribution,
)

RAW = {3: 0.4, 1: 0.3, 5: 0.15, 7: 0.1, 9: 0.05}
LOGPROBS = {t: math.log(p) for t, p in RAW.items()}
MODELLED = ("llama-server", "mlx-lm", "mlx_lm.server", "vllm-mlx", "vllm")


def _norm(weights: dict[int, float]) -> dict[int, float]:
    z = sum(weights.values())
    return {t: w / z for t, w in weights.items()}


def _assert_probs(e: Expected, want: dict[int, float]) -> None:
    assert set(e.probs) == set(want)
    for t, p in want.items():
        assert e.probs[t] == pytest.approx(p, rel=1e-12), t
    assert sum(e.probs.values()) + e.tail == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("engine", [*MODELLED, "openai"])
def test_temperature_alone_is_p_to_the_one_over_t(engine: str) -> None:
    # T = 0.5: q_i = p_i^2 / sum p_j^2 = (.16, .09, .0225, .01, .0025) / .285
    e = expected_distribution(LOGPROBS, SamplingParams(0.5), engine)
    _assert_probs(e, {3: 0.16 / 0.285, 1: 0.09 / 0.285, 5: 0.0225 / 0.285,
                      7: 0.01 / 0.285, 9: 0.0025 / 0.285})  # fmt: skip
    assert e.boundary == frozenset() and e.excluded == frozenset() and e.tail == 0.0


@pytest.mark.parametrize("engine", [*MODELLED, "openai"])
def test_top_k_keeps_the_k_most_probable(engine: str) -> None:
    e = expected_distribution(LOGPROBS, SamplingParams(1.0, top_k=2), engine)
    _assert_probs(e, {3: 0.4 / 0.7, 1: 0.3 / 0.7})
    assert e.excluded == frozenset({5, 7, 9})


@pytest.mark.parametrize("engine", [*MODELLED, "openai"])
def test_top_p_keeps_the_token_that_crosses(engine: str) -> None:
    # C = 0, .4, .7, .85, .95: keep C_i < .8 -> the first three (.15 crosses .8)
    e = expected_distribution(LOGPROBS, SamplingParams(1.0, top_p=0.8), engine)
    _assert_probs(e, {3: 0.4 / 0.85, 1: 0.3 / 0.85, 5: 0.15 / 0.85})
    assert e.excluded == frozenset({7, 9})


@pytest.mark.parametrize("engine", [*MODELLED, "openai"])
def test_min_p_at_temperature_one(engine: str) -> None:
    # threshold .3 * .4 = .12: keep .4, .3, .15
    e = expected_distribution(LOGPROBS, SamplingParams(1.0, min_p=0.3), engine)
    _assert_probs(e, {3: 0.4 / 0.85, 1: 0.3 / 0.85, 5: 0.15 / 0.85})


@pytest.mark.parametrize("engine", ["llama-server", "mlx-lm", "mlx_lm.server", "vllm-mlx"])
def test_min_p_before_temperature(engine: str) -> None:
    # raw threshold .12 keeps .4, .3, .15; then squared: .16, .09, .0225 over .2725
    e = expected_distribution(LOGPROBS, SamplingParams(0.5, min_p=0.3), engine)
    _assert_probs(e, {3: 0.16 / 0.2725, 1: 0.09 / 0.2725, 5: 0.0225 / 0.2725})


def test_vllm_min_p_after_temperature() -> None:
    # squared first: .16, .09, .0225, ...; threshold .3 * .16 = .048 keeps .16 and .09 only
    e = expected_distribution(LOGPROBS, SamplingParams(0.5, min_p=0.3), "vllm")
    _assert_probs(e, {3: 0.64, 1: 0.36})
    with pytest.raises(ValueError, match="name the engine"):
        expected_distribution(LOGPROBS, SamplingParams(0.5, min_p=0.3), "openai")


def test_top_p_before_or_after_temperature() -> None:
    # T = 2, top_p = .75. llama/mlx: C = 0, .4, .7, .85 on the raw -> keep 3, then sqrt.
    params = SamplingParams(2.0, top_p=0.75)
    roots = {t: math.sqrt(p) for t, p in RAW.items()}
    e = expected_distribution(LOGPROBS, params, "llama-server")
    _assert_probs(e, _norm({t: roots[t] for t in (3, 1, 5)}))
    # vLLM: sqrt first, q = roots / 2.10730; C_4 = (.63246 + .54772 + .38730) / 2.10730
    # = .7438 < .75, so the fourth token stays.
    assert (roots[3] + roots[1] + roots[5]) / sum(roots.values()) < 0.75
    e = expected_distribution(LOGPROBS, params, "vllm")
    _assert_probs(e, _norm({t: roots[t] for t in (3, 1, 5, 7)}))


def test_top_k_then_top_p_renormalised_or_not() -> None:
    """llama.cpp's top-p sees the top-k survivors renormalised; mlx-lm's sees the full
    distribution: top_k 2, top_p .5 keeps one token on llama-server and vLLM, two on mlx-lm."""
    params = SamplingParams(1.0, top_k=2, top_p=0.5)
    # llama.cpp: top-k -> (.4, .3)/.7 = (.571, .429); C_2 = .571 >= .5 -> only the first
    for engine in ("llama-server", "vllm"):
        _assert_probs(expected_distribution(LOGPROBS, params, engine), {3: 1.0})
    # mlx-lm: top-p on the raw: C_2 = .4 < .5 keeps two; top-k 2 keeps both
    for engine in ("mlx-lm", "mlx_lm.server", "vllm-mlx"):
        _assert_probs(expected_distribution(LOGPROBS, params, engine), {3: 4 / 7, 1: 3 / 7})


def test_all_three_truncations_and_temperature_per_engine() -> None:
    params = SamplingParams(0.5, top_k=4, top_p=0.9, min_p=0.2)
    # llama: top-k 4 -> (.4,.3,.15,.1)/.95; top-p .9: C = 0,.421,.737,.895 -> keep 4;
    # min-p .2 * .4 = .08 keeps all 4; then squared over .16+.09+.0225+.01 = .2825
    want = {3: 0.16 / 0.2825, 1: 0.09 / 0.2825, 5: 0.0225 / 0.2825, 7: 0.01 / 0.2825}
    _assert_probs(expected_distribution(LOGPROBS, params, "llama-server"), want)
    # mlx: top-p .9 on the raw: C = 0,.4,.7,.85,.95 -> keep 4; min-p keeps 4; top-k 4: same
    _assert_probs(expected_distribution(LOGPROBS, params, "mlx-lm"), want)
    # vLLM: squared (.16,.09,.0225,.01,.0025)/.285; min-p .2*.16=.032 keeps (.16,.09);
    # top-k 4 keeps both; top-p .9 on (.64, .36): C = 0, .64 -> both
    _assert_probs(expected_distribution(LOGPROBS, params, "vllm"), {3: 0.64, 1: 0.36})


def test_boundary_rules() -> None:
    # top_p exactly at a cumulative sum: C_3 = .7 == top_p, token 5 is boundary
    e = expected_distribution(LOGPROBS, SamplingParams(1.0, top_p=0.7), "llama-server")
    assert 5 in e.boundary and 5 not in e.excluded
    # min_p exactly at a token: .3 * .4 = .12 ... use min_p = .25: .25 * .4 = .1 (token 7)
    e = expected_distribution(LOGPROBS, SamplingParams(1.0, min_p=0.25), "mlx-lm")
    assert e.boundary == frozenset({7})
    # a tie at the k-th place: both tied tokens are boundary
    tied = {0: math.log(0.4), 1: math.log(0.25), 2: math.log(0.25), 3: math.log(0.1)}
    e = expected_distribution(tied, SamplingParams(1.0, top_k=2), "vllm")
    assert e.boundary == frozenset({1, 2})
    # a difference of 1e-3 relative is not noise
    apart = {0: math.log(0.4), 1: math.log(0.2502), 2: math.log(0.2498), 3: math.log(0.1)}
    e = expected_distribution(apart, SamplingParams(1.0, top_k=2), "vllm")
    assert e.boundary == frozenset() and set(e.probs) == {0, 1}


def test_a_top_k_list_with_the_tail_pooled() -> None:
    listed = {0: math.log(0.5), 1: math.log(0.3)}  # tail .2 in tokens each <= .3
    e = expected_distribution(listed, SamplingParams(1.0), "vllm", tail=0.2)
    assert e.probs == pytest.approx({0: 0.5, 1: 0.3}) and e.tail == pytest.approx(0.2)
    # top_p .7: C = 0, .5 -> both listed kept, the tail (C = .8) out
    e = expected_distribution(listed, SamplingParams(1.0, top_p=0.7), "llama-server", tail=0.2)
    assert e.probs == pytest.approx({0: 0.625, 1: 0.375}) and e.tail == 0.0
    # top_p .9 would cut inside the tail; top_k 3 too; min_p .5 (.15 threshold) too
    for params in (SamplingParams(1.0, top_p=0.9), SamplingParams(1.0, top_k=3),
                   SamplingParams(1.0, min_p=0.5)):  # fmt: skip
        with pytest.raises(ValueError, match="inside the pooled tail"):
            expected_distribution(listed, params, "llama-server", tail=0.2)
    # a temperature above 1 leaves the tail's mass unbounded without the vocabulary
    with pytest.raises(ValueError, match="undetermined"):
        expected_distribution(listed, SamplingParams(2.0), "vllm", tail=0.2)


def test_a_tiny_tail_under_low_temperature_is_bounded() -> None:
    # tail 1e-6 in tokens <= .05: at T = .5 its mass is in [0, 1e-6 * .05] -> midpoint
    listed = {0: math.log(0.6), 1: math.log(0.35 - 1e-6), 2: math.log(0.05)}
    e = expected_distribution(listed, SamplingParams(0.5), "mlx-lm", tail=1e-6)
    z = 0.36 + (0.35 - 1e-6) ** 2 + 0.0025 + 1e-6 * 0.05 / 2
    assert e.tail == pytest.approx(1e-6 * 0.05 / 2 / z)
    assert e.probs[0] == pytest.approx(0.36 / z)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_logprobs_raise(bad: float) -> None:
    with pytest.raises(ValueError, match="not finite"):
        expected_distribution({**LOGPROBS, 11: bad}, SamplingParams(1.0), "vllm")


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        expected_distribution(LOGPROBS, SamplingParams(1.0), "sglang")
    with pytest.raises(ValueError, match="sum to"):
        expected_distribution({0: math.log(0.5)}, SamplingParams(1.0), "vllm")
    with pytest.raises(ValueError, match="tail"):
        expected_distribution(LOGPROBS, SamplingParams(1.0), "vllm", tail=math.nan)
    for kwargs in ({"temperature": 0.0}, {"temperature": math.inf}, {"temperature": 1.0,
                   "top_p": 0.0}, {"temperature": 1.0, "top_k": -1},
                   {"temperature": 1.0, "min_p": 1.5}):  # fmt: skip
        with pytest.raises(ValueError):
            SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_neutral_values_truncate_nothing() -> None:
    neutral = SamplingParams(1.0, top_k=0, top_p=1.0, min_p=0.0)
    for engine in ENGINES:
        e = expected_distribution(LOGPROBS, neutral, engine)
        _assert_probs(e, RAW)
