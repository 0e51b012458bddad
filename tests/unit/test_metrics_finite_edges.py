"""Edges of the non-finite / normalisation checks that the mutation run (mutmut) found
unguarded: the ends of the shown lists, units carried through, defaults of old records,
rows past the first chunk, and no numpy warnings on the fail-closed paths. Expected values
are worked by hand."""

from __future__ import annotations

import math
import warnings

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
    check_logprob_rows,
    check_scalar,
    check_topk_rows,
    empty_generation,
    logsumexp_tolerance,
    non_finite_kinds,
    row_faults,
    row_logsumexp,
    strict_mean,
)

NAN, INF = math.nan, math.inf


def test_ten_positions_are_all_shown_eleven_are_cut() -> None:
    ten = non_finite("KL", tuple(range(10)), ("nan",))
    assert ten.describe() == "non-finite KL at positions 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (NaN)"
    ten_off = not_normalised("test logprobs", tuple(range(10)), (0.5,) * 10, 0.1)
    assert "(logsumexp " + ", ".join(["+0.5"] * 10) + "; tolerance 0.1)" in ten_off.describe()
    eleven = not_normalised("test logprobs", tuple(range(11)), (0.5,) * 11, 0.1)
    assert eleven.describe().endswith(
        "(11 in all) (logsumexp " + ", ".join(["+0.5"] * 10) + ", ...; tolerance 0.1)"
    )


def test_old_records_without_a_unit_get_the_default_and_a_unit_survives() -> None:
    old = fault_from_plain({"type": "non-finite", "what": "KL", "positions": [1], "kinds": ["nan"]})
    assert old == non_finite("KL", (1,), ("nan",))
    doc = {"type": "non-finite", "what": "latency", "positions": [2], "kinds": ["nan"]}
    assert fault_from_plain({**doc, "unit": "request"}).unit == "request"
    off = {"type": "not-normalised", "what": "w", "positions": [0], "logsumexp": [0.5], "tol": 0.1}
    assert fault_from_plain(off) == not_normalised("w", (0,), (0.5,), 0.1)
    assert fault_from_plain({**off, "unit": "request"}).unit == "request"
    empty = {"type": "empty-generation", "empty": "a", "other": "b", "other_count": 2}
    assert fault_from_plain(empty) == empty_generation_fault("a", "b", 2, "tokens")
    chars = fault_from_plain({**empty, "unit": "characters"})
    assert chars.text == "empty generation: a generated no characters while b generated 2"


def test_minus_inf_counts_unless_allowed() -> None:
    assert non_finite_kinds([-INF]) == ("-inf",)
    assert check_scalar("logprob", -INF, allow_neg_inf=True) is None
    assert check_scalar("KL", -INF) == non_finite("KL", (), ("-inf",))


def test_one_token_against_none_is_an_empty_generation() -> None:
    assert empty_generation(1, 0) == empty_generation_fault("the test", "the baseline", 1, "tokens")
    assert empty_generation(0, 1) == empty_generation_fault("the baseline", "the test", 1, "tokens")


def test_float64_tolerance_by_hand() -> None:
    assert logsumexp_tolerance(2**20, "float64") == 2.0**-33 + 1e-9


def test_rows_past_the_first_chunk_and_the_vocabulary_width_are_computed() -> None:
    # 200 rows of two tokens at p = 0.5: every logsumexp is log(0.5 + 0.5) = 0.
    rows = np.full((200, 2), math.log(0.5))
    assert row_logsumexp(rows) == pytest.approx(np.zeros(200), abs=1e-15)
    assert check_logprob_rows("test logprobs", rows) == []


def test_row_faults_carry_the_unit_and_the_tolerance_is_inclusive() -> None:
    assert row_faults("w", [0.5, -0.5], 0.5) == []
    nan_row, off_row = row_faults("w", [NAN, 0.75], 0.5, unit="request")
    assert nan_row == non_finite("w", (0,), ("nan",), unit="request")
    assert off_row == not_normalised("w", (1,), (0.75,), 0.5, unit="request")


def test_the_fail_closed_paths_raise_no_numpy_warnings() -> None:
    rows = np.array([[NAN, 0.0], [INF, 0.0], [-INF, -INF], [INF, -INF], [0.0, -INF]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lse = row_logsumexp(rows)
        problems = check_logprob_rows("w", rows)
        top = check_topk_rows("w", [{1: NAN}, {1: INF}, {1: -INF}, {}])
        mean = strict_mean([INF, -INF])
    assert math.isnan(lse[0]) and lse[1] == INF and lse[2] == -INF and lse[4] == 0.0
    assert [p.fault for p in problems] == ["non-finite w", "w not normalised"]
    assert [p.positions for p in top] == [(0, 1)]
    assert mean is not None and math.isnan(mean)


def test_aggregate_lists_five_by_default_and_no_positions_for_a_scalar() -> None:
    nan = non_finite("KL", (0,), ("nan",))
    five = aggregate_faults([(f"p{i}", [nan]) for i in range(5)])
    assert five == [
        "non-finite KL in 5 of 5 prompts: " + ", ".join(f"p{i} (position 0)" for i in range(5))
    ]
    six = aggregate_faults([(f"p{i}", [nan]) for i in range(6)])
    assert six[0].endswith("p4 (position 0), ...")
    scalar = check_scalar("similarity", NAN)
    assert scalar is not None
    assert aggregate_faults([("c1", [scalar])]) == ["non-finite similarity in 1 of 1 prompts: c1"]
