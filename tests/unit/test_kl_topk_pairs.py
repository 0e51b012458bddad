"""Two sides known by their top-k (:func:`~pytest_infercheck.metrics.kl.topk_pair_stats`):
the mass tolerance each side is given is the one its tail is bounded with, the top-k check's
tolerance and the sides' names reach its problems, and same-top is a boolean array (found by
the mutation run, tests/unit/MUTATION.md). KL values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.metrics.keys import TextTopK
from pytest_infercheck.metrics.kl import (
    side_mass_tol,
    topk_kl_lower_bound,
    topk_kl_lower_bound_positions,
    topk_pair_stats,
)

L = math.log
BASE = [{0: L(0.9), 1: L(0.05)}]
TEST = [{0: L(0.5), 1: L(0.3)}]
KNOWN = 0.9 * L(0.9 / 0.5) + 0.05 * L(0.05 / 0.3)
"""Both sides know tokens 0 and 1: 0.9 ln(0.9/0.5) + 0.05 ln(0.05/0.3) = 0.4394201."""


def kl(mass_tol: object) -> float:
    stats = topk_pair_stats(BASE, [L(0.9)], TEST, [L(0.5)], [0], mass_tol=mass_tol)  # type: ignore[arg-type]
    return float(stats.kl[0])


def test_no_tolerance_bounds_the_tails_at_their_own_mass() -> None:
    """Tails P = 0.05, Q = 0.2: + 0.05 ln(0.05/0.2) = -0.0693147."""
    assert kl(0.0) == pytest.approx(KNOWN + 0.05 * L(0.05 / 0.2), abs=1e-12)
    assert kl(0.0) == pytest.approx(0.3701053, abs=1e-7)


def test_each_side_is_bounded_with_its_own_tolerance() -> None:
    """(0, 0.2): P = 0.05, Q up to 0.4: min 0.05 ln(0.05/0.4). (0.2, None): P in [0, 0.25],
    Q up to 0.201 (the test side's 1e-3, read from its float64 values); P ln(P/Q) is least
    at P = Q/e: -0.201/e."""
    assert kl((0.0, 0.2)) == pytest.approx(KNOWN + 0.05 * L(0.05 / 0.4), abs=1e-12)
    assert kl((0.2, None)) == pytest.approx(KNOWN - 0.201 / math.e, abs=1e-9)
    # Unwritten: each side's 1e-3, P up to 0.051 and Q up to 0.201.
    assert kl(None) == pytest.approx(KNOWN + 0.051 * L(0.051 / 0.201), abs=1e-12)


def test_a_top_k_that_does_not_normalise_is_a_problem_of_its_side_at_the_given_tolerance() -> None:
    """0.6 + 0.6 = 1.2: logsumexp ln 1.2 = +0.182 over the default 0.02."""
    bad = [{0: L(0.6), 1: L(0.6)}]
    base_bad = topk_pair_stats(bad, [L(0.6)], TEST, [L(0.5)], [0])
    assert [p.describe() for p in base_bad.problems] == [
        "baseline top-k logprobs do not normalise at position 0 (logsumexp +0.182; tolerance 0.02)"
    ]
    test_bad = topk_pair_stats(TEST, [L(0.5)], bad, [L(0.6)], [0])
    assert [p.describe() for p in test_bad.problems] == [
        "test top-k logprobs do not normalise at position 0 (logsumexp +0.182; tolerance 0.02)"
    ]
    assert topk_pair_stats(bad, [L(0.6)], bad, [L(0.6)], [0], topk_tol=0.5).problems == ()


def test_same_top_is_a_boolean_array() -> None:
    """It goes into records and JSON as booleans (token 0 tops both sides here)."""
    stats = topk_pair_stats(BASE, [L(0.9)], TEST, [L(0.5)], [0])
    assert stats.same_top.dtype == np.bool_ and stats.same_top.tolist() == [True]


def test_a_sides_tolerance_is_read_from_all_its_values_chosen_ones_too() -> None:
    """-0.5, -1.0 and -2.0 are bfloat16 values (tolerance 0.3); ln 0.3 is float32 only
    (1e-3): one such value anywhere on the side, a chosen one too, makes it float32."""
    assert side_mass_tol([{0: -0.5, 1: -1.0}]) == 0.3
    assert side_mass_tol([{0: -0.5, 1: -1.0}], [L(0.3)]) == 0.001
    assert side_mass_tol([{0: -0.5, 1: -1.0}, {0: L(0.3)}]) == 0.001


def test_an_unwritten_tolerance_is_each_sides_over_all_positions() -> None:
    """Position 0 alone holds bfloat16 values on both sides, position 1 float32 ones: each
    side's tolerance is 1e-3, also at position 0. There the sides know tokens 0 and 1:
    p = (e^-0.5, e^-1), q = (e^-0.5, e^-2): 0 + e^-1 (-1 + 2) = e^-1; tails P = 1 - e^-0.5 -
    e^-1 and Q = 1 - e^-0.5 - e^-2, each up to 1e-3 more; P ln(P / Q) falls with P below
    Q / e, least at the largest P and Q."""
    base = [{0: -0.5, 1: -1.0}, {0: L(0.3), 1: L(0.6)}]
    test = [{0: -0.5, 1: -2.0}, {0: L(0.3), 1: L(0.6)}]
    p = 1 - math.exp(-0.5) - math.exp(-1) + 0.001
    q = 1 - math.exp(-0.5) - math.exp(-2) + 0.001
    expected = math.exp(-1) + p * L(p / q)
    got = topk_kl_lower_bound_positions(base, test)
    assert got[0] == pytest.approx(expected, abs=1e-12)
    # Read from position 0 alone (0.3 each), the tails could move much further.
    assert got[0] > topk_kl_lower_bound_positions(base[:1], test[:1])[0] + 0.1


def test_a_text_two_base_entries_carried_is_left_out_of_the_shared_tokens() -> None:
    """The baseline's "a" stood for two tokens: only "b" is shared, p = q = 0.3, and the
    tails are both 0.7 (mass_tol 0): KL 0. Counting "a" (0.5 against 0.4) would give
    0.5 ln(0.5/0.4) + 0.2 ln(0.2/0.3) = 0.0305."""
    base = TextTopK({"a": L(0.5), "b": L(0.3)}, collided=["a"])
    test = {"a": L(0.4), "b": L(0.3)}
    assert topk_kl_lower_bound(base, test, mass_tol=0.0) == pytest.approx(0.0, abs=1e-12)  # type: ignore[arg-type]
    clean = TextTopK({"a": L(0.5), "b": L(0.3)})
    assert topk_kl_lower_bound(clean, test, mass_tol=0.0) == pytest.approx(  # type: ignore[arg-type]
        0.5 * L(0.5 / 0.4) + 0.2 * L(0.2 / 0.3), abs=1e-12
    )
