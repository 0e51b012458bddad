"""Unit tests for pytest_infercheck.metrics.finite (the fail-closed rule) and for the
fail-closed behaviour of position_stats / summarize, against hand-computed values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_infercheck.metrics.faults import (
    aggregate_faults,
    empty_generation_fault,
    fault_from_plain,
    non_finite,
    not_normalised,
)
from pytest_infercheck.metrics.finite import (
    BFLOAT16_LOGSUMEXP_TOL,
    check_logprob_rows,
    check_scalar,
    check_topk_rows,
    check_values,
    empty_generation,
    logsumexp_tolerance,
    non_finite_positions,
    row_logsumexp,
    strict_max,
    strict_mean,
)
from pytest_infercheck.metrics.kl import position_stats
from pytest_infercheck.metrics.stats import clustered_mean_se, percentile, summarize

NAN = math.nan
INF = math.inf
LN2 = math.log(2.0)


def _logs(*rows: list[float]) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.array(rows, dtype=np.float64)).astype(np.float32)


# ------------------------------------------------------------------ scalar sequences


def test_nan_not_first_is_found_and_named() -> None:
    kl = [0.0, 0.1, NAN, 0.2, NAN]
    # The defect: Python's max keeps 0.0 against a later NaN (nan > 0.0 is False).
    assert max(kl) == 0.2 and max([0.0, NAN]) == 0.0
    assert math.isnan(strict_max(kl))  # type: ignore[arg-type]
    assert math.isnan(strict_max([0.0, NAN]))  # type: ignore[arg-type]
    assert math.isnan(strict_max([NAN, 0.0]))  # type: ignore[arg-type]
    problem = check_values("KL", kl)
    assert problem == non_finite("KL", (2, 4), ("nan",))
    assert problem.describe() == "non-finite KL at positions 2, 4 (NaN)"


def test_plus_inf_kl_is_named() -> None:
    problem = check_values("KL", [0.1, INF, 0.3])
    assert problem is not None
    assert problem.describe() == "non-finite KL at position 1 (+inf)"
    assert strict_max([0.1, INF, 0.3]) == INF


def test_neg_inf_only_allowed_when_asked() -> None:
    values = [-1.0, -INF, NAN, INF]
    assert non_finite_positions(values) == (1, 2, 3)
    assert non_finite_positions(values, allow_neg_inf=True) == (2, 3)
    problem = check_values("test logprobs", values)
    assert problem is not None and problem.fault == "non-finite test logprobs"
    assert problem.describe() == "non-finite test logprobs at positions 1, 2, 3 (NaN, +inf, -inf)"
    assert check_values("test logprobs", [-1.0, -INF], allow_neg_inf=True) is None
    assert check_values("KL", [0.0, 1.5]) is None
    assert check_values("KL", []) is None


def test_scalar_similarity_and_latency_lists() -> None:
    assert check_scalar("similarity", 0.93) is None
    sim = check_scalar("similarity", NAN)
    assert sim == non_finite("similarity", (), ("nan",))
    assert sim.describe() == "non-finite similarity (NaN)"
    assert check_scalar("similarity", -INF) is not None  # -inf is not a similarity
    lat = check_values("latency", [0.12, 0.3, INF, NAN], unit="run")
    assert lat is not None
    assert lat.describe() == "non-finite latency at runs 2, 3 (NaN, +inf)"


def test_long_position_lists_are_shortened() -> None:
    problem = check_values("KL", [NAN] * 12)
    assert problem is not None and len(problem.positions) == 12
    assert problem.describe() == (
        "non-finite KL at positions 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (12 in all) (NaN)"
    )


def test_strict_mean_never_skips() -> None:
    assert strict_mean([1.0, 2.0, 3.0]) == 2.0  # 6 / 3
    assert math.isnan(strict_mean([1.0, NAN, 3.0]))  # type: ignore[arg-type]
    assert strict_mean([1.0, INF]) == INF
    assert math.isnan(strict_mean([INF, -INF]))  # type: ignore[arg-type]
    assert strict_mean([]) is None
    assert strict_max([]) is None
    assert strict_max(np.array([0.5, 0.25])) == 0.5


# ------------------------------------------------------------------ empty generation


def test_empty_generation_is_a_divergence() -> None:
    problem = empty_generation(0, 5)
    assert problem == empty_generation_fault("the baseline", "the test", 5)
    assert problem.describe() == (
        "empty generation: the baseline generated no tokens while the test generated 5"
    )
    assert empty_generation(3, 0, base="bf16@local", test="q4@local") == empty_generation_fault(
        "q4@local", "bf16@local", 3
    )
    text = empty_generation(0, 17, unit="characters")
    assert text is not None and text.describe() == (
        "empty generation: the baseline generated no characters while the test generated 17"
    )
    assert empty_generation(0, 0) is None  # both empty: they agree
    assert empty_generation(3, 4) is None


def test_empty_continuation_scores_nothing_but_is_flagged() -> None:
    # The baseline generated nothing: no positions to score, so no KL problem of any kind;
    # the divergence has to come from empty_generation, never from a silent pass.
    stats = position_stats(np.zeros((0, 7), np.float32), np.zeros((0, 7), np.float32), [])
    assert len(stats) == 0 and stats.problems == ()
    assert strict_max(stats.kl) is None
    assert empty_generation(len(stats), 4) is not None
    assert check_logprob_rows("test logprobs", np.zeros((0, 0), np.float32)) == []


# ------------------------------------------------------------------ full-vocabulary rows


def test_logsumexp_tolerance_values() -> None:
    # float32: V * 2^-24 + 1e-4; Qwen's V = 151936: 151936 / 16777216 = 0.0090560... + 1e-4
    assert logsumexp_tolerance(151936) == pytest.approx(0.0091560913, rel=1e-9)
    assert logsumexp_tolerance(32000) == pytest.approx(32000 / 2**24 + 1e-4)  # 0.0020073
    assert logsumexp_tolerance(0) == pytest.approx(1e-4)
    assert logsumexp_tolerance(151936, "bfloat16") == BFLOAT16_LOGSUMEXP_TOL == 0.5
    assert logsumexp_tolerance(100, "float64") == pytest.approx(100 * 2**-53 + 1e-9)
    with pytest.raises(ValueError, match="dtype"):
        logsumexp_tolerance(10, "float16")
    with pytest.raises(ValueError, match="vocab"):
        logsumexp_tolerance(-1)


def test_single_neg_inf_token_is_legitimate() -> None:
    # p = (0.5, 0.5, 0): logsumexp = log(0.5 + 0.5 + 0) = 0
    rows = _logs([0.5, 0.5, 0.0], [0.25, 0.25, 0.5])
    assert rows[0, 2] == -INF
    assert check_logprob_rows("test logprobs", rows) == []
    np.testing.assert_allclose(row_logsumexp(rows), [0.0, 0.0], atol=1e-7)


def test_row_shifted_by_half_is_flagged() -> None:
    rows = _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25])
    rows[1] += np.float32(0.5)  # log(sum e^(l + 0.5)) = 0.5 + log(1) = 0.5
    problems = check_logprob_rows("test logprobs", rows)
    assert len(problems) == 1
    problem = problems[0]
    assert problem.fault.endswith(" not normalised")
    assert problem.positions == (1,)
    tol = logsumexp_tolerance(3)  # 3 * 2^-24 + 1e-4
    assert problem.describe() == (
        f"test logprobs do not normalise at position 1 (logsumexp +0.5; tolerance {tol:.3g})"
    )
    # Even the loose bfloat16 tolerance (0.5) catches a shift just above it.
    rows[1] += np.float32(0.1)
    assert check_logprob_rows("x", rows, tol=BFLOAT16_LOGSUMEXP_TOL) != []


def test_all_neg_inf_row_and_missing_mass_do_not_normalise() -> None:
    rows = np.array([[-INF, -INF, -INF], [math.log(0.5), math.log(0.3), -INF]], np.float32)
    (problem,) = check_logprob_rows("baseline logprobs", rows)
    assert problem.fault.endswith(" not normalised")
    assert problem.positions == (0, 1)
    # row 0: no mass at all, logsumexp -inf; row 1: log(0.8) = -0.2231
    assert problem.describe() == (
        "baseline logprobs do not normalise at positions 0, 1 (logsumexp -inf, -0.223; "
        f"tolerance {logsumexp_tolerance(3):.3g})"
    )


def test_nan_and_inf_anywhere_in_a_row() -> None:
    rows = _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25])
    rows[1, 2] = NAN
    rows[2, 0] = INF
    rows[3, 0] = NAN
    rows[3, 1] = INF  # NaN and +inf in one row: the row's logsumexp is NaN
    problems = check_logprob_rows("test logprobs", rows)
    assert problems == [non_finite("test logprobs", (1, 2, 3), ("nan", "+inf"))]
    assert problems[0].describe() == "non-finite test logprobs at positions 1, 2, 3 (NaN, +inf)"
    # tol = inf checks only for non-finite values
    assert check_logprob_rows("test logprobs", rows, tol=INF) == problems
    shifted = _logs([0.5, 0.5]) + np.float32(3.0)
    assert check_logprob_rows("t", shifted, tol=INF) == []


def test_row_logsumexp_extremes_and_chunks() -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((9, 17)).astype(np.float32)
    rows[4] += np.float32(900.0)  # exp(900) overflows without the max shift
    rows[5] -= np.float32(900.0)  # exp(-900) underflows to 0 without it
    expected = [
        float(np.max(r.astype(np.float64)))
        + math.log(float(np.exp(r.astype(np.float64) - np.max(r.astype(np.float64))).sum()))
        for r in rows
    ]
    for chunk in (1, 2, 4, 9, 100):
        np.testing.assert_allclose(row_logsumexp(rows, chunk_size=chunk), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="2-D"):
        row_logsumexp(np.zeros(3))
    with pytest.raises(ValueError, match="chunk_size"):
        row_logsumexp(np.zeros((1, 3)), chunk_size=0)


def _float32_log_softmax_sequential(logits: np.ndarray) -> np.ndarray:
    """float32 log-softmax with a strictly sequential float32 sum (llama.cpp's softmax; mlx's
    CPU reduction gave the same numbers in our measurement)."""
    x = logits.astype(np.float32)
    m = x.max(axis=1, keepdims=True)
    total = np.cumsum(np.exp(x - m), axis=1, dtype=np.float32)[:, -1:]
    return (x - (m + np.log(total))).astype(np.float32)


def test_tolerance_passes_correct_float32_rows_and_fails_a_small_shift() -> None:
    # A realistic worst case from the measurement in finite.py: V = 151936, bf16-rounded
    # logits (many equal values, so the float32 summation errors all go one way), one token
    # 15 above a flat bulk at -40.
    vocab = 151936
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, vocab)) * 0.1 - 40.0
    logits[:, 7] += 15.0
    logits = np.round(logits * 8.0) / 8.0  # bf16 spacing at |x| in [32, 64) is 0.25 / 2
    rows = _float32_log_softmax_sequential(logits)
    lse = row_logsumexp(rows)
    # A fixed 1e-3 would fail these correct rows...
    assert np.abs(lse).max() > 1e-3
    # ...the V * 2^-24 + 1e-4 = 9.16e-3 tolerance passes them...
    assert check_logprob_rows("test logprobs", rows) == []
    # ...and still fails a row shifted by 0.02.
    shifted = rows + np.float32(0.02)
    assert check_logprob_rows("test logprobs", shifted)[0].positions == (0, 1)


# ------------------------------------------------------------------ top-k lists


def test_topk_rows() -> None:
    rows = [
        {1: math.log(0.6), 2: math.log(0.3)},  # mass 0.9: fine (a top-k holds less than 1)
        {1: math.log(0.7), 2: math.log(0.5)},  # mass 1.2: logsumexp log 1.2 = 0.182 > 0.02
        {1: NAN, 2: math.log(0.1)},
        {1: 0.0, 2: -INF},  # mass exactly 1 and a -inf: fine
        {},  # nothing to check
        {1: INF},
    ]
    problems = check_topk_rows("baseline top-k logprobs", rows)
    assert problems[0] == non_finite("baseline top-k logprobs", (2, 5), ("nan", "+inf"))
    assert problems[1].fault.endswith(" not normalised")
    assert problems[1].positions == (1,)
    assert "(logsumexp +0.182; tolerance 0.02)" in problems[1].describe()  # log 1.2
    assert len(problems) == 2
    assert check_topk_rows("x", rows[1:2], tol=0.5) == []  # bf16-recorded lists: looser


# ------------------------------------------------------------------ position_stats


def test_nan_row_gives_nan_kl_and_max_is_nan_not_zero() -> None:
    base = _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25])
    test = _logs([0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.5, 0.25, 0.25])
    test[2] = NAN  # the garbage-output row, not first
    stats = position_stats(base, test, [0, 0, 0])
    # Row 0 identical: 0. Row 1: 0.5 ln 2 - 0.25 ln 2 = 0.25 ln 2. Row 2: NaN.
    assert stats.kl[0] == 0.0
    assert stats.kl[1] == pytest.approx(0.25 * LN2, rel=1e-6)
    assert math.isnan(stats.kl[2])
    assert max(stats.kl.tolist()) == pytest.approx(0.25 * LN2, rel=1e-6)  # the defect
    assert math.isnan(strict_max(stats.kl))  # type: ignore[arg-type]
    assert math.isnan(strict_mean(stats.kl))  # type: ignore[arg-type]
    assert stats.non_finite_kl == (2,)
    assert stats.violations() == [
        "non-finite test logprobs at position 2 (NaN)",
        "non-finite KL at position 2 (NaN)",
    ]
    assert math.isnan(stats.delta_p[2])


def test_nan_hidden_by_the_zero_probability_convention_is_still_named() -> None:
    # base gives token 0 probability 0, so 0 * log(0 / q) = 0 would swallow the test NaN:
    # KL = 0.5 ln(0.5 / 0.5) * 2 = 0, yet the test row is garbage.
    base = _logs([0.0, 0.5, 0.5])
    test = _logs([0.0, 0.5, 0.5])
    test[0, 0] = NAN
    stats = position_stats(base, test, [1])
    assert stats.kl[0] == 0.0
    assert stats.violations() == ["non-finite test logprobs at position 0 (NaN)"]
    # The same with a +inf hidden there (-inf - inf = -inf, times p = 0, set to 0).
    test[0, 0] = INF
    stats = position_stats(base, test, [1])
    assert stats.kl[0] == 0.0
    assert stats.violations() == ["non-finite test logprobs at position 0 (+inf)"]


def test_plus_inf_kl_is_a_named_violation() -> None:
    # base p = (0.5, 0.5, 0), test p = (0, 1, 0): 0.5 ln(0.5 / 0) = +inf; rows normalise.
    stats = position_stats(_logs([0.5, 0.5, 0.0]), _logs([0.0, 1.0, 0.0]), [1])
    assert stats.kl[0] == INF
    assert stats.violations() == ["non-finite KL at position 0 (+inf)"]


def test_unnormalised_test_row_gives_negative_kl_and_is_flagged() -> None:
    base = _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25])
    test = base.copy()
    test[1] += np.float32(0.5)
    stats = position_stats(base, test, [0, 0], base_name="bf16@local", test_name="q4@local")
    # KL_1 = sum p (l - (l + 0.5)) = -0.5: would pass any max_kl gate.
    assert stats.kl[1] == pytest.approx(-0.5, abs=1e-6)
    (problem,) = stats.problems
    assert problem.fault == "q4@local logprobs not normalised" and problem.positions == (1,)
    assert "(logsumexp +0.5;" in problem.describe()
    # row_tol = inf: only non-finite values are checked.
    assert position_stats(base, test, [0, 0], row_tol=INF).problems == ()


def test_base_rows_are_checked_too_with_large_shift() -> None:
    base = _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25])
    base[0] += np.float32(800.0)  # exp overflows without the max shift: reported as +800
    base[1] -= np.float32(800.0)  # underflows to 0 without it: reported as -800
    stats = position_stats(base, _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25]), [0, 0])
    problem = stats.problems[0]
    assert problem.fault == "baseline logprobs not normalised"
    assert problem.positions == (0, 1)
    assert "(logsumexp +800, -800;" in problem.describe()


def test_all_nan_prompt_fails_everywhere() -> None:
    base = np.full((4, 5), NAN, np.float32)
    test = np.full((4, 5), NAN, np.float32)
    stats = position_stats(base, test, [0, 1, 2, 3], chunk_size=3)
    assert np.isnan(stats.kl).all()
    assert stats.violations() == [
        "non-finite baseline logprobs at positions 0, 1, 2, 3 (NaN)",
        "non-finite test logprobs at positions 0, 1, 2, 3 (NaN)",
        "non-finite KL at positions 0, 1, 2, 3 (NaN)",
    ]
    assert math.isnan(strict_max(stats.kl))  # type: ignore[arg-type]
    summary = summarize([np.zeros(3), stats.kl])
    for value in (summary.mean, summary.se, summary.median, summary.p90, summary.p99):
        assert math.isnan(value)
    assert math.isnan(summary.max)
    assert summary.non_finite == ((1, 0), (1, 1), (1, 2), (1, 3))
    assert summary.n_non_finite == 4


# ------------------------------------------------------------------ summarize


def test_summarize_nan_not_first_propagates() -> None:
    # The aggregate over prompts: a NaN in the second prompt's second position.
    s = summarize([np.array([0.0, 0.5]), np.array([0.25, NAN, 0.1])])
    assert s.n == 5
    assert math.isnan(s.mean)  # no nanmean
    assert math.isnan(s.max)  # not 0.5
    assert math.isnan(s.median) and math.isnan(s.p99)
    assert s.non_finite == ((1, 1),)
    # Finite data: non_finite empty, and +inf is still an ordinary (huge) value.
    assert summarize([np.array([1.0, 2.0])]).non_finite == ()
    s = summarize([np.array([0.0, INF])])
    assert s.max == INF and s.mean == INF and s.non_finite == ((0, 1),)


def test_percentile_with_nan_is_nan() -> None:
    # Sorted, NaN goes last; the old code gave 2.0 for the median of [1, 2, nan].
    assert math.isnan(percentile([1.0, 2.0, NAN], 50))
    assert math.isnan(percentile([NAN], 0))
    assert percentile([1.0, 2.0, INF], 50) == 2.0


def test_clustered_mean_with_both_infinities_does_not_raise() -> None:
    # math.fsum raises on inf + -inf; the mean is NaN instead.
    mean, se = clustered_mean_se([np.array([INF]), np.array([-INF, 1.0])])
    assert math.isnan(mean) and math.isnan(se)
    mean, se = clustered_mean_se([np.array([1.0, NAN]), np.array([2.0])])
    assert math.isnan(mean) and math.isnan(se)


# ------------------------------------------------------------------ aggregate


def test_aggregate_faults_and_round_trip() -> None:
    per_item: list[tuple[str, list]] = [
        ("r001", []),
        ("r003", [non_finite("KL", (2, 5), ("nan",))]),
        (
            "r007",
            [
                non_finite("KL", (0,), ("+inf",)),
                not_normalised("test logprobs", (4,), (0.5,), 0.01),
                empty_generation_fault("the test", "the baseline", 3),
            ],
        ),
    ]
    assert aggregate_faults(per_item, n_items=20) == [
        "non-finite KL in 2 of 20 prompts: r003 (positions 2, 5), r007 (position 0)",
        "test logprobs not normalised in 1 of 20 prompts: r007 (position 4)",
        "empty generation in 1 of 20 prompts: r007 (the test)",
    ]
    assert aggregate_faults([("r001", [])]) == []
    for _, problems in per_item:
        for problem in problems:
            doc = json.loads(json.dumps(problem.to_dict()))
            assert fault_from_plain(doc) == problem
    with pytest.raises(ValueError, match="unknown"):
        fault_from_plain({"type": "other"})
