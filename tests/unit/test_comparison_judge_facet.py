"""The comparison's judge facet called as the framework calls it (``judge(plan, evidence,
thresholds)``), on evidence gathered from fake engines or made by hand, which the mutation
run found no unit test doing (tests/unit/MUTATION.md): a prompt item's record, findings,
waivers and degenerate scan; a conversation's turns (the final one added, the faults and
scans of every turn); a sweep's self-check; a golden recording; and the rule each finding
names. Every expected value is worked out by hand."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from pytest_infercheck.backends import Generation, GenerationParams
from pytest_infercheck.backends.base import Capabilities
from pytest_infercheck.checks.comparison.evidence import (
    PromptEvidence,
    RecordingEvidence,
    Reproduced,
    SelfCheckEvidence,
    TurnEvidence,
)
from pytest_infercheck.checks.comparison.gather_prompt import gather_prompt
from pytest_infercheck.checks.comparison.judge import (
    DECISIVE,
    SELF_CHECK_FAILED,
    judge,
    own_violations,
    waivers,
)
from pytest_infercheck.checks.comparison.prompt import Disagreement, SelfCheckRecord
from pytest_infercheck.checks.comparison.spec import WAIVABLE, DiffThresholds, Thresholds
from pytest_infercheck.checks.comparison.turns import TurnComparison
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.features import FeatureRecord
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.metrics.degenerate import DegenerateScan
from pytest_infercheck.metrics.faults import empty_generation_fault
from pytest_infercheck.metrics.ties import Margin
from pytest_infercheck.specs import FlipThresholds
from pytest_infercheck.tools import ToolCall
from pytest_infercheck.verdict.gate import Violation
from pytest_infercheck.verdict.waiver import Waiver

from .comparison_fakes import SKEWED, UNIFORM, FakeBackend, generation, rows_of
from .factories import prompt_comparison, suite_prompt

PLAN = ItemPlan("p1", "prompt", "p1")


def gathered(base: Generation, test: Generation, **kw: Any) -> PromptEvidence:
    """One prompt's evidence of two fake engines generating ``base`` and ``test`` (scored
    uniform by both, teacher-forced)."""
    cache = GenerationCache()
    try:
        evidence = gather_prompt(
            cache,
            ResolvedTarget("bf16@local", ("bf16",), FakeBackend("bf16", base)),
            ResolvedTarget("q4@local", ("q4",), FakeBackend("q4", test)),
            suite_prompt("p1", "12+34="),
            GenerationParams(max_tokens=8),
        )
    finally:
        cache.close()
    return dataclasses.replace(evidence, **kw)


FORTY_SIX = generation("46", [1, 2, 3])
FORTY_SEVEN = generation("47", [1, 0, 3])


# -- a prompt item ---------------------------------------------------------------------------
def test_a_prompt_item_is_judged_into_its_record_findings_waivers_and_scan() -> None:
    judged = judge(PLAN, gathered(FORTY_SIX, FORTY_SEVEN), Thresholds())
    record = judged.record
    assert (record.prompt_id, record.baseline, record.test) == ("p1", "bf16@local", "q4@local")
    assert (record.base_text, record.test_text, record.first_divergence) == ("46", "47", 1)
    assert judged.violations == [] and judged.waivers == []
    # Both outputs scanned, nothing degenerate; the item's scan is its record's.
    assert judged.degenerate == DegenerateScan(2, []) == record.degenerate
    assert (judged.role, judged.text, judged.golden_entries, judged.gated) == (
        None,
        None,
        None,
        True,
    )
    assert record.turns == [] and record.first_divergent_turn is None


def test_a_conversation_adds_its_final_turn_and_every_turns_faults_and_scans() -> None:
    """Turn 0 given, turn 1 generated (the test side's output empty against the baseline's
    "hi": a fault), the final answer turn 2 (46 against 47, from token 1)."""
    base = gathered(FORTY_SIX, FORTY_SEVEN)
    turns = [
        TurnEvidence(0, "user", "given", "add these"),
        TurnEvidence(
            1,
            "assistant",
            "generated",
            inputs=base.inputs,
            base=generation("hi", [2, 3]),
            other=generation("", [3]),
        ),
    ]
    judged = judge(PLAN, dataclasses.replace(base, turns=turns), Thresholds())
    record = judged.record
    given, generated, final = record.turns
    assert given == TurnComparison(0, "user", "given", "add these")
    assert (generated.index, generated.kind, generated.same) == (1, "generated", False)
    assert final == TurnComparison(
        2, "assistant", "final", "46", "47", False, record.sameness, 1, "token"
    )
    assert record.first_divergent_turn == 1
    (fault,) = record.faults
    assert "the test output of turn 1" in fault.text
    assert "the baseline output of turn 1" in fault.text
    # Two outputs of turn 1 and two of the final turn scanned.
    assert record.degenerate == DegenerateScan(4, []) == judged.degenerate
    assert judged.violations == [Violation(fault.text, "fault")]


def test_a_final_turn_whose_outputs_agree_has_no_divergence_unit() -> None:
    base = gathered(FORTY_SIX, FORTY_SIX)
    turns = [TurnEvidence(0, "user", "given", "add these")]
    record = judge(PLAN, dataclasses.replace(base, turns=turns), Thresholds()).record
    assert record.turns[-1] == TurnComparison(
        1, "assistant", "final", "46", "46", True, "identical", None, None
    )
    assert record.first_divergent_turn is None and record.faults == []


# -- a sweep's self-check and a golden recording ---------------------------------------------
def test_a_self_check_names_the_prompts_whose_baseline_did_not_reproduce() -> None:
    evidence = SelfCheckEvidence(
        [Reproduced("a", FORTY_SIX, FORTY_SIX), Reproduced("b", FORTY_SIX, FORTY_SEVEN)],
        "batched, then one at a time",
    )
    judged = judge(PLAN, evidence, Thresholds())
    record = judged.record
    assert isinstance(record, SelfCheckRecord)
    assert record.failed == ["b"] and record.generated == "batched, then one at a time"
    (problem,) = record.problems
    assert problem.startswith("b: ") and "token 1" in problem
    assert judged.violations == [Violation(problem, "self-check")]
    assert (judged.text, judged.gated, judged.waivers) == (SELF_CHECK_FAILED, False, [])
    clean = judge(PLAN, SelfCheckEvidence([Reproduced("a", FORTY_SIX, FORTY_SIX)], ""), None)
    assert clean.record == SelfCheckRecord([], [], "") and clean.violations == []


def test_a_golden_recording_is_a_record_item_with_its_entries_and_no_gates() -> None:
    recording: Any = object()
    judged = judge(PLAN, RecordingEvidence(recording, [{"id": "p1"}]), Thresholds())
    assert judged.record is recording and judged.role == "record"
    assert judged.golden_entries == [{"id": "p1"}]
    assert (judged.gated, judged.violations, judged.waivers) == (False, [], [])


# -- the rule each finding names -------------------------------------------------------------
def test_every_finding_of_the_kind_names_its_rule() -> None:
    record = dataclasses.replace(
        prompt_comparison("p1", [float("nan")], flip="correct_to_wrong"),
        faults=[empty_generation_fault("the test", "the baseline", 3)],
        turns=[
            TurnComparison(1, "assistant", "generated", "a", "b", False, "texts differ"),
            TurnComparison(2, "assistant", "generated", "c", "c", True, "identical"),
            TurnComparison(3, "assistant", "final", "d", "e", False, "texts differ"),
        ],
        feature_activity=[FeatureRecord("test", "q4@spec", ["spec"], unexercised=["0 drafts"])],
    )
    thresholds = DiffThresholds(require_engaged=True, flips=FlipThresholds())
    found = own_violations(record, thresholds)
    assert [v.source for v in found] == [
        "fault",
        "fault",
        "flips.fail_item_on",
        "expect-turns",
        "require_engaged",
    ]
    assert found[1:] == [
        Violation(
            "empty generation: the test generated no tokens while the baseline generated 3",
            "fault",
        ),
        Violation(
            "answer flip correct_to_wrong (fail_item_on: correct_to_wrong)", "flips.fail_item_on"
        ),
        Violation("turn 1 not identical: texts differ (expect: identical)", "expect-turns"),
        Violation("unexercised: test q4@spec: 0 drafts (require_engaged: true)", "require_engaged"),
    ]
    assert found[0].text.startswith("non-finite KL")
    # Without require_engaged the unexercised feature is no finding (it is warned about).
    unrequired = own_violations(record, DiffThresholds())
    assert [v.source for v in unrequired][-1] == "expect-turns"


def test_a_near_tie_not_judged_past_is_not_waived_and_says_why() -> None:
    record = dataclasses.replace(
        prompt_comparison("p1", [0.0]),
        divergence_label="near-tie",
        judged_past=False,
        method="text",
    )
    assert waivers(record, Thresholds(fail_on="decisive")) == [
        Waiver(
            DECISIVE,
            WAIVABLE,
            False,
            "the near-tie at token 0 is not waived: the output past it was not judged (method "
            "text does not score both sides on the baseline's whole continuation)",
        )
    ]


def test_each_sides_fault_and_answer_is_its_own() -> None:
    """A logprob above 0 is a fault of the output that reports it; the answers are each
    side's own (46 right, 47 wrong against 46: correct to wrong)."""
    prompt = dataclasses.replace(suite_prompt("p1", "12+34="), answer="46", answer_kind="number")
    base = dataclasses.replace(FORTY_SIX, chosen_logprobs=[0.5, -0.1, -0.1])
    evidence = dataclasses.replace(gathered(base, FORTY_SEVEN), prompt=prompt)
    record = judge(PLAN, evidence, Thresholds()).record
    assert [f.text for f in record.faults] == [
        "logprob above 0 in the baseline output at position 0 (position 0: 0.5)"
    ]
    assert (record.reference, record.base_answer, record.test_answer, record.flip) == (
        "46",
        "46",
        "47",
        "correct_to_wrong",
    )


def _near_tie(**kw: Any) -> Any:
    return dataclasses.replace(
        prompt_comparison("p1", [0.0]), divergence_label="near-tie", judged_past=True, **kw
    )


def test_a_later_decisive_disagreement_keeps_the_near_tie_and_says_where() -> None:
    later = Disagreement(4, 17, 23, [0.5, 1.25], True, "decisive")
    thresholds = Thresholds(fail_on="decisive", tie_margin=0.125)
    assert waivers(_near_tie(later_first=later), thresholds) == [
        Waiver(
            DECISIVE,
            WAIVABLE,
            False,
            "after the near-tie at token 0, token 4 is a decisive disagreement (baseline token "
            "17, test token 23; margins 0.5, 1.25 nats, tie_margin 0.125)",
        )
    ]


def test_a_near_tie_judged_past_is_waived_counting_the_later_near_ties() -> None:
    said = {
        0: "0 later disagreements, none",
        1: "1 later disagreement, all near-ties",
        2: "2 later disagreements, all near-ties",
    }
    for near, words in said.items():
        record = _near_tie(later_labels={"near-tie": near} if near else {})
        assert waivers(record, Thresholds(fail_on="decisive")) == [
            Waiver(
                DECISIVE,
                WAIVABLE,
                True,
                "near-tie at token 0; judged past it teacher-forced on the baseline's "
                f"continuation: {words}",
            )
        ]


# -- the record keeps what the evidence says -------------------------------------------------
def test_the_record_keeps_every_fact_of_the_evidence() -> None:
    """Reasoning of 3 and 0 characters, a tool call on the test side only, batches of 2 and
    3, the scoring and batching notes, a declared feature: each one in its field; "46"
    against "47" is similar 0.5, moderate."""
    base = dataclasses.replace(FORTY_SIX, reasoning="abc")
    test = dataclasses.replace(FORTY_SEVEN, tool_calls=[ToolCall("add", {"a": 12})])
    feature = FeatureRecord("test", "q4@local", ["spec"])
    evidence = gathered(
        base,
        test,
        base_batch=2,
        test_batch=3,
        batching_note="one at a time: in-process",
        feature_activity=[feature],
    )
    evidence = dataclasses.replace(
        evidence, distributions=dataclasses.replace(evidence.distributions, scoring="scored")
    )
    record = judge(PLAN, evidence, Thresholds()).record
    assert (record.prompt_id, record.templated, record.severity) == ("p1", False, "moderate")
    assert (record.base_reasoning_chars, record.test_reasoning_chars) == (3, 0)
    assert (record.base_tool_calls, record.test_tool_calls) == ("", "add(a=12)")
    assert (record.base_batch, record.test_batch) == (2, 3)
    assert (record.scoring, record.batching_note) == ("scored", "one at a time: in-process")
    assert record.feature_activity == [feature]
    same = judge(PLAN, gathered(FORTY_SIX, FORTY_SIX), Thresholds()).record
    assert (same.severity, same.margins, same.margins_exact) == ("identical", None, True)


def test_the_first_divergence_is_labelled_at_the_checks_tie_margin() -> None:
    """At token 1 the baseline (uniform rows) chose 2 and the test side (p = 1/2, 1/6, 1/6,
    1/6) prefers 0: margins 0 and ln(1/2 / 1/6) = ln 3 = 1.0986 nats, both exact: decisive
    at the default tie_margin 0.01, a near-tie at 1.5."""
    cache = GenerationCache()
    try:
        evidence = gather_prompt(
            cache,
            ResolvedTarget("bf16@local", ("bf16",), FakeBackend("bf16", FORTY_SIX)),
            ResolvedTarget(
                "q4@local", ("q4",), FakeBackend("q4", FORTY_SEVEN, rows=rows_of(SKEWED))
            ),
            suite_prompt("p1", "12+34="),
            GenerationParams(max_tokens=8),
        )
    finally:
        cache.close()
    record = judge(PLAN, evidence, Thresholds()).record
    assert record.margins == [0.0, pytest.approx(math.log(3))]
    assert record.margins_exact is True
    assert record.divergence_label == "decisive"
    wide = judge(PLAN, evidence, Thresholds(tie_margin=1.5)).record
    assert wide.divergence_label == "near-tie"


def test_the_noise_floor_leaves_out_the_positions_an_engine_did_not_report() -> None:
    """Identical outputs; the baseline did not report position 1 (NaN with an empty top-k):
    the floor is the largest |difference| of positions 0 and 2, |-0.25 - -0.5| = 0.25."""
    base = dataclasses.replace(
        FORTY_SIX,
        chosen_logprobs=[-0.5, math.nan, -0.25],
        top_logprobs=[{1: -0.5}, {}, {3: -0.25}],
    )
    test = dataclasses.replace(FORTY_SIX, chosen_logprobs=[-0.5, -0.75, -0.5])
    record = judge(PLAN, gathered(base, test), Thresholds()).record
    assert record.noise_floor == 0.25


# -- past the first divergence ---------------------------------------------------------------
NEAR = [math.log(0.245), math.log(0.245), math.log(0.25), math.log(0.26)]
"""A test-side row preferring token 3 (p 0.26) to token 2 (p 0.25) by ln(0.26/0.25)."""
DECISIVE_ROW = [math.log(1 / 6), math.log(0.5), math.log(1 / 6), math.log(1 / 6)]
"""A test-side row preferring token 1 (p 1/2) to any other (p 1/6) by ln 3."""


def _diverging_evidence(test_caps: Any = None) -> Any:
    """The baseline generates 1 2 2 3, the test side 2 2 2 3 (first divergence at token 0);
    scored on the baseline's continuation, the baseline is uniform everywhere, the test side
    prefers 3 over the baseline's 2 at token 1 (a near-tie below 0.05), 1 over its 2 at
    token 2 (decisive: ln 3), and at token 3, uniform, its argmax 0 over the baseline's 3 by
    0 nats (a near-tie)."""
    kw = {} if test_caps is None else {"capabilities": test_caps}
    test = FakeBackend(
        "q4",
        generation("2223", [2, 2, 2, 3]),
        rows=rows_of(UNIFORM, {1: NEAR, 2: DECISIVE_ROW}),
        **kw,
    )
    base = FakeBackend("bf16", generation("1223", [1, 2, 2, 3]))
    cache = GenerationCache()
    try:
        return gather_prompt(
            cache,
            ResolvedTarget("bf16@local", ("bf16",), base),
            ResolvedTarget("q4@local", ("q4",), test),
            suite_prompt("p1", "12+34="),
            GenerationParams(max_tokens=8),
        )
    finally:
        cache.close()


def _diverging(tie_margin: float, test_caps: Any = None) -> Any:
    return judge(PLAN, _diverging_evidence(test_caps), Thresholds(tie_margin=tie_margin)).record


def test_later_disagreements_are_counted_by_label_and_the_first_not_near_tie_kept() -> None:
    record = _diverging(0.05)
    assert record.first_divergence == 0 and record.judged_past is True
    assert record.later_labels == {"near-tie": 2, "decisive": 1}
    later = record.later_first
    assert (later.position, later.base_token, later.test_token, later.margins_exact) == (
        2,
        2,
        1,
        True,
    )
    assert later.label == "decisive"
    assert later.margins == [0.0, pytest.approx(math.log(3), abs=1e-6)]
    # At tie_margin 2 both are near-ties: no later disagreement stands.
    wide = _diverging(2.0)
    assert wide.later_labels == {"near-tie": 3} and wide.later_first is None


def test_a_side_without_scores_is_not_judged_past_its_divergence() -> None:
    record = _diverging(0.05, test_caps=Capabilities(top_k_logprobs=2))
    assert (record.method, record.first_divergence) == ("text", 0)
    assert record.judged_past is False
    assert (record.later_labels, record.later_first) == ({}, None)


def test_the_noise_floor_reads_only_the_positions_before_the_divergence() -> None:
    """Outputs part at token 1: only position 0 is compared, |-0.5 - -0.25| = 0.25 (position
    1's difference, 1.0, is past it)."""
    base = dataclasses.replace(FORTY_SIX, chosen_logprobs=[-0.5, -1.0, -0.1])
    test = dataclasses.replace(FORTY_SEVEN, chosen_logprobs=[-0.25, -2.0, -0.1])
    assert judge(PLAN, gathered(base, test), Thresholds()).record.noise_floor == 0.25


# -- more facts of the record ----------------------------------------------------------------
def _answered(kind: str, answer: str, base: Generation, test: Generation) -> Any:
    prompt = dataclasses.replace(suite_prompt("p1", "12+34="), answer=answer, answer_kind=kind)
    return judge(PLAN, dataclasses.replace(gathered(base, test), prompt=prompt), Thresholds())


def test_tool_call_answers_are_read_from_each_sides_calls() -> None:
    """Reference add(a=12): the baseline called add(a=12), the test side add(a=13)."""
    record = _answered(
        "tool_call",
        '{"name": "add", "arguments": {"a": 12}}',
        dataclasses.replace(FORTY_SIX, tool_calls=[ToolCall("add", {"a": 12})]),
        dataclasses.replace(FORTY_SEVEN, tool_calls=[ToolCall("add", {"a": 13})]),
    ).record
    assert (record.base_answer, record.test_answer, record.flip) == (
        "add(a=12)",
        "add(a=13)",
        "correct_to_wrong",
    )
    assert (record.base_tool_calls, record.test_tool_calls) == ("add(a=12)", "add(a=13)")


def test_a_side_without_an_answer_has_none() -> None:
    """No number in the baseline's "no idea"; 47 against 46 wrong: wrong to wrong."""
    no_idea = dataclasses.replace(FORTY_SIX, text="no idea")
    record = _answered("number", "46", no_idea, FORTY_SEVEN).record
    assert (record.base_answer, record.test_answer, record.flip) == (None, "47", "wrong_to_wrong")
    both = _answered("number", "46", FORTY_SEVEN, no_idea).record
    assert (both.base_answer, both.test_answer) == ("47", None)


def test_the_record_says_a_templated_prompt_test_reasoning_and_inexact_margins() -> None:
    evidence = gathered(FORTY_SIX, dataclasses.replace(FORTY_SEVEN, reasoning="hmm"))
    inputs = dataclasses.replace(
        evidence.inputs, base=dataclasses.replace(evidence.inputs.base, templated=True)
    )
    evidence = dataclasses.replace(
        evidence, inputs=inputs, margins=(Margin(0.5, exact=False), Margin(0.25))
    )
    record = judge(PLAN, evidence, Thresholds()).record
    assert (record.templated, record.test_reasoning_chars) == (True, 3)
    assert (record.margins, record.margins_exact) == ([0.5, 0.25], False)


def test_the_same_tokens_with_other_texts_agree_on_every_token_for_the_noise_floor() -> None:
    """Same ids 1 2 3, texts "46" and "4 6" (a detokenization difference, from character 1):
    all 3 positions count, |-0.5 - -1.0| = 0.5 at position 2."""
    base = dataclasses.replace(FORTY_SIX, chosen_logprobs=[-0.5, -0.5, -0.5])
    test = dataclasses.replace(FORTY_SIX, text="4 6", chosen_logprobs=[-0.5, -0.5, -1.0])
    record = judge(PLAN, gathered(base, test), Thresholds()).record
    assert record.noise_floor == 0.5


def test_an_evidence_whose_kl_misses_a_position_is_not_judged_past() -> None:
    evidence = _diverging_evidence()
    short = dataclasses.replace(
        evidence.distributions, kl_per_position=evidence.distributions.kl_per_position[:-1]
    )
    record = judge(PLAN, dataclasses.replace(evidence, distributions=short), Thresholds()).record
    assert record.judged_past is False and record.later_labels == {}


def test_the_judge_offers_the_records_waiver() -> None:
    thresholds = Thresholds(fail_on="decisive", tie_margin=2.0)
    judged = judge(PLAN, _diverging_evidence(), thresholds)
    assert judged.record.divergence_label == "near-tie"
    assert judged.waivers == waivers(judged.record, thresholds)
    assert [w.judged_past for w in judged.waivers] == [True]
