"""Determinism metrics against hand-computed values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.determinism.evidence import DeterminismEvidence
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.metrics.determinism import (
    DeterminismSummary,
    DistinctOutput,
    RunOutput,
    determinism_score,
    logprob_diff,
    output_key,
    summarize_runs,
)
from tests.unit.engine_verdicts import violations


def ids(*tokens: int, lp: tuple[float, ...] | None = None, text: str = "") -> RunOutput:
    return RunOutput(text or "".join(map(str, tokens)), tokens, lp)


def test_identical_runs_are_deterministic() -> None:
    s = summarize_runs([ids(1, 2, 3, lp=(-0.5, -0.25, 0.0))] * 4)
    assert (s.runs, s.errors, s.modal_count, s.distinct) == (4, 0, 4, 1)
    assert s.modal_share == 1.0 and s.deterministic
    assert s.first_divergences == [None] * 4
    assert s.max_logprob_drift == 0.0
    assert s.outputs == [DistinctOutput("123", [1, 2, 3], 4)]


def test_modal_share_divergences_and_output_order() -> None:
    a, b, c = ids(1, 2, 3), ids(1, 2, 4), ids(1, 2)
    # a x3, b x2, c x1 in mixed order: modal a, share 3/6; b diverges at 2, c at len 2.
    s = summarize_runs([b, a, c, a, b, a])
    assert s.modal_count == 3 and s.modal_share == 0.5 and s.distinct == 3
    assert not s.deterministic
    assert s.first_divergences == [2, None, 2, None, 2, None]
    assert [o.token_ids for o in s.outputs] == [[1, 2, 3], [1, 2, 4], [1, 2]]
    assert [o.count for o in s.outputs] == [3, 2, 1]


def test_tie_keeps_first_appearance() -> None:
    s = summarize_runs([ids(7), ids(8), ids(8), ids(7)])
    assert s.outputs[0].token_ids == [7] and s.modal_share == 0.5
    assert s.first_divergences == [None, 0, 0, None]


def test_errors_count_as_failed_runs() -> None:
    # 4 runs: 3 identical, 1 error -> share 3/4, not 3/3.
    s = summarize_runs([ids(5), None, ids(5), ids(5)])
    assert (s.runs, s.errors, s.modal_count, s.distinct) == (4, 1, 3, 1)
    assert s.modal_share == 0.75 and not s.deterministic
    assert s.first_divergences == [None, None, None, None]


def test_all_runs_errored() -> None:
    s = summarize_runs([None, None])
    assert (s.modal_share, s.distinct, s.errors, s.outputs) == (0.0, 0, 2, [])
    assert s.max_logprob_drift is None and not s.deterministic


def test_logprob_drift_among_identical_tokens_only() -> None:
    # Group [1,2]: position 0 spans -0.5..-0.5+1e-6, position 1 spans -0.1..-0.1+3e-6
    # -> drift 3e-6. Group [1,3] (different tokens, large logprob change) has one run: ignored.
    runs = [
        ids(1, 2, lp=(-0.5, -0.1)),
        ids(1, 2, lp=(-0.5 + 1e-6, -0.1 + 3e-6)),
        ids(1, 2, lp=(-0.5, -0.1 + 2e-6)),
        ids(1, 3, lp=(-0.5, -9.0)),
    ]
    assert summarize_runs(runs).max_logprob_drift == pytest.approx(3e-6, abs=1e-12)


def test_no_logprobs_no_drift() -> None:
    assert summarize_runs([ids(1), ids(1)]).max_logprob_drift is None
    assert summarize_runs([ids(1, lp=(-1.0,)), ids(2, lp=(-1.0,))]).max_logprob_drift is None


def test_text_only_outputs_compare_by_text() -> None:
    s = summarize_runs([RunOutput("46"), RunOutput("46"), RunOutput("47")])
    assert s.modal_count == 2 and s.distinct == 2
    assert s.first_divergences == [None, None, 1]
    assert s.outputs[1] == DistinctOutput("47", None, 1)
    assert output_key("46", None) == (None, "46")
    # Same ids, different text (a detokenization difference) are two outputs, not one.
    assert output_key("x", [1]) == ((1,), "x") != output_key("y", (1,))


def test_equal_ids_with_different_text_are_distinct_outputs() -> None:
    # Runs 0 and 2 carry the same ids as run 1 but another text: by ids alone all three were
    # one output; by the one sameness rule (ids and text) run 1 diverges at character 1.
    same_ids = [RunOutput("46", (55, 57)), RunOutput("4 6", (55, 57)), RunOutput("46", (55, 57))]
    s = summarize_runs(same_ids)
    assert (s.modal_count, s.distinct) == (2, 2)
    assert s.first_divergences == [None, 1, None]


def test_logprob_diff_stops_at_divergence() -> None:
    assert logprob_diff([-1.0, -2.0, -3.0], [-1.5, -2.0, -9.0], upto=2) == 0.5
    assert logprob_diff([-1.0, -2.0, -3.0], [-1.5, -2.0, -9.0], upto=None) == 6.0
    assert logprob_diff([-1.0], None, upto=None) is None
    assert logprob_diff([-1.0], [-2.0], upto=0) is None


def test_determinism_score_and_wilson_interval() -> None:
    # Two prompts x 10 runs: shares 1.0 and 0.8 -> score 0.9; pooled 18/20.
    # Wilson 95% (z = 1.959964): centre = (0.9 + z^2/40) / (1 + z^2/20) = 0.835550,
    # half = z / (1 + z^2/20) * sqrt(0.09/20 + z^2/1600) = 0.136584 -> (0.6990, 0.9721).
    perfect = summarize_runs([ids(1)] * 10)
    eight = summarize_runs([ids(1)] * 8 + [ids(2), None])
    score, low, high = determinism_score([perfect, eight])
    assert score == pytest.approx(0.9)
    assert low == pytest.approx(0.6990, abs=1e-4)
    assert high == pytest.approx(0.9721, abs=1e-4)
    assert determinism_score([]) == (0.0, 0.0, 1.0)
    assert determinism_score([perfect])[::2] == (1.0, 1.0)


def test_needle_compared_to_alone() -> None:
    from pytest_infercheck.backends import BackendError, Generation
    from pytest_infercheck.checks.batch_invariance import Trial
    from pytest_infercheck.checks.batch_invariance import compare_to_alone as compare

    def compare_to_alone(alone: Generation, batched: Generation | BaseException) -> Trial:
        return compare(alone, batched, trial=1, position=2, batch=["x", "y", "z"])

    def verdict(trial: Trial) -> dict[str, Any]:
        assert (trial.trial, trial.position, trial.batch) == (1, 2, ["x", "y", "z"])
        return {
            "match": trial.match,
            "first_divergence": trial.first_divergence,
            "divergence_unit": trial.divergence_unit,
            "max_logprob_diff": trial.max_logprob_diff,
            "text": trial.text,
        } | ({} if trial.error is None else {"error": trial.error})

    alone = Generation("46", [55, 57, 2], "stop", [-0.25, -0.5, -1.0])
    same = Generation("46", [55, 57, 2], "stop", [-0.25, -0.5 + 2e-7, -1.0])
    assert verdict(compare_to_alone(alone, same)) == {
        "match": True,
        "first_divergence": None,
        "divergence_unit": None,
        "max_logprob_diff": pytest.approx(2e-7),
        "text": "46",
    }
    # Diverges at token 1: only position 0 is compared (0.5 there; later ones condition on
    # different prefixes).
    other = Generation("47", [55, 58, 2], "stop", [-0.75, -3.0, -1.0])
    assert verdict(compare_to_alone(alone, other)) == {
        "match": False,
        "first_divergence": 1,
        "divergence_unit": "token",
        "max_logprob_diff": 0.5,
        "text": "47",
    }
    # Same ids, other text (detokenization): not a match, at character 1; every position
    # holds the same token, so all logprobs are compared (0.5 at position 0, 1.0 at 2).
    detok = Generation("4 6", [55, 57, 2], "stop", [-0.75, -0.5, -2.0])
    assert verdict(compare_to_alone(alone, detok)) == {
        "match": False,
        "first_divergence": 1,
        "divergence_unit": "char",
        "max_logprob_diff": 1.0,
        "text": "4 6",
    }
    # Text only (no ids, no logprobs): characters.
    text = compare_to_alone(Generation("46", None, "stop"), Generation("4", None, "stop"))
    assert (text.match, text.first_divergence, text.max_logprob_diff) == (False, 1, None)
    failed = verdict(compare_to_alone(alone, BackendError("HTTP 503")))
    assert failed["match"] is False and failed["error"] == "BackendError: HTTP 503"
    assert failed["text"] is None and failed["first_divergence"] is None


@pytest.mark.parametrize(
    ("batched_ids", "at"),
    [
        pytest.param([55, 57], 2, id="batched-output-lacks-its-eos-id"),
        pytest.param([60, 2], 0, id="same-text-tokenized-otherwise"),
    ],
)
def test_a_needle_with_the_same_text_but_other_token_ids_is_not_invariant(
    batched_ids: list[int], at: int
) -> None:
    """The batched output's text equals the alone one's, its token ids do not (an engine that
    drops the EOS id in a batch, or emits "46" as one token where it emitted "4", "6" alone):
    the trial is no match, a violation at the first differing token, however near the
    logprobs of the shared positions are."""
    from pytest_infercheck.checks.batch_invariance import (
        AloneOutput,
        BatchInvariancePrompt,
        compare_to_alone,
    )
    from pytest_infercheck.checks.batch_invariance.evidence import BatchInvarianceEvidence

    alone = Generation("46", [55, 57, 2], "stop", [-0.25, -0.5, -1.0])
    batched = Generation("46", batched_ids, "stop", [-0.25, -0.5, -1.0][: len(batched_ids)])
    trial = compare_to_alone(alone, batched, trial=0, position=1, batch=["x", "needle"])
    assert (trial.match, trial.first_divergence, trial.divergence_unit) == (False, at, "token")
    record = BatchInvariancePrompt(
        "needle", "q4@local", 0, AloneOutput("46", [55, 57, 2]), [trial], "burst"
    )
    spec = CheckSpec.model_validate({"batch-invariance": "m"}).kind_thresholds()
    assert violations("batch-invariance", BatchInvarianceEvidence(record), spec) == [
        f"trial 0 (position 1 of 2): output differs from the prompt alone at {at}: "
        "'46' alone vs '46' batched"
    ]


# -- failing closed --------------------------------------------------------------------------
NAN, INF = math.nan, math.inf


def test_a_nan_logprob_is_never_hidden_by_max() -> None:
    # Column 1 holds -0.1 and NaN. Python's max keeps its first argument against a later
    # NaN, so max(-0.1, nan) - min(-0.1, nan) was 0.0 and the drift passed any limit.
    runs = [ids(1, 2, lp=(-0.5, -0.1)), ids(1, 2, lp=(-0.5, NAN)), ids(1, 2, lp=(-0.5, -0.1))]
    drift = summarize_runs(runs).max_logprob_drift
    assert drift is not None and math.isnan(drift)
    # and between groups: a first group with drift 0 must not hide a NaN in the second
    runs = [ids(1, lp=(-0.5,)), ids(1, lp=(-0.5,)), ids(2, lp=(NAN,)), ids(2, lp=(-0.1,))]
    drift = summarize_runs(runs).max_logprob_drift
    assert drift is not None and math.isnan(drift)


def test_equal_minus_inf_logprobs_do_not_drift_and_minus_inf_against_a_value_does() -> None:
    # -inf - -inf is NaN in floating point; equal values spread by exactly 0.
    same = summarize_runs([ids(1, 2, lp=(-INF, -0.5))] * 3)
    assert same.max_logprob_drift == 0.0
    apart = summarize_runs([ids(1, lp=(-INF,)), ids(1, lp=(-2.0,))])
    assert apart.max_logprob_drift == INF
    from pytest_infercheck.metrics.determinism import spread

    assert spread([-INF, -INF]) == 0.0 and spread([-1.0, -0.25]) == 0.75
    assert math.isnan(spread([-1.0, NAN]))


def test_unreported_positions_are_left_out_of_the_drift() -> None:
    # Position 1 was not reported by run 1 (None): only position 0 (spread 2e-6) counts.
    runs = [
        RunOutput("46", (55, 57), (-0.5, -0.1)),
        RunOutput("46", (55, 57), (-0.5 + 2e-6, None)),
    ]
    assert summarize_runs(runs).max_logprob_drift == pytest.approx(2e-6, abs=1e-12)
    # Three runs, run 1 silent at position 1: runs 0 and 2 still disagree there by 0.25; a
    # position no run reported is compared nowhere.
    runs = [
        RunOutput("46", (55, 57, 2), (-0.5, -0.5, None)),
        RunOutput("46", (55, 57, 2), (-0.5, None, None)),
        RunOutput("46", (55, 57, 2), (-0.5, -0.25, None)),
    ]
    assert summarize_runs(runs).max_logprob_drift == 0.25


def test_logprob_diff_fails_closed() -> None:
    # |diffs| 0.1, NaN, 0: the old max() kept 0.1.
    diff = logprob_diff([-1.0, -2.0, -3.0], [-1.1, NAN, -3.0], upto=None)
    assert diff is not None and math.isnan(diff)
    assert logprob_diff([-INF, -1.0], [-INF, -1.5], upto=None) == 0.5
    assert logprob_diff([-INF], [-3.0], upto=None) == INF
    assert logprob_diff([-1.0, None], [-1.25, -9.0], upto=None) == 0.25  # None: unreported
    assert logprob_diff([None], [-1.0], upto=None) is None


def test_a_run_carries_its_own_faults_into_the_summary() -> None:
    from pytest_infercheck.metrics.determinism import run_output

    ok = Generation("46", [55, 57, 2], "stop", [-0.5, -0.25, -0.1])
    bad = Generation("46", [55, 57, 2], "stop", [-0.5, NAN, INF])
    s = summarize_runs([run_output(ok, 0), run_output(bad, 1), run_output(ok, 2)])
    assert [f.text for f in s.faults] == [
        "non-finite logprob in run 1 at positions 1, 2 (NaN, +inf)"
    ]
    assert s.distinct == 1 and s.deterministic  # identical tokens: the fault is its own
    # an unreported position (NaN with an empty top-k map) is no fault and no drift
    gap = Generation("46", [55, 57], "length", [-0.5, NAN], [{55: -0.5}, {}])
    full = Generation("46", [55, 57], "length", [-0.5, -0.25], [{55: -0.5}, {57: -0.25}])
    s = summarize_runs([run_output(gap, 0), run_output(full, 1)])
    assert s.faults == [] and s.max_logprob_drift == 0.0


def test_an_empty_run_among_non_empty_ones_is_named() -> None:
    full = RunOutput("46", (55, 57, 2), finish_reason="stop")
    empty = RunOutput("", (2,), finish_reason="stop")
    s = summarize_runs([full, empty, full, empty])
    assert [f.text for f in s.faults] == [
        "empty generation: runs 1, 3 generated no tokens while run 0 generated 2"
    ]
    assert s.distinct == 2
    assert summarize_runs([empty, empty]).faults == []  # all empty: they agree


def check(**thresholds: object) -> CheckSpec:
    return CheckSpec.model_validate({"determinism": "m", **thresholds})


def item_violations(summary: DeterminismSummary, entry: CheckSpec) -> list[str]:
    """The prompt's violations, as the framework judges its evidence."""
    evidence = DeterminismEvidence("p", "m@local", summary, [])
    return violations("determinism", evidence, entry.kind_thresholds())


def test_item_violations_name_the_faults_and_a_nan_drift_fails_the_limit() -> None:
    runs = [ids(1, 2, lp=(-0.5, -0.1)), ids(1, 2, lp=(-0.5, NAN))]
    summary = summarize_runs(runs)
    assert item_violations(summary, check(max_logprob_drift=1e-6)) == [
        "max_logprob_drift: logprob drift among runs with identical tokens is not finite "
        "(nan): fails"
    ]
    from pytest_infercheck.metrics.determinism import run_output

    summary.faults = [*summarize_runs([run_output(Generation("x", [1], "stop", [NAN]), 3)]).faults]
    assert item_violations(summary, check()) == ["non-finite logprob in run 3 at position 0 (NaN)"]
    apart = summarize_runs([ids(1, lp=(-INF,)), ids(1, lp=(-2.0,))])
    assert item_violations(apart, check(max_logprob_drift=1.0)) == [
        "max_logprob_drift: logprob drift among runs with identical tokens is not finite "
        "(inf): fails"
    ]
