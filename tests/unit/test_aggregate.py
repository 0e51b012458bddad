"""Suite aggregates, item verdicts, the sweep cliff and the summary table, by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pytest_infercheck.checks.comparison.aggregate import (
    ComparisonAggregateRecord,
    aggregate,
    aggregate_violations,
    format_aggregate,
)
from pytest_infercheck.checks.comparison.judge import item_verdict as item_violations
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.checks.comparison.terminal import COLUMNS, grouped_table, summary_rows
from pytest_infercheck.checks.comparison.verdicts import describe
from pytest_infercheck.checks.framework.outcome import Outcome
from pytest_infercheck.records import plain_data
from pytest_infercheck.render.table import render_table
from pytest_infercheck.render.text import safe_text
from pytest_infercheck.specs import Thresholds
from pytest_infercheck.xdist_scheduling import scope_of

from .factories import prompt_comparison


def comparison(
    pid: str, kl: list[float], same_top: list[bool], delta_p: list[float], flip: str = "unchanged"
) -> PromptComparison:
    return prompt_comparison(pid, kl, same_top, delta_p, flip)


RESULTS = [
    comparison("a", [0.1, 0.3], [True, False], [-0.2, 0.0], "correct_to_wrong"),
    comparison("b", [0.2], [True], [0.1], "unchanged"),
    comparison("c", [0.0, 0.0, 0.6], [True, True, True], [0.0, 0.0, -0.1], "wrong_to_correct"),
]


def test_aggregate_by_hand() -> None:
    agg = aggregate(RESULTS, Thresholds(max_kl_position=0.5))
    # Pooled KL: [0.1, 0.3, 0.2, 0, 0, 0.6] -> mean 1.2/6 = 0.2.
    assert agg.kl_n == 6 and agg.kl_mean == pytest.approx(0.2)
    # Clustered SE: cluster sums of (x - 0.2): a: -0.1+0.1 = 0; b: 0; c: -0.2-0.2+0.4 = 0.
    assert agg.kl_se == pytest.approx(0.0, abs=1e-12)
    assert agg.kl_max == pytest.approx(0.6)
    # Median of the six pooled values (0, 0, 0.1, 0.2, 0.3, 0.6) = 0.15.
    assert agg.kl_median == pytest.approx(0.15)
    assert agg.same_top_rate == pytest.approx(5 / 6)
    # delta-p pooled: [-0.2, 0, 0.1, 0, 0, -0.1]: mean -0.2/6, RMS sqrt(0.06/6) = 0.1.
    assert agg.delta_p_mean == pytest.approx(-0.2 / 6)
    assert agg.delta_p_rms == pytest.approx(0.1)
    assert agg.n_answered == 3 and agg.n_flips == 2
    assert agg.flips == {"correct_to_wrong": 1, "unchanged": 1, "wrong_to_correct": 1}
    # McNemar b=1, c=1: p = min(1, 2 * (C(2,0)+C(2,1))/4) = 1.
    assert agg.mcnemar_p == 1.0
    # Item a fails on its correct->wrong flip, c on KL_t 0.6 > 0.5; b passes.
    assert agg.n_failed == 2 and agg.failure_rate == pytest.approx(2 / 3)


def test_flip_rate_gate_uses_upper_wilson_bound_unless_point() -> None:
    agg = aggregate(RESULTS, Thresholds())
    # 2/3 flips; z = 1.959964; Wilson upper = (p + z^2/2n + z*sqrt(p(1-p)/n + z^2/4n^2))/(1+z^2/n)
    z, n, p = 1.959964, 3, 2 / 3
    upper = (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (
        1 + z * z / n
    )
    assert agg.flip_rate_high == pytest.approx(upper, rel=1e-5)
    upper_gate = Thresholds.model_validate({"flips": {"max_rate": 0.9}})
    point_gate = Thresholds.model_validate({"flips": {"max_rate": 0.9, "gate": "point"}})
    assert aggregate_violations(agg, upper_gate)  # upper bound ~0.94 > 0.9
    assert not aggregate_violations(agg, point_gate)  # 0.667 <= 0.9


def test_mean_kl_and_same_top_gates() -> None:
    agg = aggregate(RESULTS, Thresholds())
    assert aggregate_violations(agg, Thresholds(max_mean_kl=0.25)) == []
    assert "max_mean_kl 0.1" in aggregate_violations(agg, Thresholds(max_mean_kl=0.1))[0]
    assert "min_same_top 0.9" in aggregate_violations(agg, Thresholds(min_same_top=0.9))[0]


def test_item_violations() -> None:
    a = RESULTS[0]
    assert item_violations(a, Thresholds()) == [
        "answer flip correct_to_wrong (fail_item_on: correct_to_wrong)"
    ]
    never = Thresholds.model_validate({"flips": {"fail_item_on": "never"}})
    assert item_violations(a, never) == []
    found = item_violations(a, Thresholds(max_kl=0.1, max_kl_position=0.25, min_similarity=0.5))
    assert found == [
        "answer flip correct_to_wrong (fail_item_on: correct_to_wrong)",
        "mean KL 0.2 > max_kl 0.1",
        "max KL_t 0.3 > max_kl_position 0.25",
        "text similarity 0 < min_similarity 0.5",
    ]
    wrong_to_correct = RESULTS[2]
    assert item_violations(wrong_to_correct, Thresholds()) == []
    anyflip = Thresholds.model_validate({"flips": {"fail_item_on": "any"}})
    assert item_violations(wrong_to_correct, anyflip)


def test_failure_text_marks_divergence_and_escapes() -> None:
    result = dataclasses.replace(
        comparison("a", [0.1], [True], [0.0]),
        base_text="The sum is 42.",
        test_text="The sum is 4\x1b[31m7.",
        sameness="token ids differ from token 0",
    )
    text = Outcome(["mean KL 0.1 > max_kl 0.05"], describe(result)).failure_report()
    assert "baseline bf16@local: The sum is 4⟦2." in text
    assert "\x1b" not in text and "\\x1b[31m" in text
    assert "(token ids differ from token 0; ⟦ marks the first differing character)" in text
    assert "- mean KL 0.1 > max_kl 0.05" in text
    assert safe_text("x" * 500, 10) == "x" * 9 + "…"


def test_xdist_scope_groups_check_and_suite() -> None:
    assert (
        scope_of("m.yaml::compare(a-vs-b)::reasoning::r017") == "m.yaml::compare(a-vs-b)::reasoning"
    )
    assert scope_of("m.yml::sweep(a)::code::c1[q4]") == "m.yml::sweep(a)::code"
    assert scope_of("tests/test_x.py::test_y") == "tests/test_x.py::test_y"


def test_summary_table() -> None:
    agg = aggregate(RESULTS, Thresholds())
    record = ComparisonAggregateRecord("compare", "reasoning", [agg], {})
    nodeid = "m.yaml::compare(bf16-vs-q4)::reasoning::aggregate"
    rows = summary_rows([(nodeid, False, plain_data(record))])
    (row,) = rows
    # 1 failed item of 3 prompts; the factory's outputs ("4" against "5") differ, but their
    # records say nothing of their sameness (an older file): none counts as identical; KL max
    # 0.6; same-top 5/6; flips 2 of 3 (Wilson 0.21-0.94)
    assert row[:5] == ["compare(bf16-vs-q4)", "reasoning", "q4@local", "1/3", "0/3"]
    assert row[5].startswith("0.2±") and row[6:] == ["0.6", "0.833", "2/3 (0.21-0.94)", "FAIL"]
    lines = grouped_table(rows, COLUMNS)
    assert lines[0].split()[:3] == ["test", "failed", "identical"]
    assert lines[1] == "compare(bf16-vs-q4) reasoning:"
    assert lines[2].split()[:3] == ["q4@local", "1/3", "0/3"]
    assert len(lines) == 3


def test_format_aggregate_by_hand() -> None:
    """The aggregate's text, every number worked out by hand from RESULTS (see
    test_aggregate_by_hand): pooled KL [0.1, 0.3, 0.2, 0, 0, 0.6]; p90 at rank 0.9 * 5 = 4.5
    between 0.3 and 0.6 -> 0.45, p99 at 4.95 -> 0.585; 2 failed items (a: correct->wrong,
    c: KL_t 0.6 > 0.5); flips 2 of 3, Wilson 95%: centre (2/3 + z^2/6) / (1 + z^2/3) =
    0.5731, half 1.959964 * sqrt(2/27 + z^2/36) / (1 + z^2/3) = 0.3654 -> 0.208-0.939;
    McNemar on b = c = 1: p = 1."""
    agg = aggregate(RESULTS, Thresholds(max_kl_position=0.5))
    lines = format_aggregate(agg).splitlines()
    assert lines[0] == "q4@local vs bf16@local: 3 prompts, 2 failed items"
    assert lines[1].startswith("KL mean 0.2 ± ")  # SE 0 up to float rounding
    assert lines[1].endswith(
        "(SE, by prompt), median 0.15, p90 0.45, p99 0.585, max 0.6 over 6 positions"
    )
    assert lines[2] == "same-top rate 0.8333; delta-p mean -0.03333, RMS 0.1"
    assert lines[3] == (
        "flips 2/3 = 0.667 (CI 0.208-0.939) 1 correct to wrong, 1 unchanged, 1 wrong to "
        "correct; McNemar p = 1"
    )
    assert lines[4] == "severity 3 severe; methods 3 teacher-forced"
    assert len(lines) == 5  # no problem lines


def test_item_thresholds_are_strict_and_a_lower_bound_says_so() -> None:
    """A value equal to its limit passes (the gates are strict ``>`` / ``<``); a top-k
    comparison's KL is labelled a lower bound in both KL violations."""
    b = RESULTS[1]  # KL [0.2], similarity 0.0, unchanged
    at_limits = Thresholds(max_kl=0.2, max_kl_position=0.2, min_similarity=0.0)
    assert item_violations(b, at_limits) == []
    top_k = dataclasses.replace(b, method="top-k-lower-bound")
    assert item_violations(top_k, Thresholds(max_kl=0.1, max_kl_position=0.1)) == [
        "mean KL (lower bound) 0.2 > max_kl 0.1",
        "max KL_t (lower bound) 0.2 > max_kl_position 0.1",
    ]


def test_a_table_without_rows_is_its_header() -> None:
    """A stress check with no completed level has no rows: the header alone, no crash."""
    assert render_table([], (("level", ">"), ("consistent", "<"))) == ["level  consistent"]
