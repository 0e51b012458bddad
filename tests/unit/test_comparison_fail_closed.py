"""Fail closed in the comparison kinds (compare, sweep, diff): NaN, +inf, rows that do not
normalise and empty generations are violations of their own, on the item and in the suite
aggregate; what teacher-forced scoring is given; the degradation cliff, with evidence.

Every number is computed by hand in a comment. Run against the code before this change
(3fcfc20: a NaN passed every gate, the scoring's problems were dropped, an empty generation
was not a violation, the cliff was the first level with any failure), every test here
failed except three that guard what was already right: both sides scored on the baseline's
continuation (it fails when the test side is scored on its own continuation instead), two
empty generations agreeing, and a text-only suite having no mean KL to gate.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pytest_infercheck.backends.base import Capabilities
from pytest_infercheck.checks.comparison.aggregate import (
    CliffLevel,
    ComparisonAggregateRecord,
    SweepAggregateRecord,
    aggregate,
    aggregate_violations,
    cliff_evidence,
    cliff_table,
    degradation_cliff,
    self_check_level,
)
from pytest_infercheck.checks.comparison.judge import item_verdict as item_violations
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.checks.comparison.terminal import cliff_lines
from pytest_infercheck.metrics.consistency import logprob_faults
from pytest_infercheck.metrics.faults import non_finite, not_normalised
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.views import item_detail
from pytest_infercheck.specs import Thresholds
from tests.htmldom import Node, parse

from .comparison_fakes import (
    KL_UNIFORM_SKEWED,
    PROMPT_IDS,
    SKEWED,
    UNIFORM,
    FakeBackend,
    compare,
    generation,
    rows_of,
)
from .factories import prompt_comparison

NAN, INF = math.nan, math.inf
NEVER = Thresholds.model_validate({"flips": {"fail_item_on": "never"}})
"""No threshold at all: whatever fails under it fails closed, of its own."""


def unchanged(pid: str, kl: list[float]) -> PromptComparison:
    return prompt_comparison(pid, kl, flip="unchanged")


# -- what reaches teacher-forced scoring ----------------------------------------------------------
def test_both_sides_are_scored_on_the_baselines_continuation() -> None:
    """The outputs differ from their second token: the test side must still be scored on the
    baseline's continuation (prompt ids + the baseline's ids), never on its own."""
    base = FakeBackend("bf16", generation("46", [1, 2, 0]), rows_of(UNIFORM))
    test = FakeBackend("q4", generation("4777", [1, 3, 3, 3, 0]), rows_of(SKEWED))
    result = compare(base, test)
    assert base.scored == [(PROMPT_IDS, (1, 2, 0))]
    assert test.scored == [(PROMPT_IDS, (1, 2, 0))]
    assert result.method == "teacher-forced" and result.first_divergence == 1
    # one KL_t per position of the baseline's continuation, each KL(uniform || skewed)
    assert result.kl_per_position == pytest.approx([KL_UNIFORM_SKEWED] * 3, rel=1e-6)
    assert round(KL_UNIFORM_SKEWED, 6) == 0.130812


# -- one item ------------------------------------------------------------------------------------
def test_nan_logprob_rows_fail_the_item_naming_the_positions() -> None:
    """Rows 2 and 5 of the test side hold a NaN: their KL_t is NaN; the item fails with no
    threshold set, naming both positions, and its mean and max KL are NaN."""
    nan_row = [NAN, *SKEWED[1:]]
    test_rows = rows_of(SKEWED, {2: nan_row, 5: nan_row})
    base = FakeBackend("bf16", generation("12312", [1, 2, 3, 1, 2, 0]))
    test = FakeBackend("q4", generation("12312", [1, 2, 3, 1, 2, 0]), test_rows)
    result = compare(base, test)
    nan_at = [t for t, k in enumerate(result.kl_per_position) if math.isnan(k)]
    assert nan_at == [2, 5]
    assert item_violations(result, NEVER) == [
        "non-finite test logprobs at positions 2, 5 (NaN)",
        "non-finite KL at positions 2, 5 (NaN)",
    ]
    assert result.kl_mean is not None and math.isnan(result.kl_mean)
    assert result.kl_max is not None and math.isnan(result.kl_max)


def test_a_nan_kl_that_is_not_first_makes_the_max_nan_and_fails() -> None:
    """Python's max([0.0, nan]) is 0.0; the item's max must be NaN and fail."""
    result = unchanged("a", [0.0, NAN])
    assert result.kl_max is not None and math.isnan(result.kl_max)
    assert item_violations(result, Thresholds(max_kl_position=1.0)) == [
        "non-finite KL at position 1 (NaN)",
        # the gate reads a measure that is not finite: it fails too (verdict.gate)
        "max_kl_position: max KL_t is not finite (nan): fails",
    ]


def test_an_all_nan_prompt_fails() -> None:
    result = unchanged("a", [NAN, NAN, NAN])
    assert item_violations(result, Thresholds(max_kl=0.01, max_kl_position=1.0)) == [
        "non-finite KL at positions 0, 1, 2 (NaN)",
        "max_kl: mean KL is not finite (nan): fails",
        "max_kl_position: max KL_t is not finite (nan): fails",
    ]


def test_plus_inf_kl_is_named_and_fails_max_kl() -> None:
    """+inf is a real divergence (the test gives probability 0 to a token the baseline
    gives mass): named whatever the thresholds, and above max_kl and max_kl_position."""
    result = unchanged("a", [0.1, INF])
    assert result.kl_mean == INF and result.kl_max == INF
    assert item_violations(result, NEVER) == ["non-finite KL at position 1 (+inf)"]
    assert item_violations(result, Thresholds(max_kl=0.5, max_kl_position=1.0))[1:] == [
        "max_kl: mean KL is not finite (inf): fails",
        "max_kl_position: max KL_t is not finite (inf): fails",
    ]


def test_a_row_that_does_not_normalise_fails() -> None:
    """Test row 1 shifted by +0.5 (logsumexp 0.5, tolerance V 2^-24 + 1e-4 = 1.0e-4 for
    V = 4); its KL_t is 0.130812 - 0.5 = -0.369188, under any max_kl: only the
    normalisation check can see it."""
    shifted = [x + 0.5 for x in SKEWED]
    base = FakeBackend("bf16", generation("46", [1, 2, 0]))
    test = FakeBackend("q4", generation("46", [1, 2, 0]), rows_of(SKEWED, {1: shifted}))
    result = compare(base, test)
    assert result.kl_per_position[1] == pytest.approx(KL_UNIFORM_SKEWED - 0.5, rel=1e-5)
    assert item_violations(result, Thresholds(max_kl=1.0)) == [
        "test logprobs do not normalise at position 1 (logsumexp +0.5; tolerance 0.0001)"
    ]
    (problem,) = result.problems
    assert problem.fault == "test logprobs not normalised" and problem.positions == (1,)


@pytest.mark.parametrize(
    ("base", "test", "capabilities", "method", "message"),
    [
        (  # teacher-forced: the empty side still scores the baseline's 3 tokens; counted
            # without the EOS each side stopped on (as for the empty side: 2 tokens, not 3)
            generation("46", [1, 2, 0]),
            generation("", [0]),
            Capabilities.token_level(0, chat_template=False),
            "teacher-forced",
            "the test (q4@local) generated no tokens while the baseline (bf16@local) generated 2",
        ),
        (  # text only: counted in characters
            generation("46", None),
            generation("", None),
            Capabilities(),
            "text",
            "the test (q4@local) generated no characters while the baseline (bf16@local) "
            "generated 2",
        ),
        (  # top-k, the baseline empty: no position to compare, KL over nothing
            generation("", [0], top_logprobs=[{0: 0.0}]),
            generation("46", [1, 2, 0], top_logprobs=[{1: 0.0}, {2: 0.0}, {0: 0.0}]),
            Capabilities(top_k_logprobs=1, token_ids=True),
            "top-k-lower-bound",
            "the baseline (bf16@local) generated no tokens while the test (q4@local) generated 2",
        ),
    ],
)
def test_an_empty_generation_against_tokens_fails_whatever_the_method(
    base: object, test: object, capabilities: Capabilities, method: str, message: str
) -> None:
    result = compare(
        FakeBackend("bf16", base, capabilities=capabilities),  # type: ignore[arg-type]
        FakeBackend("q4", test, capabilities=capabilities),  # type: ignore[arg-type]
    )
    assert result.method == method
    assert f"empty generation: {message}" in item_violations(result, NEVER)


def test_two_empty_generations_agree() -> None:
    result = compare(
        FakeBackend("bf16", generation("", [0])), FakeBackend("q4", generation("", [0]))
    )
    assert item_violations(result, NEVER) == []


@pytest.mark.parametrize(
    ("base", "test", "expected"),
    [
        (
            ("46", [1, 2, 0], "stop"),
            ("", [0], "stop"),
            "the test (t) generated no tokens while the baseline (b) generated 2",
        ),
        (
            ("", None, "stop"),
            ("46", None, "stop"),
            "the baseline (b) generated no characters while the test (t) generated 2",
        ),
        (
            ("", [], "length"),
            ("4", [5], "length"),
            "the baseline (b) generated no tokens while the test (t) generated 1",
        ),
        # tokens that decode to nothing are tokens: not empty, even against a side without
        # ids (the comparison called this side empty, counting its 0 characters)
        (("", [9, 0], "stop"), ("x", None, "stop"), None),
        (("", [9], "length"), ("46", [1, 2, 0], "stop"), None),
        (("", [0], "stop"), ("", None, "stop"), None),  # two empty outputs agree
    ],
)
def test_a_comparison_judges_an_empty_generation_as_the_engine_checks_do(
    base: tuple[str, list[int] | None, str],
    test: tuple[str, list[int] | None, str],
    expected: str | None,
) -> None:
    """One rule (:func:`~pytest_infercheck.metrics.consistency.is_empty`): a comparison's
    ``empty generation`` problem is the fault an engine check finds in the same two outputs,
    the other side counted without the EOS it stopped on."""
    from pytest_infercheck.checks.comparison.verdicts import empty_output
    from pytest_infercheck.metrics.consistency import empty_fault

    record = dataclasses.replace(
        unchanged("a", [0.0]),
        baseline="b",
        test="t",
        base_text=base[0],
        base_ids=base[1],
        base_finish=base[2],
        test_text=test[0],
        test_ids=test[1],
        test_finish=test[2],
    )
    problem = empty_output(record)
    fault = empty_fault(base, test, a_name="the baseline (b)", b_name="the test (t)")
    if expected is None:
        assert problem is None and fault is None
    else:
        assert problem is not None and fault is not None
        assert problem.describe() == fault.text == f"empty generation: {expected}"


def test_a_nan_top_k_lower_bound_fails() -> None:
    """Top-k only (no teacher forcing): a NaN in the test side's top-k at position 0 gives a
    NaN lower bound there; both are named."""
    top = Capabilities(top_k_logprobs=2, token_ids=True)
    base_top = [{1: math.log(0.9), 2: math.log(0.05)}, {0: 0.0, 2: -30.0}]
    test_top = [{1: NAN, 2: math.log(0.05)}, {0: 0.0, 2: -30.0}]
    result = compare(
        FakeBackend("bf16", generation("1", [1, 0], top_logprobs=base_top), capabilities=top),
        FakeBackend("q4", generation("1", [1, 0], top_logprobs=test_top), capabilities=top),
    )
    assert result.method == "top-k-lower-bound"
    assert math.isnan(result.kl_per_position[0]) and result.kl_per_position[1] == 0.0
    assert item_violations(result, Thresholds(max_kl=1.0)) == [
        "non-finite test top-k logprobs at position 0 (NaN)",
        "non-finite KL at position 0 (NaN)",
        # the generation itself, as every check reads it (metrics.consistency)
        "non-finite top-k logprobs in the test output at position 0 (NaN)",
        "max_kl: mean KL (lower bound) is not finite (nan): fails",
    ]


def test_a_non_finite_similarity_fails() -> None:
    result = dataclasses.replace(unchanged("a", [0.0]), similarity=NAN)
    assert item_violations(result, Thresholds(min_similarity=0.5)) == [
        "non-finite similarity (NaN)",
        "min_similarity: text similarity is not finite (nan): fails",
    ]


def test_problems_round_trip_through_json() -> None:
    """A problem is stored as the one fault type; the shape earlier versions wrote (an object
    with a ``type``; an all -inf row's logsumexp -inf written null) reads back to the same
    faults, so a results file of the previous version still loads and judges alike."""
    problems = [
        non_finite("KL", (2, 5), ("nan",)),
        not_normalised("test logprobs", (0, 3), (0.5, -INF), 1e-4),
    ]
    record = dataclasses.replace(unchanged("a", [NAN, 0.0]), problems=problems)
    plain = plain_data(record)
    assert plain["problems"][1] == {
        "fault": "test logprobs not normalised",
        "where": "",
        "text": "test logprobs do not normalise at positions 0, 3 "
        "(logsumexp +0.5, -inf; tolerance 0.0001)",
        "positions": [0, 3],
        "unit": "position",
    }
    back = load_record(PromptComparison, json.loads(json.dumps(plain)))
    assert back.problems == problems
    old = {
        **plain,
        "problems": [
            {"type": "non-finite", "what": "KL", "positions": [2, 5], "kinds": ["nan"]},
            {
                "type": "not-normalised",
                "what": "test logprobs",
                "positions": [0, 3],
                "logsumexp": [0.5, None],
                "tol": 1e-4,
                "unit": "position",
            },
        ],
    }
    assert load_record(PromptComparison, old).problems == problems
    assert item_violations(back, NEVER) == [
        "non-finite KL at positions 2, 5 (NaN)",  # the scoring's, kept: not named twice
        "test logprobs do not normalise at positions 0, 3 (logsumexp +0.5, -inf; tolerance 0.0001)",
    ]


# -- the suite aggregate ------------------------------------------------------------------------
def test_a_nan_in_the_suite_fails_the_aggregate_naming_the_prompt() -> None:
    """Pooled KL (0.1, 0.2, NaN): the mean is NaN, so is the max (np.max), and the mean-KL
    gate is not skipped; with no gate at all the non-finite KL is a violation of its own."""
    results = [unchanged("a", [0.1]), unchanged("b", [0.2, NAN])]
    agg = aggregate(results, NEVER)
    assert math.isnan(agg.kl_mean) and math.isnan(agg.kl_max)
    assert agg.n_failed == 1
    assert agg.problems == ["non-finite KL in 1 of 2 prompts: b (position 1)"]
    assert aggregate_violations(agg, NEVER) == agg.problems
    gated = Thresholds.model_validate({"max_mean_kl": 1.0, "flips": {"fail_item_on": "never"}})
    assert aggregate_violations(agg, gated) == [
        "non-finite KL in 1 of 2 prompts: b (position 1)",
        "max_mean_kl: mean KL is not finite (nan): fails",
    ]


def test_the_aggregate_names_empty_generations_and_rows_that_do_not_normalise() -> None:
    empty = dataclasses.replace(unchanged("c", [0.0]), test_text="", test_ids=[2])
    shifted = dataclasses.replace(
        unchanged("d", [0.0]), problems=[not_normalised("test logprobs", (0,), (0.5,), 1e-4)]
    )
    agg = aggregate([unchanged("a", [0.0]), empty, shifted], NEVER)
    assert agg.n_failed == 2
    assert aggregate_violations(agg, NEVER) == [
        "empty generation in 1 of 3 prompts: c (the test (q4@local))",
        "test logprobs not normalised in 1 of 3 prompts: d (position 0)",
    ]


def test_the_aggregate_names_each_sides_generation_faults_as_the_engine_kinds_do() -> None:
    """A side's own generation faults (one fault type with the engine kinds') are grouped in
    the aggregate with the words the engine kinds use: by fault, naming the item and where
    in it. Before the one type, a comparison kept them as bare texts and its aggregate
    listed only the scoring's problems."""
    (nan,) = logprob_faults("the test output", [-0.5, NAN])
    faulty = dataclasses.replace(unchanged("e", [0.0]), faults=[nan])
    agg = aggregate([unchanged("a", [0.0]), faulty], NEVER)
    assert agg.n_failed == 1
    assert aggregate_violations(agg, NEVER) == [
        "non-finite logprob in 1 of 2 prompts: e (the test output at position 1)"
    ]
    assert item_violations(faulty, NEVER) == [
        "non-finite logprob in the test output at position 1 (NaN)"
    ]


def test_a_text_only_suite_fails_a_mean_kl_gate_it_cannot_measure() -> None:
    """Issue 27: a text-only side has no mean KL; a written max_mean_kl used to be skipped
    (the suite passed whatever its outputs); now it fails, naming the gate and why. So does
    min_same_top, which a text comparison has no argmax for."""
    text_only = dataclasses.replace(unchanged("a", []), method="text")
    agg = aggregate([text_only], NEVER)
    assert agg.kl_n == 0 and math.isnan(agg.kl_mean)
    assert aggregate_violations(agg, Thresholds(max_mean_kl=0.01, min_same_top=0.9)) == [
        "max_mean_kl: not measured: method text, 1 of 1 prompts compared by text only: no KL "
        "over the suite",
        "min_same_top: not measured: method text: 1 of 1 prompts have no teacher-forced argmax",
    ]


# -- the degradation cliff ----------------------------------------------------------------------
SIXTY = [f"p{i:02d}" for i in range(60)]
Q8_FAILED = frozenset({"p11"})
Q4_FAILED = frozenset({"p01", "p02", "p03", "p12", "p13", "p14", "p25", "p38", "p40"})


def level(label: str, failed: frozenset[str], kl: float, se: float = 0.0) -> CliffLevel:
    return CliffLevel(label, failed, 60, kl, se, True)


def quickstart_levels() -> list[CliffLevel]:
    """The quickstart's shape: a self-check with KL exactly 0, q8 with 1 failed prompt of
    60 and a tiny mean KL, q4 with 9 failed prompts (the one q8 failure recovered) and a
    mean KL 54x q8's."""
    return [
        self_check_level([], 60),
        level("q8", Q8_FAILED, 0.00028, 0.0001),
        level("q4", Q4_FAILED, 0.0152, 0.0084),
    ]


def test_the_cliff_is_q4_not_q8() -> None:
    """self-check -> q8: b = 1, c = 0: p = min(1, 2 C(1,0) / 2^1) = 1, not significant.
    q8 -> q4: b = 9, c = 1: p = 2 (C(10,0) + C(10,1)) / 2^10 = 22/1024 = 0.021484375 < 0.05."""
    cliff, steps = degradation_cliff(quickstart_levels())
    assert cliff == "q4"
    first, q8, q4 = steps
    assert (first.level, first.n_failed, first.kl_mean, first.kl_se) == ("self-check", 0, 0.0, 0.0)
    assert (q8.newly_failed, q8.recovered, q8.p_value, q8.failures_rise) == (1, 0, 1.0, False)
    assert (q4.newly_failed, q4.recovered) == (9, 1)
    assert q4.p_value == 22 / 1024 and q4.failures_rise
    assert q4.failed == sorted(Q4_FAILED) and q4.kl_mean == 0.0152
    assert not q4.kl_crosses and q4.kl_within is None  # no max_mean_kl: KL not judged


def test_the_cliff_by_kl_crossing_the_suite_gate() -> None:
    """No failed item anywhere; max_mean_kl 0.005: q8 (0.00028) is within, q4 (0.0152) is
    not, so q4 crosses. A KL test against the self-check's exact 0 alone would name q8."""
    levels = [
        self_check_level([], 60),
        level("q8", frozenset(), 0.00028),
        level("q4", frozenset(), 0.0152),
    ]
    cliff, steps = degradation_cliff(levels, max_mean_kl=0.005)
    assert cliff == "q4"
    assert [s.kl_within for s in steps] == [True, True, False]
    assert [s.kl_crosses for s in steps] == [False, False, True]
    assert all(s.p_value == 1.0 for s in steps)


def test_no_cliff_is_none() -> None:
    levels = [self_check_level([], 60), level("q8", Q8_FAILED, 0.00028)]
    assert degradation_cliff(levels, max_mean_kl=0.005)[0] is None


@pytest.mark.parametrize(
    ("new", "alpha", "cliff"),
    [
        (5, 0.05, None),  # p = 2 / 2^5 = 0.0625 >= 0.05
        (6, 0.05, "q4"),  # p = 2 / 2^6 = 0.03125 < 0.05
        (5, 0.1, "q4"),  # 0.0625 < 0.1
    ],
)
def test_the_cliff_needs_significance_at_alpha(new: int, alpha: float, cliff: str | None) -> None:
    levels = [self_check_level([], 60), level("q4", frozenset(SIXTY[:new]), 0.0)]
    found, steps = degradation_cliff(levels, alpha=alpha)
    assert found == cliff and steps[1].p_value == 2 / 2**new


def test_fewer_failures_are_no_cliff_however_significant() -> None:
    """q8 -> q4: b = 0, c = 8: p = 2 / 2^8 = 0.0078, but failures fell."""
    levels = [
        self_check_level([], 60),
        level("q8", frozenset(SIXTY[:8]), 0.0),
        level("q4", frozenset(), 0.0),
    ]
    cliff, steps = degradation_cliff(levels, alpha=0.5)
    assert steps[2].p_value == 2 / 2**8 and not steps[2].failures_rise
    assert cliff == "q8"  # 8 against the self-check's none: p = 2 / 2^8 < 0.5


def test_a_nan_mean_kl_crosses_the_gate() -> None:
    levels = [
        self_check_level([], 60),
        level("q8", frozenset(), 0.001),
        level("q4", frozenset(), NAN),
    ]
    cliff, steps = degradation_cliff(levels, max_mean_kl=0.005)
    assert cliff == "q4" and steps[2].kl_within is False


def test_a_self_check_that_did_not_reproduce_is_the_first_level() -> None:
    """The self-check failed p00..p05 (6 prompts) and has no mean KL: q8 failing the same 6
    is b = c = 0 (p = 1), and its KL cannot cross from an unmeasured level."""
    same = frozenset(SIXTY[:6])
    levels = [self_check_level(same, 60), level("q8", same, 0.1)]
    cliff, steps = degradation_cliff(levels, max_mean_kl=0.005)
    assert cliff is None
    assert steps[0].failed == sorted(same) and math.isnan(steps[0].kl_mean)
    assert steps[0].kl_within is None and steps[1].kl_within is False
    assert (steps[1].newly_failed, steps[1].recovered, steps[1].p_value) == (0, 0, 1.0)


Run = tuple[list[float] | None, list[dict[int, float]] | None]
"""A run's chosen logprobs and top-k maps."""


def _reproduce(first: Run, second: Run) -> str | None:
    """The sweep self-check (:func:`~pytest_infercheck.checks.comparison.judge.reproduce`)
    of a baseline whose two runs agree on their tokens and carry the logprobs of ``first``
    and ``second``."""
    from pytest_infercheck.checks.comparison.judge import reproduce

    return reproduce(
        generation("46", [1, 2, 0], chosen_logprobs=first[0], top_logprobs=first[1]),
        generation("46", [1, 2, 0], chosen_logprobs=second[0], top_logprobs=second[1]),
    )


TOP = [{1: -0.5}, {2: -0.25}, {0: -1.0}]
UNREPORTED = [{1: -0.5}, {}, {0: -1.0}]
"""llama-server's maps when token 1 ends inside a UTF-8 character: no entry, so its chosen
logprob is NaN with an empty map (not reported, :func:`~pytest_infercheck.metrics.consistency.
reported_logprobs`)."""


@pytest.mark.parametrize(
    ("first", "second", "drift"),
    [
        ([-0.5, -0.25, -1.0], [-0.5, -0.25, -1.0], None),
        ([-0.5, -0.25, -1.0], [-0.5, -0.75, -1.0], "0.5"),
        ([-INF, -0.25, -1.0], [-INF, -0.75, -1.0], "0.5"),  # equal -inf: no drift there
        ([-0.5, -0.25, -1.0], [-INF, -0.25, -1.0], "inf"),
        # fail closed: a NaN (in one run, or in both, even the same float object), runs of
        # different lengths, one run without logprobs are each a difference
        ([-0.5, NAN, -1.0], [-0.5, -0.25, -1.0], "nan"),
        ([-0.5, NAN, -1.0], [-0.5, NAN, -1.0], "nan"),
        ([-0.5, -0.25, -1.0], [-0.5, -0.25], "nan"),
        ([-0.5, -0.25, -1.0], None, "nan"),
        (None, [-0.5, -0.25, -1.0], "nan"),
        (None, None, None),
    ],
)
def test_the_sweep_self_check_names_the_logprob_drift_of_two_runs_of_the_same_tokens(
    first: list[float] | None, second: list[float] | None, drift: str | None
) -> None:
    expected = None if drift is None else f"same tokens, logprobs drift by {drift}"
    assert _reproduce((first, None), (second, None)) == expected


def test_the_sweep_self_check_leaves_out_positions_neither_run_reported() -> None:
    """Position 1 unreported in both runs: reproduced, or the drift of the others; reported
    in one run only, or NaN beside a non-empty map (a NaN value): a difference."""
    unreported = [-0.5, NAN, -1.0]
    assert _reproduce((unreported, UNREPORTED), (unreported, UNREPORTED)) is None
    drifted = ([-0.5, NAN, -1.5], UNREPORTED)
    assert _reproduce((unreported, UNREPORTED), drifted) == "same tokens, logprobs drift by 0.5"
    reported = ([-0.5, -0.25, -1.0], TOP)
    assert _reproduce((unreported, UNREPORTED), reported) == "same tokens, logprobs drift by nan"
    assert _reproduce((unreported, TOP), (unreported, TOP)) == "same tokens, logprobs drift by nan"


# -- what the reports show ------------------------------------------------------------------------
def _detail(kind: str, role: str, data: dict[str, object]) -> Node:
    return parse(
        item_detail(
            {
                "check": f"{kind}(bf16)",
                "kind": kind,
                "suite": "addition",
                "role": role,
                "name": role,
                "thresholds": {},
                "violations": [],
                "data": data,
            }
        )
    )


def test_the_html_views_show_nan_and_the_problems() -> None:
    result = unchanged("a", [0.0, NAN])
    root = _detail("compare", "prompt", plain_data(result))
    facts = root.all("table")[0]
    assert [c.text() for c in facts.all("td")][4:6] == ["NaN", "NaN"]  # KL mean, KL max
    assert root.one("ul").text() == "non-finite KL at position 1 (NaN)"
    agg = aggregate([result, unchanged("b", [0.1])], NEVER)
    record = ComparisonAggregateRecord("compare", "addition", [agg], {})
    view = _detail("compare", "aggregate", plain_data(record))
    assert view.one("ul").text() == ("q4@local: non-finite KL in 1 of 2 prompts: a (position 1)")


def test_the_cliffs_evidence_in_the_text_terminal_and_html() -> None:
    levels = quickstart_levels()
    cliff, steps = degradation_cliff(levels, max_mean_kl=0.005)
    assert cliff == "q4"
    assert cliff_evidence(cliff, steps, 0.05) == (
        "q4: failed items 1 -> 9 of 60 (9 newly failed, 1 recovered; exact McNemar p = "
        "0.0215 < alpha 0.05); mean KL 0.00028 ± 0.0001 -> 0.0152 ± 0.0084 crosses "
        "max_mean_kl"
    )
    assert cliff_table(cliff, steps, 0.05) == [
        "cliff evidence (alpha 0.05):",
        "  self-check: 0/60 failed; mean KL 0 ± 0, within max_mean_kl",
        "  q8: 1/60 failed, vs previous +1 -0 (McNemar p = 1); mean KL 0.00028 ± 0.0001, "
        "within max_mean_kl",
        "  q4: 9/60 failed, vs previous +9 -1 (McNemar p = 0.0215); mean KL 0.0152 ± 0.0084, "
        "above max_mean_kl  <- cliff",
    ]
    record = SweepAggregateRecord("sweep", "addition", [], {}, cliff, 0.05, steps)
    node = "m.yaml::sweep(bf16)::addition::aggregate"
    assert cliff_lines([(node, False, plain_data(record))]) == [
        f"sweep(bf16) addition: degradation cliff: {cliff_evidence(cliff, steps, 0.05)}"
    ]
    view = _detail("sweep", "aggregate", plain_data(record))
    evidence = view.all("table")[-1]
    rows = [[c.text() for c in row.all("td")] for row in evidence.all("tr")[1:]]
    assert rows == [
        ["self-check", "0/60", "-", "-", "0 ± 0", "yes", ""],
        ["q8", "1/60", "+1 / -0", "1", "0.00028 ± 0.0001", "yes", ""],
        ["q4", "9/60", "+9 / -1", "0.0215", "0.0152 ± 0.0084", "no", "cliff"],
    ]
    assert "McNemar p (alpha 0.05)" in evidence.text()


# -- a test side that reports only its top-k (llama-server at a large vocabulary) -----------------
def test_a_top_k_test_side_is_bounded_against_the_baselines_full_rows() -> None:
    """The test side cannot score teacher-forced but generated the baseline's tokens with
    top-2 maps: each position's KL is the lower bound from the baseline's full row restricted
    to the test's top-2 ids. Baseline p = (1/2, 1/6, 1/6, 1/6), test top-2 {0: 1/4, 1: 1/4}:
    S = {0, 1}, tails P = 1 - 1/2 - 1/6 = 1/3, Q = 1/2, so
    KL_S = 1/2 ln 2 + 1/6 ln(2/3) + 1/3 ln(2/3) = 0.346574 - 0.067578 - 0.135155 = 0.143841.
    Each tail is read as known only to D = 1e-3 (a float32 row's mass within 1e-3 of 1: the
    bound stays one for rounded rows): P >= 1/3 - D, Q <= 1/2 + D, and Q / e lies below P's
    range: 1/2 ln 2 + 1/6 ln(2/3) + (1/3 - D) ln((1/3 - D) / (1/2 + D)) = 0.142584."""
    quarter = math.log(0.25)
    top = {0: quarter, 1: quarter}
    test_caps = Capabilities(top_k_logprobs=2, token_ids=True)
    base = FakeBackend("bf16", generation("46", [1, 2, 0]), rows_of(SKEWED))
    test = FakeBackend(
        "q4",
        generation("46", [1, 2, 0], chosen_logprobs=[quarter] * 3, top_logprobs=[top] * 3),
        capabilities=test_caps,
    )
    result = compare(base, test)
    assert base.scored == [(PROMPT_IDS, (1, 2, 0))] and test.scored == []
    assert result.method == "top-k-lower-bound"
    exact = 0.5 * math.log(2) + (1 / 6) * math.log(2 / 3) + (1 / 3) * math.log(2 / 3)
    assert round(exact, 6) == 0.143841
    x, y = 1 / 3 - 1e-3, 1 / 2 + 1e-3
    by_hand = 0.5 * math.log(2) + (1 / 6) * math.log(2 / 3) + x * math.log(x / y)
    assert round(by_hand, 6) == 0.142584
    assert result.kl_per_position == pytest.approx([by_hand] * 3, rel=1e-7)  # float32 rows
    assert not result.problems


def test_a_top_k_test_side_with_a_nan_fails_closed() -> None:
    """A NaN in the test side's top-k is named, and the item fails."""
    quarter = math.log(0.25)
    bad = {0: math.nan, 1: quarter}
    test = FakeBackend(
        "q4",
        generation(
            "46", [1, 2, 0], chosen_logprobs=[quarter] * 3, top_logprobs=[{0: quarter}, bad, bad]
        ),
        capabilities=Capabilities(top_k_logprobs=2, token_ids=True),
    )
    result = compare(FakeBackend("bf16", generation("46", [1, 2, 0]), rows_of(SKEWED)), test)
    assert result.method == "top-k-lower-bound"
    assert any("non-finite" in line for line in item_violations(result, Thresholds()))
