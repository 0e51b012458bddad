"""Tie-aware divergences (:mod:`pytest_infercheck.metrics.ties`) and their gate: margins
computed by hand from full rows and top-k maps, the label's boundaries, a NaN failing
closed, ``tie_margin`` / ``fail_on`` in a comparison's verdict and aggregate."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pydantic
import pytest

from pytest_infercheck.checks.comparison.aggregate import aggregate, format_aggregate
from pytest_infercheck.checks.comparison.judge import item_verdict
from pytest_infercheck.checks.comparison.judge import item_verdict as item_violations
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.checks.comparison.spec import DiffThresholds, Thresholds
from pytest_infercheck.checks.comparison.verdicts import describe
from pytest_infercheck.metrics.ties import (
    Margin,
    count_labels,
    divergence_label,
    full_row_margin,
    noise_floor,
    top_k_margin,
)

from .factories import prompt_comparison


def test_a_full_row_margin_is_own_minus_other_logprob() -> None:
    row = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    # log(0.5 / 0.3) = 0.510826; log(0.3 / 0.2) = 0.405465 (float32 inputs: 1e-6)
    assert full_row_margin(row, 0, 1).value == pytest.approx(0.510826, abs=1e-6)
    assert full_row_margin(row, 1, 2).value == pytest.approx(0.405465, abs=1e-6)
    assert full_row_margin(row, 0, 1).exact
    # a side that chose the less likely token (a rescored near-tie): negative
    assert full_row_margin(row, 2, 1).value == pytest.approx(-0.405465, abs=1e-6)


def test_a_top_k_margin_is_exact_with_the_other_token_else_a_lower_bound() -> None:
    top = {11: -0.70, 12: -0.71, 13: -2.5}
    assert top_k_margin(top, 11, 12) == Margin(pytest.approx(0.01), exact=True)  # type: ignore[arg-type]
    # the other token (99) is outside the top-k: its logprob <= -2.5, margin >= 1.8
    bound = top_k_margin(top, 11, 99)
    assert bound is not None and not bound.exact
    assert bound.value == pytest.approx(-0.70 + 2.5)
    # the own logprob given (a generation's chosen logprob), other read from the map
    assert top_k_margin({12: -1.0}, 11, 12, own_logprob=-0.25) == Margin(0.75)
    # the other side's logprob given (a teacher-forced row's chosen)
    assert top_k_margin({11: -0.5}, 11, 12, other_logprob=-0.75) == Margin(0.25)
    # nothing known about the own token, or no map at all: no margin
    assert top_k_margin(top, 98, 99) is None
    assert top_k_margin(None, 11, 12) is None
    assert top_k_margin({}, 11, 12, own_logprob=-0.1) is None
    # text keys (a server that sends no ids)
    assert top_k_margin({" cat": -0.1, " dog": -0.3}, " cat", " dog").value == pytest.approx(0.2)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("margins", "label"),
    [
        ([Margin(0.01), Margin(0.005)], "near-tie"),  # at tie_margin: still a tie
        ([Margin(0.0014), Margin(0.00074)], "near-tie"),  # the f16-KV measurement
        ([Margin(-0.002), Margin(0.001)], "near-tie"),  # a rescored greedy choice
        ([Margin(0.0100001), Margin(0.0)], "decisive"),  # one side above: decisive
        ([Margin(0.001), Margin(0.23)], "decisive"),
        ([Margin(-0.5), Margin(0.001)], "decisive"),
        ([Margin(0.02, exact=False), Margin(0.001)], "decisive"),  # a bound above
        ([Margin(0.005, exact=False), Margin(0.001)], "unknown"),  # a bound within
        ([None, Margin(0.001)], "unknown"),
        ([None, Margin(0.5)], "decisive"),
        ([None, None], "unknown"),
        ([], "unknown"),
        ([Margin(math.nan), Margin(0.5)], "unknown"),  # fail closed, never decisive
        ([Margin(math.inf), Margin(0.001)], "unknown"),
    ],
)
def test_the_label_boundaries(margins: list[Margin | None], label: str) -> None:
    assert divergence_label(True, margins, 0.01) == label


def test_no_divergence_has_no_label_and_tie_margin_moves_the_boundary() -> None:
    assert divergence_label(False, [Margin(5.0), Margin(5.0)]) is None
    assert divergence_label(True, [Margin(0.05), Margin(0.02)]) == "decisive"  # default 0.01
    assert divergence_label(True, [Margin(0.05), Margin(0.02)], 0.1) == "near-tie"
    assert count_labels(["near-tie", None, "decisive", "near-tie"]) == {
        "near-tie": 2,
        "decisive": 1,
        "unknown": 0,
    }


def test_the_noise_floor_is_the_largest_chosen_delta_where_the_sides_agree() -> None:
    base = [-0.1, -0.2, -0.3]
    test = [-0.1005, -0.19, -0.9]
    # positions 0, 1 agree: |0.0005|, |0.01|; position 2 (the divergence) is not counted
    assert noise_floor(base, test, 2) == pytest.approx(0.01)
    assert noise_floor(base, test, 3) == pytest.approx(0.6)
    assert noise_floor(base, test, 0) is None
    assert noise_floor(None, test, 2) is None
    assert math.isnan(noise_floor([math.nan, -0.2], [-0.1, -0.2], 2))  # type: ignore[arg-type]


def _diverged(pid: str, margins: list[float | None], label: str | None) -> PromptComparison:
    return dataclasses.replace(
        prompt_comparison(pid, [0.001]),
        reference=None,
        answer_kind=None,
        base_answer=None,
        test_answer=None,
        sameness="token ids differ from token 0",
        margins=margins,
        noise_floor=0.0004,
        divergence_label=label,
        judged_past=True,  # teacher-forced past the divergence, no later disagreement
    )


TIE = _diverged("tie", [0.0012, 0.0007], "near-tie")
DECISIVE = _diverged("decisive", [0.2, 0.05], "decisive")
UNKNOWN = _diverged("unknown", [None, None], "unknown")
NOT_IDENTICAL = "outputs not identical: token ids differ from token 0 (expect: identical)"


def test_fail_on_decisive_passes_only_a_near_tie() -> None:
    strict, lenient = DiffThresholds(), DiffThresholds(fail_on="decisive")
    assert item_verdict(TIE, strict) == [NOT_IDENTICAL]
    assert item_verdict(TIE, lenient) == []
    assert item_verdict(DECISIVE, lenient) == [NOT_IDENTICAL]
    assert item_verdict(UNKNOWN, lenient) == [NOT_IDENTICAL]
    # min_similarity only says the texts differ: waived for a near-tie, not for the others
    similar = Thresholds(min_similarity=0.9, fail_on="decisive")
    assert item_violations(TIE, similar) == []
    assert item_violations(DECISIVE, similar) == ["text similarity 0 < min_similarity 0.9"]
    # every other gate still fails a near-tie
    assert item_violations(TIE, Thresholds(max_kl=0.0001, fail_on="decisive")) == [
        "mean KL 0.001 > max_kl 0.0001"
    ]


def test_a_non_finite_margin_or_floor_is_a_violation() -> None:
    nan_margin = dataclasses.replace(TIE, margins=[math.nan, 0.001], divergence_label="unknown")
    assert item_violations(nan_margin, Thresholds()) == [
        "non-finite divergence margins at side 0 (NaN)"
    ]
    nan_floor = dataclasses.replace(TIE, noise_floor=math.nan)
    assert item_violations(nan_floor, DiffThresholds(fail_on="decisive")) == [
        "non-finite noise floor (NaN)"
    ]


def test_the_aggregate_counts_labels_and_keeps_the_largest_floor() -> None:
    floor = dataclasses.replace(DECISIVE, noise_floor=0.003)
    agg = aggregate([TIE, floor, UNKNOWN, TIE], DiffThresholds(fail_on="decisive"))
    assert agg.divergence_labels == {"near-tie": 2, "decisive": 1, "unknown": 1}
    assert agg.noise_floor == 0.003
    assert agg.n_failed == 2  # the decisive and the unknown
    assert "divergences 2 near-tie, 1 decisive, 1 unknown; noise floor 0.003" in (
        format_aggregate(agg)
    )


def test_the_item_text_states_label_margins_and_floor() -> None:
    assert (
        "first divergence at token 0: near-tie (margins: baseline 0.0012, test 0.0007 nats; "
        "noise floor 0.0004)"
    ) in describe(TIE)
    bound = dataclasses.replace(DECISIVE, margins_exact=False)
    assert "test 0.05 nats (>= : a lower bound from a top-k)" in describe(bound)


@pytest.mark.parametrize("value", [0, -0.01])
def test_tie_margin_must_be_positive(value: float) -> None:
    with pytest.raises(pydantic.ValidationError, match="tie_margin"):
        Thresholds(tie_margin=value)
    with pytest.raises(pydantic.ValidationError, match="fail_on"):
        Thresholds(fail_on="sometimes")  # type: ignore[arg-type]
