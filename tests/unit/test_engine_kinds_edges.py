"""Edges of the engine kinds' pure facets (determinism, batch-invariance, stress) that their
verdict tests leave open, found by the mutation run (tests/unit/MUTATION.md): why a drift is
unmeasured, the near-tie waivers' texts and their threshold, the aggregates' texts, counts
and JUnit properties, and how many requests a stress level sends. Every expected value is
computed by hand from the inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_infercheck.checks.batch_invariance.records import (
    AloneOutput,
    BatchInvariancePrompt,
    Trial,
)
from pytest_infercheck.checks.batch_invariance.summarize import summarize as bi_summarize
from pytest_infercheck.checks.determinism.evidence import DeterminismEvidence
from pytest_infercheck.checks.determinism.judge import near_tie_waiver
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.stress.judge import consistency_waiver
from pytest_infercheck.checks.stress.measure import jobs_for
from pytest_infercheck.checks.stress.present import level_table
from pytest_infercheck.checks.stress.records import StressLevel
from pytest_infercheck.checks.stress.spec import StressSpec, StressThresholds, flip_rate_gates
from pytest_infercheck.checks.stress.summarize import summarize as stress_summarize
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.metrics.determinism import DeterminismSummary, DistinctOutput
from pytest_infercheck.metrics.past_tie import AfterTie
from pytest_infercheck.metrics.ties import TieDivergence
from pytest_infercheck.verdict.measure import Unmeasured
from tests.unit.factories import suite_prompt

CLEAN = AfterTie(True, "judged past")
NOT_SCORED = AfterTie(False, "not scored")
DECISIVE = AfterTie(True, "decisive at 4", decisive_at=4)


# -- determinism -----------------------------------------------------------------------------
def determinism(counts: list[int], no_logprobs: str | None = None) -> DeterminismEvidence:
    outputs = [DistinctOutput(f"o{n}", [n], c) for n, c in enumerate(counts)]
    summary = DeterminismSummary(sum(counts), 0, counts[0], len(counts), [], None, outputs)
    return DeterminismEvidence("p", "m@srv", summary, [], no_logprobs=no_logprobs)


def test_a_drift_over_two_identical_runs_without_logprobs_is_unmeasured_for_that() -> None:
    """Two runs with identical tokens (count 2) could show a drift: it is the missing
    logprobs that leave it unmeasured, said in the server's words where it gave them."""
    assert determinism([2, 1]).measures["logprob_drift"] == Unmeasured(
        "no logprobs: m@srv returned no logprobs with its runs"
    )
    said = determinism([2], no_logprobs="the server refused logprobs: HTTP 400")
    assert said.measures["logprob_drift"] == Unmeasured(
        "no logprobs: the server refused logprobs: HTTP 400"
    )
    # A reason that already says it is not said twice.
    twice = determinism([3], no_logprobs="no logprobs: backend 'x' has logprobs: false")
    assert twice.measures["logprob_drift"] == Unmeasured(
        "no logprobs: backend 'x' has logprobs: false"
    )


def test_a_drift_needs_two_runs_with_identical_tokens() -> None:
    assert determinism([1, 1, 1]).measures["logprob_drift"] == Unmeasured(
        "no two runs with identical tokens (3 distinct outputs of 3 successful runs)"
    )


def test_the_near_tie_waiver_applies_only_when_every_output_was_judged_past() -> None:
    judged = near_tie_waiver({1: CLEAN, 2: CLEAN})
    assert judged.rule == "fail_on: decisive"
    assert judged.covers == frozenset({"near-tie"})
    assert judged.judged_past is True
    assert judged.why == (
        "every non-modal output parts from the modal one at a near-tie and was judged past it "
        "by teacher forcing"
    )
    unjudged = near_tie_waiver({1: CLEAN, 2: NOT_SCORED, 3: DECISIVE})
    assert unjudged.judged_past is False
    assert unjudged.covers == frozenset({"near-tie"})
    assert unjudged.why == "output #3: not scored; output #4: decisive at 4"


# -- batch-invariance ------------------------------------------------------------------------
def trial(n: int, label: str | None = None) -> Trial:
    tie = None if label is None else TieDivergence(1, label, [0.1, 0.1], True, None)
    return Trial(n, 0, ["p", "q"], label is None, None, None, "x", tie=tie)


def bi_record(pid: str, *trials: Trial) -> BatchInvariancePrompt:
    return BatchInvariancePrompt(pid, "m@srv", 0, AloneOutput("x", None), list(trials), "burst")


def test_the_batch_invariance_aggregate_counts_passed_prompts_and_labels() -> None:
    items = [
        RecordedItem("prompt", "a", bi_record("a", trial(0), trial(1))),
        RecordedItem(
            "prompt",
            "b",
            bi_record("b", trial(0, "near-tie"), trial(1, "decisive")),
            None,
            violations=("differs",),
        ),
        RecordedItem("prompt", "c", None, "BackendError: down"),
        # A record of another role is not a prompt (a recording, say): not counted.
        RecordedItem("record", "d", bi_record("d", trial(0))),
    ]
    summary = bi_summarize(items, None, TargetContext("m@srv", {"m@srv": {"v": 1}}))  # type: ignore[arg-type]
    data = summary.record
    assert (data.prompts, data.invariant_prompts, data.trials) == (2, 1, 4)
    assert data.rate == 0.5
    assert data.batched_by == "burst"
    assert data.divergence_labels == {"near-tie": 1, "decisive": 1, "unknown": 0}
    assert summary.text == (
        "m@srv: 1/2 prompts batch-invariant over 4 trials (burst); divergences "
        "1 near-tie, 1 decisive"
    )
    assert summary.properties == [
        ("infercheck_invariant_prompts", 1),
        ("infercheck_batch_invariance_rate", 0.5),
        ("infercheck_trials", 4),
        ("infercheck_divergences_near_tie", 1),
        ("infercheck_divergences_decisive", 1),
        ("infercheck_divergences_unknown", 0),
    ]


def test_a_batch_invariance_aggregate_of_no_prompt_has_rate_zero() -> None:
    summary = bi_summarize([], None, TargetContext("m@srv", {}))  # type: ignore[arg-type]
    assert (summary.record.rate, summary.record.batched_by, summary.record.prompts) == (
        0.0,
        None,
        0,
    )
    assert summary.text.startswith("m@srv: 0/0 prompts batch-invariant over 0 trials (None)")


# -- stress ----------------------------------------------------------------------------------
def stress_level(level: int, requests: int, consistent: int, **kw: Any) -> StressLevel:
    fields: dict[str, Any] = {
        "target": "m@srv",
        "level": level,
        "requests": requests,
        "errors": {},
        "error_rate": 0.0,
        "consistent": consistent,
        "consistency": consistent / requests if requests else 1.0,
        "flips": 0,
        "flip_rate": 0.0,
        "latency_p50_s": 0.1,
        "latency_p95_s": 0.2,
        "tokens_per_s": None,
        "achieved_concurrency": None,
        "max_in_flight": level,
        "mismatches": [],
    }
    return StressLevel(**(fields | kw))


def stress_thresholds(**kw: object) -> StressThresholds:
    found = CheckSpec.model_validate({"stress": "m", **kw}).kind_thresholds()
    assert isinstance(found, StressThresholds)
    return found


def test_the_consistency_waiver_applies_at_exactly_the_limit() -> None:
    """3 consistent of 5 plus 1 judged near-tie: 4/5 = 0.8, which meets min_consistency 0.8."""
    waiver = consistency_waiver(
        stress_level(2, 5, 3), [CLEAN, NOT_SCORED], stress_thresholds(min_consistency=0.8)
    )
    assert waiver.judged_past is True
    assert waiver.covers == frozenset({"min_consistency"})
    assert waiver.why == (
        "1 outputs that leave their reference at a near-tie were judged past it by teacher "
        "forcing and count as consistent: 4/5 = 0.800 >= min_consistency 0.8"
    )
    short = consistency_waiver(
        stress_level(2, 5, 3), [NOT_SCORED, DECISIVE], stress_thresholds(min_consistency=0.8)
    )
    assert short.judged_past is False
    assert short.why == (
        "counting the 0 of 2 near-tie outputs judged past their near-tie, consistency 0.600 "
        "is still < min_consistency 0.8; 2 not: not scored"
    )


def test_a_level_of_no_request_counts_as_consistent() -> None:
    waiver = consistency_waiver(stress_level(2, 0, 0), [], stress_thresholds(min_consistency=1))
    assert waiver.judged_past is True
    assert waiver.why.endswith("0/0 = 1.000 >= min_consistency 1")


def test_a_level_sends_each_prompt_enough_times_to_fill_it() -> None:
    one = [suite_prompt("a", "1")]
    two = [suite_prompt("a", "1"), suite_prompt("b", "2")]
    # One prompt at c4: ceil(4 / 1) = 4 copies (more than 1 repeat).
    assert [p.id for p in jobs_for(one, 4, 1)] == ["a"] * 4
    # Two prompts at c3: ceil(3 / 2) = 2 copies each, side by side.
    assert [p.id for p in jobs_for(two, 3, 1)] == ["a", "a", "b", "b"]
    # Repeats win when larger.
    assert [p.id for p in jobs_for(two, 2, 3)] == ["a"] * 3 + ["b"] * 3
    assert jobs_for([], 4, 2) == []


@dataclass
class Suite:
    prompts: list[Any]


def test_the_flip_rate_gate_counts_the_smallest_levels_requests() -> None:
    check = CheckSpec.model_validate(
        {"stress": {"target": "m", "levels": [8, 4], "repeats": 1}, "flips": {"max_rate": 0.5}}
    )
    assert isinstance(check.spec, StressSpec)
    (gate,) = flip_rate_gates(check, Suite([suite_prompt("a", "1")]))  # type: ignore[arg-type]
    # c4 with one prompt: 4 copies, 4 requests.
    assert gate.n == 4
    assert gate.trials == "4 requests at c4 (1 prompts x 4)"
    assert gate.max_rate == 0.5
    assert gate.field == ("flips", "max_rate")


def test_a_point_estimate_flip_gate_needs_no_count() -> None:
    check = CheckSpec.model_validate(
        {"stress": {"target": "m", "levels": [4]}, "flips": {"max_rate": 0.5, "gate": "point"}}
    )
    assert flip_rate_gates(check, Suite([suite_prompt("a", "1")])) == []  # type: ignore[arg-type]
    unwritten = CheckSpec.model_validate({"stress": {"target": "m", "levels": [4]}})
    assert flip_rate_gates(unwritten, Suite([suite_prompt("a", "1")])) == []  # type: ignore[arg-type]


def test_the_stress_aggregate_lists_the_levels_in_order_with_their_verdicts() -> None:
    labelled = {"near-tie": 1, "decisive": 2, "unknown": 0}
    c1 = stress_level(1, 2, 2, measured_by="gw1")
    c4 = stress_level(4, 4, 2, measured_by="gw0", divergence_labels=labelled)
    items = [
        RecordedItem("level", "c4", c4, violations=("consistency 0.5 < min_consistency 1",)),
        RecordedItem("level", "c1", c1),
        RecordedItem("level", "c8", None, "BackendError: down"),
    ]
    summary = stress_summarize(items, stress_thresholds(), TargetContext("m@srv", {}))
    levels = summary.record.levels
    assert [d.level for d in levels] == [1, 4]
    assert levels[1].violations == ["consistency 0.5 < min_consistency 1"]
    assert summary.record.divergence_labels == labelled
    assert summary.text == "\n".join([*level_table(levels), "divergences 1 near-tie, 2 decisive"])
    assert summary.properties == [
        ("infercheck_levels_failed", 1),
        ("infercheck_measured_by", "gw0,gw1"),
        ("infercheck_divergences_near_tie", 1),
        ("infercheck_divergences_decisive", 2),
        ("infercheck_divergences_unknown", 0),
    ]


@pytest.mark.parametrize("requests", [1, 3])
def test_a_waiver_fails_below_the_limit(requests: int) -> None:
    """0 consistent of ``requests`` plus nothing judged: 0 < 0.5."""
    waiver = consistency_waiver(
        stress_level(2, requests, 0), [], stress_thresholds(min_consistency=0.5)
    )
    assert waiver.judged_past is False
