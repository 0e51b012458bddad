"""The judge facet of the comparison kinds: pure functions from an item's evidence (and the
check's thresholds) to its record, the kind's own findings and the waivers it offers. No I/O:
this module imports no cache, no backend and no generation cache.

For a prompt item (:class:`~.evidence.PromptEvidence`):

- the record (:func:`build_record`): the :class:`~.prompt.PromptComparison` of both outputs,
  their distributions, answers and where they diverge;
- the kind's own findings (:func:`own_violations`), besides the gates the framework judges
  on the evidence's measures (:data:`.spec.GATES`): every fail-closed problem and generation
  fault, an answer flip that ``flips.fail_item_on`` fails, a conversation's generated turn
  that differs under ``expect: identical``, a feature that never engaged under
  ``require_engaged``;
- the waiver (:func:`waivers`): under ``fail_on: decisive``, a first divergence that is a
  near-tie waives the findings that only say the outputs differ (``min_similarity``,
  ``expect: identical``), but only once the output past it was judged: both sides scored
  teacher-forced on the baseline's whole continuation (``judged_past``) and no later
  position a decisive (or unknown) disagreement. Otherwise the findings stand and the item
  says why.

:func:`item_verdict` judges a record read back alone (a results file, a test) by the same
rules: the kind's findings, the gates on :func:`record_measures`, the waivers.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...metrics.answers import fails_item, judge_answers
from ...metrics.consistency import read_generation, reported_logprobs
from ...metrics.degenerate import DegenerateScan
from ...metrics.determinism import logprob_diff
from ...metrics.faults import Fault
from ...metrics.sameness import same_generation
from ...metrics.text import severity
from ...metrics.ties import divergence_label, reported_noise_floor
from ...tools import describe_calls
from ...verdict.gate import Violation, judge_gates
from ...verdict.measure import MeasureValue
from ...verdict.waiver import Waiver, apply_waivers
from ..framework.kind import Judged
from .evidence import (
    PromptEvidence,
    RecordingEvidence,
    SelfCheckEvidence,
    prompt_measures,
)
from .prompt import Disagreement, PromptComparison, SelfCheckRecord
from .spec import GATES, WAIVABLE, expects_identical, requires_engaged
from .turns import TurnComparison, first_divergent_turn, judge_turns
from .verdicts import item_faults

if TYPE_CHECKING:
    from ...metrics.sameness import Sameness
    from ...specs import Thresholds
    from ..framework.plan import ItemPlan
    from .evidence import Generation

SELF_CHECK_FAILED = (
    "baseline self-check FAILED: the baseline is not deterministic, so no sweep level can be "
    "judged against it"
)
DECISIVE = "fail_on: decisive"


def judge(plan: ItemPlan, evidence: Any, thresholds: Any) -> Judged:
    """An item's record, findings and waivers from its evidence (see the module
    docstring)."""
    if isinstance(evidence, RecordingEvidence):
        return Judged(
            evidence.recording, role="record", golden_entries=evidence.payloads, gated=False
        )
    if isinstance(evidence, SelfCheckEvidence):
        checked = self_check_record(evidence)
        return Judged(
            checked,
            [Violation(p, "self-check") for p in checked.problems],
            text=SELF_CHECK_FAILED,
            gated=False,
        )
    record = build_record(evidence, thresholds)
    return Judged(
        record,
        own_violations(record, thresholds),
        waivers(record, thresholds),
        degenerate=record.degenerate,
    )


# -- the record -------------------------------------------------------------------------------
def build_record(evidence: PromptEvidence, thresholds: Thresholds) -> PromptComparison:
    """The :class:`~.prompt.PromptComparison` of one prompt's evidence; ``thresholds``
    gives the ``tie_margin`` that labels the first divergence and the later
    disagreements."""
    prompt, base, other = evidence.prompt, evidence.base, evidence.other
    verdict = evidence.sameness
    dists = evidence.distributions
    divergence = verdict.first_divergence if verdict.divergence_unit == "token" else None
    margins = evidence.margins
    tie_margin = thresholds.tie_margin
    readings = [
        read_generation(f"the {where} output", g)
        for where, g in (("baseline", base), ("test", other))
    ]
    answers = _answers(prompt, base, other)
    judged_past, later_labels, later_first = _past_divergence(evidence, divergence, tie_margin)
    record = PromptComparison(
        prompt_id=prompt.id,
        prompt_text=prompt.text,
        baseline=evidence.baseline,
        test=evidence.test,
        method=dists.method,
        base_text=base.text,
        test_text=other.text,
        base_tokens=list(base.token_texts or evidence.base_labels or []),
        base_ids=base.token_ids,
        test_ids=other.token_ids,
        base_finish=base.finish_reason,
        test_finish=other.finish_reason,
        first_divergence=divergence,
        similarity=evidence.similarity,
        severity=severity(verdict.same, evidence.similarity).value,
        kl_per_position=list(dists.kl_per_position),
        same_top=list(dists.same_top),
        delta_p=list(dists.delta_p),
        **answers,
        sameness=verdict.describe(),
        templated=evidence.inputs.base.templated,
        base_reasoning_chars=len(base.reasoning or ""),
        test_reasoning_chars=len(other.reasoning or ""),
        base_tool_calls=describe_calls(base.tool_calls) if base.tool_calls else "",
        test_tool_calls=describe_calls(other.tool_calls) if other.tool_calls else "",
        problems=list(dists.problems),
        faults=[f for reading in readings for f in reading.faults],
        degenerate=DegenerateScan.of([reading.degenerate for reading in readings]),
        divergence_origin=evidence.origin.stage,
        origin_detail=evidence.origin.detail,
        prompt_inputs=evidence.inputs.record,
        base_batch=evidence.base_batch,
        test_batch=evidence.test_batch,
        scoring=dists.scoring,
        method_note=dists.note,
        batching_note=evidence.batching_note,
        margins=None if margins is None else [None if m is None else m.value for m in margins],
        margins_exact=margins is None or all(m is None or m.exact for m in margins),
        noise_floor=reported_noise_floor(
            reported_logprobs(base.chosen_logprobs, base.top_logprobs),
            reported_logprobs(other.chosen_logprobs, other.top_logprobs),
            _agreeing(verdict, base, other),
        ),
        divergence_label=divergence_label(divergence is not None, margins or [], tie_margin),
        feature_activity=list(evidence.feature_activity),
        judged_past=judged_past,
        later_labels=later_labels,
        later_first=later_first,
        bucket=prompt.bucket or "",
    )
    if not evidence.turns:
        return record
    turns, faults, turn_readings = judge_turns(evidence.turns)
    turns.append(final_turn(len(evidence.turns), record))
    return _with_turns(record, turns, faults, turn_readings)


def final_turn(index: int, result: PromptComparison) -> TurnComparison:
    """The final answer (turn ``index``) as its comparison found it."""
    unit = None if result.first_divergence is None else "token"
    return TurnComparison(
        index,
        "assistant",
        "final",
        result.base_text,
        result.test_text,
        result.identical,
        result.sameness,
        result.first_divergence,
        unit,
    )


def _with_turns(
    record: PromptComparison, turns: list[Any], faults: list[Fault], readings: list[Any]
) -> PromptComparison:
    return replace(
        record,
        turns=turns,
        first_divergent_turn=first_divergent_turn(turns),
        faults=faults + record.faults,
        degenerate=DegenerateScan.merged(
            [DegenerateScan.of([r.degenerate for r in readings]), record.degenerate]
        ),
    )


def _answers(prompt: Any, base: Generation, other: Generation) -> dict[str, Any]:
    """The answers of both sides judged against the prompt's reference (the record's
    ``answer_kind`` ... ``flip``)."""
    if prompt.answer_kind is None:
        return {}
    judged = judge_answers(
        prompt.answer_kind,
        prompt.answer,
        base.text,
        other.text,
        base_calls=base.tool_calls,
        test_calls=other.tool_calls,
    )
    return {
        "answer_kind": prompt.answer_kind,
        "reference": prompt.answer,
        "base_answer": judged.base.raw if judged.base else None,
        "test_answer": judged.test.raw if judged.test else None,
        "flip": judged.flip.value,
        "base_correct": judged.base_correct,
    }


def _agreeing(verdict: Sameness, base: Generation, other: Generation) -> int:
    """How many leading positions both sides chose the same token after the same prefix:
    up to the first divergent token, all of them when the token ids are equal, else none
    known."""
    if verdict.divergence_unit == "token" and verdict.first_divergence is not None:
        return verdict.first_divergence
    if base.token_ids is not None and base.token_ids == other.token_ids:
        return len(base.token_ids)
    return 0


def _past_divergence(
    evidence: PromptEvidence, at: int | None, tie_margin: float
) -> tuple[bool | None, dict[str, int], Disagreement | None]:
    """Whether the output past the first divergent token ``at`` was judged, the later
    disagreements by label, and the first that is not a near-tie. Judged when the
    distributions hold the test side's most likely token and ``KL_t`` at every position of
    the baseline's continuation (teacher-forced on both sides)."""
    if at is None:
        return None, {}, None
    forced = evidence.distributions.forced
    continuation = evidence.base.token_ids or []
    kl = evidence.distributions.kl_per_position
    if forced is None or len(forced) != len(continuation) or len(kl) != len(continuation):
        return False, {}, None
    labels: dict[str, int] = {}
    first: Disagreement | None = None
    for t in forced.disagreements(at + 1):
        margins = forced.margins(t)
        label = divergence_label(True, margins, tie_margin) or "unknown"
        labels[label] = labels.get(label, 0) + 1
        if first is None and label != "near-tie":
            first = Disagreement(
                t,
                forced.chosen[t],
                forced.test_top[t],
                [m.value for m in margins],
                all(m.exact for m in margins),
                label,
            )
    return True, labels, first


# -- findings, waivers, the verdict of a record -----------------------------------------------
def own_violations(record: PromptComparison, thresholds: Thresholds) -> list[Violation]:
    """The kind's findings on one prompt's record (the gates aside): every problem of
    :func:`~.verdicts.item_faults` (``non-finite KL at positions 2, 5 (NaN)``, and every fault
    of either side's generation), an answer flip ``flips.fail_item_on`` fails, a
    conversation's generated turn whose outputs differ under ``expect: identical`` (the
    budget gates judge the final turn only), each feature that never engaged under
    ``require_engaged``."""
    out = [Violation(f.text, "fault") for f in item_faults(record)]
    fail_on = thresholds.flips.fail_item_on
    if fails_item(record.flip, fail_on):
        out.append(
            Violation(f"answer flip {record.flip} (fail_item_on: {fail_on})", "flips.fail_item_on")
        )
    if expects_identical(thresholds):
        out += [
            Violation(
                f"turn {turn.index} not identical: {turn.sameness} (expect: identical)",
                "expect-turns",
            )
            for turn in record.turns
            if turn.kind == "generated" and turn.same is False
        ]
    if requires_engaged(thresholds):
        out += [
            Violation(f"unexercised: {why} (require_engaged: true)", "require_engaged")
            for why in record.unexercised
        ]
    return out


def waivers(record: PromptComparison, thresholds: Thresholds) -> list[Waiver]:
    """``fail_on: decisive``'s waiver of a near-tie first divergence (see the module
    docstring): judged past it only when the record says so and no later disagreement is
    decisive or unknown."""
    if thresholds.fail_on != "decisive" or record.divergence_label != "near-tie":
        return []
    at = record.first_divergence
    if not record.judged_past:
        why = (
            f"the near-tie at token {at} is not waived: the output past it was not judged "
            f"(method {record.method} does not score both sides on the baseline's whole "
            "continuation)"
        )
        return [Waiver(DECISIVE, WAIVABLE, False, why)]
    later = record.later_first
    if later is not None:
        margins = ", ".join(f"{m:.4g}" for m in later.margins)
        why = (
            f"after the near-tie at token {at}, token {later.position} is a {later.label} "
            f"disagreement (baseline token {later.base_token}, test token {later.test_token}; "
            f"margins {margins} nats, tie_margin {thresholds.tie_margin:g})"
        )
        return [Waiver(DECISIVE, WAIVABLE, False, why)]
    near = record.later_labels.get("near-tie", 0)
    why = (
        f"near-tie at token {at}; judged past it teacher-forced on the baseline's "
        f"continuation: {near} later disagreement{'s' if near != 1 else ''}, "
        f"{'all near-ties' if near else 'none'}"
    )
    return [Waiver(DECISIVE, WAIVABLE, True, why)]


def record_measures(record: PromptComparison) -> dict[str, MeasureValue]:
    """The measures of a record read back (the same as its evidence's,
    :attr:`~.evidence.PromptEvidence.measures`)."""
    return prompt_measures(
        record.method,
        record.method_note,
        record.kl_per_position,
        record.similarity,
        record.identical,
        record.sameness or "not compared",
    )


def item_verdict(record: PromptComparison, thresholds: Thresholds) -> list[str]:
    """Why one prompt's record fails, as its item did (the framework's rules for what a
    record holds): the kind's findings, then the item gates on :func:`record_measures`, the
    waivers applied."""
    violations = [
        *own_violations(record, thresholds),
        *judge_gates(GATES, thresholds, record_measures(record), "item"),
    ]
    kept, _ = apply_waivers(violations, waivers(record, thresholds))
    return [v.text for v in kept]


# -- a sweep's self-check ----------------------------------------------------------------------
def self_check_record(evidence: SelfCheckEvidence) -> SelfCheckRecord:
    """One line per prompt whose two baseline generations differ, and their ids."""
    problems, failed = [], []
    for pair in evidence.prompts:
        problem = reproduce(pair.first, pair.second)
        if problem is not None:
            problems.append(f"{pair.prompt_id}: {problem}")
            failed.append(pair.prompt_id)
    return SelfCheckRecord(problems, failed, evidence.generated)


def reproduce(first: Generation, second: Generation) -> str | None:
    """How a second generation differs from the first (None: identical tokens, text and
    chosen logprobs)."""
    verdict = same_generation(first, second)
    if not verdict.same:
        return verdict.describe()
    a = reported_logprobs(first.chosen_logprobs, first.top_logprobs)
    b = reported_logprobs(second.chosen_logprobs, second.top_logprobs)
    if a is None and b is None:
        return None
    # Fail closed: a NaN logprob is a difference (logprob_diff: NaN); so, of unknown size,
    # are logprobs in one run only, runs of different lengths and a position reported in
    # one run only. Positions neither run reported (llama-server: a token that ends inside
    # a UTF-8 character) are left out, as every check leaves them.
    aligned = a is not None and b is not None and [x is None for x in a] == [y is None for y in b]
    drift = logprob_diff(a, b, None) if aligned else math.nan
    if drift is None or drift == 0.0:
        return None
    return f"same tokens, logprobs drift by {drift:.3g}"
