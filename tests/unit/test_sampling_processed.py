"""An engine's reported processed distribution against the expected one, by hand."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.metrics.sampling import Expected, compare_processed

# top_k 3 of (.4, .3, .15, .1, .05): (.4, .3, .15) / .85
EXPECTED = Expected({0: 0.4 / 0.85, 1: 0.3 / 0.85, 2: 0.15 / 0.85}, excluded=frozenset({3, 4}))


def test_a_faithful_report_has_no_gap() -> None:
    gap = compare_processed(dict(EXPECTED.probs), EXPECTED)
    assert gap.max_abs == pytest.approx(0.0, abs=1e-15)
    assert gap.extra == () and gap.missing == () and gap.compared == 3


def test_a_truncation_not_applied_shows_extra_tokens() -> None:
    gap = compare_processed({0: 0.4, 1: 0.3, 2: 0.15, 3: 0.1, 4: 0.05}, EXPECTED)
    assert gap.extra == (3, 4)
    # conditional on the support the untruncated report still matches
    assert gap.max_abs == pytest.approx(0.0, abs=1e-15)


def test_a_wrong_temperature_shows_in_max_abs() -> None:
    # reported at T = .5 over the same support: (.16, .09, .0225) / .2725
    reported = {0: 0.16 / 0.2725, 1: 0.09 / 0.2725, 2: 0.0225 / 0.2725}
    gap = compare_processed(reported, EXPECTED)
    assert gap.max_abs == pytest.approx(0.16 / 0.2725 - 0.4 / 0.85)


def test_missing_tokens_complete_and_cut_lists() -> None:
    # a complete list (2 < asked 5) without token 2: missing; compared on {0, 1}
    gap = compare_processed({0: 4 / 7, 1: 3 / 7}, EXPECTED, asked=5)
    assert gap.missing == (2,) and gap.max_abs == pytest.approx(0.0, abs=1e-15)
    # a list cut at n = 2 holding the top two: nothing missing
    assert compare_processed({0: 0.47, 1: 0.35}, EXPECTED, asked=2).missing == ()
    # a list cut at n = 2 holding tokens 0 and 2: token 1 (more probable than 2) missing
    assert compare_processed({0: 0.6, 2: 0.2}, EXPECTED, asked=2).missing == (1,)


def test_boundary_and_tail_tokens_are_not_extra() -> None:
    expected = Expected({0: 0.6}, boundary=frozenset({1}), tail=0.4, excluded=frozenset({2}))
    gap = compare_processed({0: 0.5, 1: 0.1, 7: 0.3, 2: 0.1}, expected)
    assert gap.extra == (2,)
    assert gap.compared == 1 and gap.max_abs == pytest.approx(0.0, abs=1e-15)


def test_bad_reports_raise() -> None:
    for bad in (math.nan, math.inf, -0.1, 1.5):
        with pytest.raises(ValueError, match="reported probability"):
            compare_processed({0: bad}, EXPECTED)
