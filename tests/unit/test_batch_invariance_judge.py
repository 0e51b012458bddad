"""batch-invariance's judge facet called directly (found by the mutation run,
tests/unit/MUTATION.md): the rule each finding names (a near-tie trial's own source, which
its waiver covers), a decisive disagreement after a near-tie in the batched output, the
default logprob tolerance at and past its limit, faults of the output alone and of a
trial, and the item's degenerate scan."""

from __future__ import annotations

import dataclasses
import math

from pytest_infercheck.checks.batch_invariance import AloneOutput, BatchInvariancePrompt
from pytest_infercheck.checks.batch_invariance import compare_to_alone as trial_of
from pytest_infercheck.checks.batch_invariance.evidence import BatchInvarianceEvidence
from pytest_infercheck.checks.batch_invariance.judge import DECISIVE_RULE, judge
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.metrics.consistency import read_generation
from pytest_infercheck.metrics.degenerate import DegenerateScan
from pytest_infercheck.verdict.gate import Violation
from pytest_infercheck.verdict.waiver import Waiver
from tests.unit.engine_verdicts import rescored
from tests.unit.test_batch_invariance_ties import ALONE, FAR, NEAR, record, thresholds, trial
from tests.unit.test_past_tie import MODAL
from tests.unit.test_past_tie import NEAR as NEAR_LONG

PLAN = ItemPlan("p", "prompt", "p")
DIFFERS = (
    "trial {n} (position 1 of 2): output differs from the prompt alone at 1: 'bf' alone vs "
    "'bg' batched"
)


def test_a_near_tie_trial_names_its_own_rule_and_its_waiver_covers_it() -> None:
    """Trial 0 parts at a near-tie and both outputs were scored; trial 1 decisively."""
    e = BatchInvarianceEvidence(
        record(trial(NEAR), trial(FAR, 1)), rescored([1, 5]), {0: rescored([1, 6])}
    )
    judged = judge(PLAN, e, thresholds(fail_on="decisive", logprob_tolerance=1.0))
    assert judged.violations == [
        Violation(DIFFERS.format(n=0), "near-tie:trial 0"),
        Violation(DIFFERS.format(n=1), "outputs-differ"),
    ]
    why = (
        "judged past the near-tie at token 1 by teacher forcing: 0 later tokens, each within "
        "tie_margin 0.01 of its engine's own choice"
    )
    assert judged.waivers == [Waiver(DECISIVE_RULE, frozenset({"near-tie:trial 0"}), True, why)]
    first, second = judged.record.trials
    assert first.after_tie is not None and first.after_tie.why == why
    assert second.after_tie is None
    assert judged.degenerate == DegenerateScan(3, [])


def test_a_decisive_disagreement_in_the_batched_output_after_a_near_tie_is_its_own_finding() -> (
    None
):
    near = trial_of(MODAL, NEAR_LONG, trial=0, position=1, batch=["x", "p"])
    rec = BatchInvariancePrompt("p", "m@x", 0, AloneOutput("bcdf", [1, 2, 3, 5]), [near], "b")
    late = BatchInvarianceEvidence(
        rec, rescored([1, 2, 3, 5]), {0: rescored([1, 2, 4, 6], [0, 0, 0, 0.02])}
    )
    judged = judge(PLAN, late, thresholds(fail_on="decisive", logprob_tolerance=1.0))
    assert judged.violations[0] == Violation(
        "trial 0 (position 1 of 2): after the near-tie at token 2, the batched output "
        "disagrees decisively with its engine at token 3: its token is 0.02 nats below the "
        "engine's own choice there (teacher-forced; tie_margin 0.01)",
        "decisive-after-tie",
    )
    assert [w.judged_past for w in judged.waivers] == [False]


def test_the_default_logprob_tolerance_is_held_at_its_limit() -> None:
    """The default tolerance 0.0001: a trial whose logprobs moved by exactly that passes,
    one that moved by 0.0002 fails, one whose move is not finite fails saying so."""
    same = trial(ALONE)

    def found(diff: float) -> list[Violation]:
        e = BatchInvarianceEvidence(record(dataclasses.replace(same, max_logprob_diff=diff)))
        return judge(PLAN, e, thresholds()).violations

    assert found(0.0001) == []
    assert found(0.0002) == [
        Violation(
            "trial 0 (position 1 of 2): logprobs moved by 0.0002 > logprob_tolerance 0.0001",
            "logprob_tolerance",
        )
    ]
    assert found(math.nan) == [
        Violation(
            "trial 0 (position 1 of 2): logprobs moved by nan (not finite): fails "
            "logprob_tolerance 0.0001",
            "logprob_tolerance",
        )
    ]


def test_faults_of_the_output_alone_and_of_a_trial_are_faults() -> None:
    """A logprob above 0 at token 0, alone and batched."""
    hot = dataclasses.replace(
        ALONE, chosen_logprobs=[0.5, -0.4], top_logprobs=[{1: 0.5}, {5: -0.4, 6: -0.408}]
    )
    read = read_generation("the output alone", hot)
    batched = trial_of(hot, hot, trial=0, position=1, batch=["x", "p"])
    rec = BatchInvariancePrompt(
        "p", "m@x", 0, AloneOutput(hot.text, hot.token_ids, read.faults), [batched], "b"
    )
    judged = judge(PLAN, BatchInvarianceEvidence(rec), thresholds(logprob_tolerance=1.0))
    assert [v.source for v in judged.violations] == ["fault", "fault"]
    assert judged.violations[0].text == (
        "logprob above 0 in the output alone at position 0 (position 0: 0.5)"
    )
    assert judged.violations[1].text == (
        "trial 0 (position 1 of 2): logprob above 0 in the batched output at position 0 "
        "(position 0: 0.5)"
    )
