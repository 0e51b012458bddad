"""determinism's judge facet called directly on hand-made runs (found by the mutation run,
tests/unit/MUTATION.md): the rule each finding names (a waiver reads it), what a judged
near-tie leaves in the record (each non-modal output's judgement, the labels counted) and
the item's degenerate scan; and the aggregate of judged prompts."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_infercheck.checks.determinism.evidence import DeterminismEvidence
from pytest_infercheck.checks.determinism.judge import judge
from pytest_infercheck.checks.determinism.records import DeterminismContext
from pytest_infercheck.checks.determinism.summarize import summarize, summary_of
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.metrics.degenerate import DegenerateScan
from pytest_infercheck.metrics.determinism import run_output, summarize_runs
from pytest_infercheck.verdict.gate import Violation
from pytest_infercheck.verdict.measure import Reading, Unmeasured
from tests.unit.engine_verdicts import rescored, thresholds
from tests.unit.test_past_tie import MODAL, NEAR

PLAN = ItemPlan("p", "prompt", "p")
DISTINCT = "2 distinct outputs in 3 runs (modal share 0.6667)"
DECISIVE_AFTER = (
    "output #2 against the modal output: after the near-tie at token 2, output #2 disagrees "
    "decisively with its engine at token 3: its token is 1.5 nats below the engine's own "
    "choice there (teacher-forced; tie_margin 0.01)"
)
# The modal output with a logprob above 0 at token 0 (a fault of runs 0 and 2).
FAULTY = dataclasses.replace(
    MODAL,
    chosen_logprobs=[0.5, -0.2, -0.692, -0.1],
    top_logprobs=[{1: 0.5}, {2: -0.2}, {3: -0.692, 4: -0.694}, {5: -0.1}],
)


def test_a_judged_near_tie_keeps_each_outputs_judgement_and_every_finding() -> None:
    """Runs 0 and 2 give the modal output (with a fault each), run 1 parts from it at a
    near-tie at token 2 and, teacher-forced, is 1.5 nats off its engine's choice at token 3."""
    s = summarize_runs([run_output(FAULTY, 0), run_output(NEAR, 1), run_output(FAULTY, 2)])
    scores = {0: rescored([1, 2, 3, 5]), 1: rescored([1, 2, 4, 6], [0, 0, 0, 1.5])}
    judged = judge(
        PLAN,
        DeterminismEvidence("p", "m@x", s, [], scores),
        thresholds("determinism", fail_on="decisive"),
    )
    assert judged.violations == [
        Violation("logprob above 0 in run 0 at position 0 (position 0: 0.5)", "fault"),
        Violation("logprob above 0 in run 2 at position 0 (position 0: 0.5)", "fault"),
        Violation(DECISIVE_AFTER, "decisive-after-tie"),
        Violation(DISTINCT, "near-tie"),
    ]
    modal, near = judged.record.outputs
    assert modal.after_tie is None
    assert near.after_tie is not None
    assert (near.after_tie.decisive_at, near.after_tie.margin, near.after_tie.token) == (
        3,
        1.5,
        6,
    )
    assert judged.record.divergence_labels == {"near-tie": 1, "decisive": 0, "unknown": 0}
    assert judged.degenerate == DegenerateScan(3, [])


def test_without_fail_on_decisive_distinct_outputs_just_differ() -> None:
    s = summarize_runs([run_output(MODAL, 0), run_output(NEAR, 1), run_output(MODAL, 2)])
    judged = judge(PLAN, DeterminismEvidence("p", "m@x", s, []), thresholds("determinism"))
    assert judged.violations == [Violation(DISTINCT, "outputs-differ")]
    assert judged.waivers == []
    assert [o.after_tie for o in judged.record.outputs] == [None, None]


def test_identical_runs_count_no_labels() -> None:
    s = summarize_runs([run_output(MODAL, 0), run_output(MODAL, 1)])
    judged = judge(PLAN, DeterminismEvidence("p", "m@x", s, []), thresholds("determinism"))
    assert judged.violations == [] and judged.record.divergence_labels == {}
    assert judged.degenerate == DegenerateScan(2, [])


# -- the aggregate of judged prompts ---------------------------------------------------------
def test_the_aggregate_scores_the_prompts_and_names_its_measures_by_hand() -> None:
    """p1: 2 of 3 runs modal (a near-tie), p2: 3 of 3. Score (2/3 + 1) / 2 = 0.8333; the
    Wilson 95% interval of 5/6: centre (5/6 + z^2/12) / (1 + z^2/6) = 0.7032, half
    z / (1 + z^2/6) * sqrt(5/6 * 1/6 / 6 + z^2/144) = 0.2667: 0.4365-0.9699."""
    t = thresholds("determinism")
    near = summarize_runs([run_output(MODAL, 0), run_output(NEAR, 1), run_output(MODAL, 2)])
    same = summarize_runs([run_output(MODAL, n) for n in range(3)])
    items = [
        RecordedItem(
            "prompt", "p1", judge(PLAN, DeterminismEvidence("p1", "m@x", near, []), t).record
        ),
        RecordedItem(
            "prompt", "p2", judge(PLAN, DeterminismEvidence("p2", "m@x", same, []), t).record
        ),
    ]
    summary = summarize(items, t, DeterminismContext("m@x", 3, {}))
    score = summary.measures["determinism_score"]
    assert isinstance(score, Reading) and score.value == pytest.approx(5 / 6)
    assert score.qualifier == "95% Wilson interval 0.4365-0.9699"
    assert summary.measures["error_rate"] == Reading(0.0, "0/6 runs failed")
    assert [name for name, _ in summary.properties] == [
        "infercheck_determinism_score",
        "infercheck_determinism_score_low",
        "infercheck_determinism_score_high",
        "infercheck_deterministic_prompts",
        "infercheck_errors",
        "infercheck_max_logprob_drift",
        "infercheck_divergences_near_tie",
        "infercheck_divergences_decisive",
        "infercheck_divergences_unknown",
    ]
    values = dict(summary.properties)
    assert values["infercheck_determinism_score_low"] == pytest.approx(0.4365, abs=1e-4)
    assert values["infercheck_determinism_score_high"] == pytest.approx(0.9699, abs=1e-4)
    assert (values["infercheck_deterministic_prompts"], values["infercheck_errors"]) == (1, 0)
    read = summary_of(items[0].record)
    assert (read.runs, read.modal_count, read.distinct) == (3, 2, 2)
    assert read.first_divergences == [None, 2, None]


def test_an_aggregate_of_nothing_leaves_its_measures_unmeasured() -> None:
    summary = summarize([], thresholds("determinism"), DeterminismContext("m@x", 3, {}))
    assert summary.measures == {
        "determinism_score": Unmeasured("no prompt was aggregated"),
        "error_rate": Unmeasured("no runs were recorded"),
    }
