"""Two generations of one prompt compared, and a continuation past a near-tie compared with
the reference: pure functions over generations (no engine, no thresholds but the
``tie_margin`` that labels a divergence).

- :func:`compare_generations`: the sameness verdict, similarity, answers, both sides' own
  faults, the logprob drift over the tokens both sides share and the label of their first
  divergent token.
- :func:`continuation_divergence`: where a continuation forced onto the reference's tokens
  up to some position parts from the reference's remaining tokens, labelled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...metrics.answers import judge_answers
from ...metrics.consistency import (
    empty_fault,
    output_text,
    read_generation,
    reported_logprobs,
    similarity_fault,
)
from ...metrics.degenerate import DegenerateScan
from ...metrics.determinism import logprob_diff, side_tokens
from ...metrics.faults import NON_FINITE_LOGPROB, Fault
from ...metrics.finite import check_scalar
from ...metrics.sameness import Basis, DivergenceUnit, Sameness, same_generation
from ...metrics.text import first_divergence, similarity
from ...metrics.ties import DEFAULT_TIE_MARGIN, SideTokens, TieDivergence, tie_divergence

if TYPE_CHECKING:
    from ...backends.base import Generation
    from ...suites import Prompt

NON_FINITE_DRIFT = "non-finite logprob drift"
"""The fault of a logprob drift that is not finite while no other fault of the item says why
(a ``-inf`` logprob on one side beside a finite one on the other)."""


@dataclass(frozen=True)
class SideComparison:
    """Two generations of one prompt compared (see :func:`compare_generations`)."""

    match: bool
    first_divergence: int | None
    divergence_unit: DivergenceUnit | None
    similarity: float
    answers: list[str | None]
    flip: str | None
    logprob_drift: float | None
    faults: list[Fault] = field(default_factory=list)
    tie: TieDivergence | None = None
    degenerate: DegenerateScan = field(default_factory=DegenerateScan)
    """Both sides' degenerate findings (:mod:`~pytest_infercheck.metrics.degenerate`)."""
    drift_unmeasured: str | None = None
    """Why :attr:`logprob_drift` is None (no logprobs, no shared token), else None."""


def shared_tokens(verdict: Sameness) -> tuple[int | None, str | None]:
    """``(upto, why_none)``: the positions both outputs share a token at (after the same
    prefix) are those before ``upto`` (None: every position); ``why_none`` says why no
    position is known to be shared (then ``upto`` is None too)."""
    if verdict.same:
        return None, None
    at = verdict.first_divergence
    if verdict.divergence_unit == "token":
        if at == 0:
            return None, "the outputs differ from their first token: no token is shared"
        return at, None
    if verdict.basis != Basis.TEXT:
        return None, None  # the tokens are all equal; the texts differ (detokenization)
    return None, (
        f"the outputs differ (from character {at}) and carry neither token ids nor token "
        "texts: no shared token is known"
    )


def drift_of(
    ref: Generation, other: Generation, labels: tuple[str, str], verdict: Sameness
) -> tuple[float | None, str | None]:
    """``(drift, why_none)``: :func:`~pytest_infercheck.metrics.determinism.logprob_diff`
    over the shared tokens (:func:`shared_tokens`; positions a side did not report left out,
    NaN when a compared logprob is NaN), or None and why it was not measured."""
    for label, generation in zip(labels, (ref, other), strict=True):
        if not generation.chosen_logprobs:
            return None, f"the {label} output carries no logprobs"
    upto, why = shared_tokens(verdict)
    if why is not None:
        return None, why
    drift = logprob_diff(
        reported_logprobs(ref.chosen_logprobs, ref.top_logprobs),
        reported_logprobs(other.chosen_logprobs, other.top_logprobs),
        upto,
    )
    if drift is None:
        return None, "no shared token has a logprob reported on both sides"
    return drift, None


def compare_generations(
    prompt: Prompt,
    ref: Generation,
    other: Generation,
    labels: tuple[str, str] = ("reference", "other"),
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> SideComparison:
    """``match``, ``first_divergence`` and ``divergence_unit``: the sameness verdict
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`). ``logprob_drift``: max
    |difference| of the chosen tokens' logprobs over the tokens both share (:func:`drift_of`).
    ``flip``: :func:`~pytest_infercheck.metrics.answers.judge_answers` when the prompt has an
    answer kind. ``faults``: each side's own (named ``the <label> output``), an empty
    generation on one side only, a non-finite similarity, a non-finite drift that no other
    fault explains (:data:`NON_FINITE_DRIFT`). ``tie``: the first divergent token labelled at
    ``tie_margin`` (:func:`~pytest_infercheck.metrics.ties.tie_divergence`) when the outputs
    part at a token."""
    verdict = same_generation(ref, other)
    drift, drift_unmeasured = drift_of(ref, other, labels, verdict)
    names = (f"the {labels[0]} output", f"the {labels[1]} output")
    readings = [read_generation(names[0], ref), read_generation(names[1], other)]
    faults = [f for reading in readings for f in reading.faults]
    empty = empty_fault(
        (output_text(other.text, other.tool_calls), other.token_ids, other.finish_reason),
        (output_text(ref.text, ref.tool_calls), ref.token_ids, ref.finish_reason),
        a_name=names[1],
        b_name=names[0],
    )
    if empty is not None:
        faults.append(empty)
    ratio = similarity(ref.text, other.text)
    odd = similarity_fault(f"{labels[1]} vs {labels[0]}", ratio)
    if odd is not None:
        faults.append(odd)
    if drift is not None and not any(f.fault == NON_FINITE_LOGPROB for f in faults):
        bad = check_scalar(f"logprob drift of {labels[1]} vs {labels[0]}", drift)
        if bad is not None:
            faults.append(Fault(NON_FINITE_DRIFT, f"{labels[1]} vs {labels[0]}", bad.describe()))
    answers: list[str | None] = [None, None]
    flip = None
    if prompt.answer_kind is not None:
        judged = judge_answers(
            prompt.answer_kind,
            prompt.answer,
            ref.text,
            other.text,
            base_calls=ref.tool_calls,
            test_calls=other.tool_calls,
        )
        answers = [a.raw if a else None for a in (judged.base, judged.test)]
        flip = judged.flip.value
    tie = None
    if verdict.divergence_unit == "token" and verdict.first_divergence is not None:
        tie = tie_divergence(
            side_tokens(ref), side_tokens(other), verdict.first_divergence, tie_margin
        )
    return SideComparison(
        match=verdict.same,
        first_divergence=verdict.first_divergence,
        divergence_unit=verdict.divergence_unit,
        similarity=ratio,
        answers=answers,
        flip=flip,
        logprob_drift=drift,
        faults=faults,
        tie=tie,
        degenerate=DegenerateScan.of([reading.degenerate for reading in readings]),
        drift_unmeasured=drift_unmeasured,
    )


def _tail(values: Sequence[Any] | None, start: int) -> Sequence[Any] | None:
    return None if values is None else values[start:]


def shifted(side: SideTokens, start: int) -> SideTokens:
    """``side`` from position ``start`` on (what a continuation from there is compared to)."""
    return dataclasses.replace(
        side,
        ids=_tail(side.ids, start),
        texts=_tail(side.texts, start),
        chosen=_tail(side.chosen, start),
        top=_tail(side.top, start),
        full=None if side.full is None else side.full[start:],
    )


def continuation_divergence(
    ref: Generation, forced: Generation, start: int, tie_margin: float = DEFAULT_TIE_MARGIN
) -> TieDivergence | None:
    """Where ``forced`` (generated after the prompt and the reference's first ``start``
    tokens) parts from the reference's tokens from ``start`` on, labelled at ``tie_margin``
    with both sides' margins there (the reference's from its own numbers at that position,
    which saw the same prefix); its ``token`` is the absolute position. None when it
    reproduces them (the same ids, the same length)."""
    ref_ids = list(ref.token_ids or [])[start:]
    at = first_divergence(ref_ids, list(forced.token_ids or []))
    if at is None:
        return None
    tie = tie_divergence(shifted(side_tokens(ref), start), side_tokens(forced), at, tie_margin)
    return dataclasses.replace(tie, token=start + at)
