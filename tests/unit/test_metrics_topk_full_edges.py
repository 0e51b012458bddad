"""Edges of the top-k vs full-row comparison that the mutation run (mutmut) found
unguarded: a length mismatch on one input alone, the tie-break of the baseline's top-1,
the tolerances passed down and the default names. Expected values are worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.metrics.kl import DEFAULT_MASS_TOL as D
from pytest_infercheck.metrics.topk_full import topk_vs_full_stats

HALF = [math.log(0.5), math.log(0.5)]


def test_a_chosen_logprob_list_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="need one top-k map"):
        topk_vs_full_stats([{0: math.log(0.5)}], [-0.5, -0.5], [HALF], [0])


def test_an_empty_top_k_is_named() -> None:
    with pytest.raises(ValueError, match="position 0: the baseline's top-k is empty"):
        topk_vs_full_stats([{}], [-0.5], [HALF], [0])


def test_tied_top_1_is_the_lowest_id_and_same_top_is_boolean() -> None:
    # baseline: ids 0 and 1 tied at 0.5 -> its top-1 is id 0; test argmax is id 0 (0.6)
    stats = topk_vs_full_stats(
        [{1: math.log(0.5), 0: math.log(0.5)}],
        [math.log(0.5)],
        [[math.log(0.6), math.log(0.4)]],
        [0],
    )
    assert stats.same_top.dtype == np.bool_
    assert stats.same_top.tolist() == [True]


def test_mass_tolerance_and_top_k_tolerance_are_passed_down() -> None:
    top, chosen, row = [{0: math.log(0.9)}], [math.log(0.9)], [HALF]
    shared = 0.9 * math.log(0.9 / 0.5)  # tails: the test's 0.5 (summed), the base's ~0.1
    # mass_tol = 0.2: the base tail in [max(0.8, 0.9) - 0.9, 1.2 - 0.9] = [0, 0.3]; 0.5 / e =
    # 0.184 is inside it: the tail term is -0.5 / e.
    loose = topk_vs_full_stats(top, chosen, row, [0], mass_tol=0.2)
    assert loose.kl[0] == pytest.approx(shared - 0.5 / math.e, rel=1e-12)
    # default D = 1e-3: the base tail in [0.099, 0.101]; 0.184 is above it: x = 0.101.
    default = topk_vs_full_stats(top, chosen, row, [0])
    assert default.kl[0] == pytest.approx(shared + (0.1 + D) * math.log((0.1 + D) / 0.5), rel=1e-12)
    # a top-k holding 1.05 of mass: logsumexp log(1.05) = 0.0488 > 0.02, but <= 0.1
    heavy = [{0: math.log(0.6), 1: math.log(0.45)}]
    assert topk_vs_full_stats(heavy, [math.log(0.6)], [HALF], [0], topk_tol=0.1).problems == ()
    (problem,) = topk_vs_full_stats(heavy, [math.log(0.6)], [HALF], [0]).problems
    assert problem.fault == "baseline top-k logprobs not normalised"


def test_minus_inf_chosen_logprob_is_fine_and_the_test_side_is_named() -> None:
    stats = topk_vs_full_stats([{0: math.log(0.5)}], [-math.inf], [HALF], [0])
    assert stats.problems == ()
    assert stats.delta_p[0] == 0.5
    (off,) = topk_vs_full_stats([{0: math.log(0.5)}], [math.log(0.5)], [[0.0, 0.0]], [0]).problems
    assert off.fault == "test logprobs not normalised"
