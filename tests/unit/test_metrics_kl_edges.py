"""Edges of the KL metrics that the mutation run (mutmut) found unguarded: one side of the
wrong rank, the mass tolerance passed down per position, and no numpy warnings on rows with
``-inf``, NaN or ``+inf``. Expected values are worked by hand."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from pytest_infercheck.metrics.kl import DEFAULT_MASS_TOL as D
from pytest_infercheck.metrics.kl import position_stats, topk_kl_lower_bound_positions

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("one_d", ["base", "test"])
def test_either_side_not_2d_is_refused(one_d: str) -> None:
    rows = np.log(np.full((1, 2), 0.5))
    flat = rows[0]
    base, test = (flat, rows) if one_d == "base" else (rows, flat)
    with pytest.raises(ValueError, match="must be 2-D"):
        position_stats(base, test, [0])


def test_topk_positions_pass_the_mass_tolerance_down() -> None:
    base, test = [{0: math.log(0.9)}], [{0: math.log(0.5)}]
    # shared term 0.9 log(0.9 / 0.5); the tails are not known, only their ranges.
    shared = 0.9 * math.log(0.9 / 0.5)
    # mass_tol = 0.2: base tail in [max(0.8, 0.9) - 0.9, 1.2 - 0.9] = [0, 0.3], test tail at
    # most 1.2 - 0.5 = 0.7; 0.7 / e = 0.2575 is inside [0, 0.3]: the term is -0.7 / e.
    got = topk_kl_lower_bound_positions(base, test, mass_tol=0.2)
    assert got[0] == pytest.approx(shared - 0.7 / math.e, rel=1e-12)
    assert got[0] == pytest.approx(0.27149, abs=1e-5)
    # default D = 1e-3: base tail in [0.099, 0.101], test at most 0.501; 0.501 / e is
    # above the base range: x = (0.1 + D).
    default = topk_kl_lower_bound_positions(base, test)
    expected = shared + (0.1 + D) * math.log((0.1 + D) / (0.5 + D))
    assert default[0] == pytest.approx(expected, rel=1e-12)


def test_non_finite_rows_raise_no_numpy_warnings() -> None:
    base = np.array([[0.0, -INF], [NAN, 0.0], [INF, 0.0], [-INF, -INF], [800.0, 0.0]])
    test = np.array([[-INF, 0.0], [0.0, -INF], [0.0, -INF], [0.0, -INF], [0.0, 800.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = position_stats(base, test, [0, 1, 0, 0, 0], row_tol=INF)
    # row 0: p_base(0) = 1 against p_test(0) = 0: KL = +inf
    assert stats.kl[0] == INF
    assert math.isnan(stats.kl[1])
    assert stats.problems
