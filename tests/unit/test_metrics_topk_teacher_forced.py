"""Teacher-forced comparisons where one or both sides are known only by their top-k
(vLLM's ``prompt_logprobs``): :func:`~pytest_infercheck.metrics.kl.topk_pair_stats` and
:func:`~pytest_infercheck.metrics.topk_full.full_vs_topk_stats`. Expected values are worked
by hand in the comments; a NaN or ``+inf`` is a problem, never a pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.metrics.kl import DEFAULT_MASS_TOL as D
from pytest_infercheck.metrics.kl import position_stats, topk_pair_stats
from pytest_infercheck.metrics.topk_full import full_vs_topk_stats

ln = math.log


def test_pair_both_top_k_with_the_chosen_token_known_on_both_sides() -> None:
    # The tails are known to within D = mass_tol = 1e-3 (the values are float ones: each row's
    # mass in [1 - D, 1 + D]);
    # the tail term takes the base tail x nearest y / e in its range, the test tail y at most.
    # t=0, chosen 1: B={1:.5, 2:.3}, T={1:.4, 3:.4}; shared S={1}; P in [(.5 - D), (.5 + D)],
    #   Q <= (.6 + D); (.6 + D) / e = .22 is below: x = (.5 - D)
    #   KL = .5 ln(.5/.4) + (.5 - D) ln((.5 - D)/(.6 + D)) = 0.0187633 (0.0204110 at P=.5, Q=.6)
    #   same_top: 1 vs (1, 3 tied at .4 -> the lower id 1) -> True; delta_p = .4 - .5
    # t=1, chosen 5 (outside both top-k, known by its chosen logprob):
    #   B={2:.6, 3:.2, 5:.1}, T={3:.7, 2:.1, 5:.05}; S={2,3,5}; P in [(.1 - D), (.1 + D)],
    #   Q <= (.15 + D); (.15 + D) / e = .055 is below: x = (.1 - D)
    #   KL = .6 ln 6 + .2 ln(2/7) + .1 ln 2 + (.1 - D) ln((.1 - D)/(.15 + D)) = 0.8520240
    #   same_top: 2 vs 3 -> False; delta_p = .05 - .1
    stats = topk_pair_stats(
        [{1: ln(0.5), 2: ln(0.3)}, {2: ln(0.6), 3: ln(0.2)}],
        [ln(0.5), ln(0.1)],
        [{1: ln(0.4), 3: ln(0.4)}, {3: ln(0.7), 2: ln(0.1)}],
        [ln(0.4), ln(0.05)],
        [1, 5],
    )
    expected_0 = 0.5 * ln(0.5 / 0.4) + (0.5 - D) * ln((0.5 - D) / (0.6 + D))
    expected_1 = (
        0.6 * ln(6) + 0.2 * ln(2 / 7) + 0.1 * ln(2) + (0.1 - D) * ln((0.1 - D) / (0.15 + D))
    )
    assert stats.kl.tolist() == pytest.approx([expected_0, expected_1], abs=1e-12)
    assert expected_0 == pytest.approx(0.0187633, abs=1e-7)
    assert expected_1 == pytest.approx(0.8520240, abs=1e-7)
    assert stats.same_top.tolist() == [True, False]
    assert stats.delta_p.tolist() == pytest.approx([-0.1, -0.05], abs=1e-12)
    assert stats.problems == ()


def test_pair_identical_sides_give_zero() -> None:
    top = [{4: ln(0.7), 2: ln(0.2)}]
    stats = topk_pair_stats(top, [ln(0.7)], top, [ln(0.7)], [4])
    assert stats.kl.tolist() == [0.0]
    assert stats.delta_p.tolist() == [0.0]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_pair_a_non_finite_chosen_logprob_is_a_problem(bad: float) -> None:
    stats = topk_pair_stats([{1: ln(0.5)}], [ln(0.5)], [{1: ln(0.5)}], [bad], [1])
    assert math.isnan(stats.kl[0])
    kinds = [p.fault for p in stats.problems]
    assert "non-finite test top-k logprobs" in kinds
    assert "non-finite KL" in kinds


def test_pair_refuses_mismatched_lengths_and_empty_top_k() -> None:
    with pytest.raises(ValueError, match="need one top-k map"):
        topk_pair_stats([{1: 0.0}], [0.0], [{1: 0.0}], [0.0, 0.0], [1])
    with pytest.raises(ValueError, match="position 0: a top-k is empty"):
        topk_pair_stats([{}], [0.0], [{1: 0.0}], [0.0], [1])


def test_full_against_top_k_reads_the_full_row_at_the_test_side_known_ids() -> None:
    # base p = [.1, .6, .2, .1]; test top {2: .5, 1: .3}. The base tail is summed from its
    # row (exact); the test tail is at most 1 + D - (its mass on K), D = 1e-3.
    # t=0, chosen 1 (in the test's top-k): K={2,1}; P = .1 + .1 = .2, Q <= (.2 + D)
    #   KL = .2 ln(.2/.5) + .6 ln(.6/.3) + .2 ln(.2/(.2 + D)) = 0.2316327 (0.2326302 at Q=.2)
    #   same_top: argmax p = 1, test top-1 = 2 -> False; delta_p = .3 - .6
    # t=1, chosen 3 (outside it, test logprob .05): K={2,1,3}; P=.1, Q <= (.15 + D)
    #   KL = .2 ln(.2/.5) + .6 ln 2 + .1 ln(.1/.05) + .1 ln(.1/(.15 + D)) = 0.2607339
    row = [ln(0.1), ln(0.6), ln(0.2), ln(0.1)]
    test_top = {2: ln(0.5), 1: ln(0.3)}
    stats = full_vs_topk_stats([row, row], [test_top, test_top], [ln(0.3), ln(0.05)], [1, 3])
    shared = 0.2 * ln(0.4) + 0.6 * ln(2)
    assert shared == pytest.approx(0.2326302, abs=1e-7)
    assert stats.kl.tolist() == pytest.approx(
        [shared + 0.2 * ln(0.2 / (0.2 + D)), shared + 0.1 * ln(2) + 0.1 * ln(0.1 / (0.15 + D))],
        abs=1e-12,
    )
    assert stats.kl[0] == pytest.approx(0.2316327, abs=1e-7)
    assert stats.kl[1] == pytest.approx(0.2607339, abs=1e-7)
    assert stats.same_top.tolist() == [False, False]
    assert stats.delta_p.tolist() == pytest.approx([-0.3, -0.05], abs=1e-9)
    assert stats.problems == ()


def test_full_against_top_k_names_a_nan_in_the_full_row_and_the_kl() -> None:
    row = [ln(0.5), math.nan, ln(0.5)]
    stats = full_vs_topk_stats([row], [{1: ln(0.5)}], [ln(0.5)], [1])
    assert math.isnan(stats.kl[0])
    faults = [p.fault for p in stats.problems]
    assert "non-finite baseline logprobs" in faults
    assert "non-finite KL" in faults


def test_full_against_top_k_refuses_a_row_per_position_mismatch() -> None:
    with pytest.raises(ValueError, match="need one baseline row"):
        full_vs_topk_stats([[0.0]], [{0: 0.0}], [0.0], [0, 0])


def test_the_top_k_kl_never_exceeds_the_full_kl() -> None:
    # The lower bound, checked on random distributions against the exact full-vocabulary KL.
    rng = np.random.default_rng(7)
    for _ in range(50):
        logits = rng.normal(size=(2, 40)) * 3
        base, test = (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).tolist()
        chosen = int(rng.integers(40))
        exact = position_stats([base], [test], [chosen]).kl[0]
        k = int(rng.integers(1, 10))
        top_b = {int(v): base[v] for v in np.argsort(base)[::-1][:k]}
        top_t = {int(v): test[v] for v in np.argsort(test)[::-1][:k]}
        pair = topk_pair_stats([top_b], [base[chosen]], [top_t], [test[chosen]], [chosen])
        mixed = full_vs_topk_stats([base], [top_t], [test[chosen]], [chosen])
        assert pair.kl[0] <= exact + 1e-9
        assert mixed.kl[0] <= exact + 1e-9
