"""A scenario's output against its reference (pure): the record of one scenario, from the
generations the gather facet collected.

A scenario **matches** when its tokens equal the reference's (token ids where the backend
gives them, and text: :func:`~pytest_infercheck.metrics.sameness.same_generation`). Beside
that: ``max_logprob_diff = max_t |lp_ref[t] - lp[t]|`` over the positions before the first
divergence where both sides reported a logprob (:func:`~pytest_infercheck.metrics.
determinism.logprob_diff`: NaN when either is NaN), whether the output is a strict prefix of
the reference's tokens (``truncated``), its faults (its own, and an empty output against a
non-empty reference), the first divergent token labelled at ``tie_margin`` and its cache
hit (``cached_tokens`` as the engine reported them).
"""

from __future__ import annotations

from ...backends.base import Generation
from ...metrics.consistency import empty_fault, read_generation, reported_logprobs
from ...metrics.degenerate import DegenerateScan
from ...metrics.determinism import logprob_diff, side_tokens
from ...metrics.sameness import same_generation
from ...metrics.ties import tie_divergence
from .records import ScenarioResult, hit_of


def compare_scenario(
    scenario: str,
    reference: Generation,
    output: Generation,
    *,
    tie_margin: float,
    note: str | None = None,
    companion: str | None = None,
    own_reference: bool = False,
    first_turn: tuple[Generation, Generation] | None = None,
) -> ScenarioResult:
    """``output`` of ``scenario`` against ``reference`` (see the module docstring);
    ``own_reference``: the reference is the scenario's own (multi-turn's composed
    conversation), recorded beside it and read for faults too; ``first_turn``: that
    conversation's first turn uncached and through the cache, both read for faults and
    compared (``first_turn_match``)."""
    base = ScenarioResult(
        scenario,
        True,
        note,
        companion=companion,
        reference=reference.text if own_reference else None,
    )
    own = [read_generation("the scenario's reference", reference)] if own_reference else []
    if first_turn is not None:
        cold, cached = first_turn
        own.append(read_generation("the uncached first turn", cold))
        own.append(read_generation("the first turn through the cache", cached))
        base.first_turn = cold.text
        base.first_turn_cached = cached.text
        turn = same_generation(cold, cached)
        base.first_turn_match = turn.same
        base.first_turn_logprob_diff = logprob_diff(
            reported_logprobs(cold.chosen_logprobs, cold.top_logprobs),
            reported_logprobs(cached.chosen_logprobs, cached.top_logprobs),
            turn.first_divergence if turn.divergence_unit == "token" else None,
        )
    reading = read_generation(f"the {scenario} output", output)
    base.degenerate = DegenerateScan.of([r.degenerate for r in [*own, reading]])
    verdict = same_generation(reference, output)
    token_divergence = verdict.divergence_unit == "token"
    aligned = verdict.first_divergence if token_divergence else None
    if not verdict.same and not token_divergence and not verdict.detokenization_difference:
        aligned = 0  # texts differ and no tokens say where: nothing is comparable
    ref_ids, ids = reference.token_ids, output.token_ids
    empty = empty_fault(
        (output.text, output.token_ids, output.finish_reason),
        (reference.text, reference.token_ids, reference.finish_reason),
        a_name=f"the {scenario} output",
        b_name="the reference",
    )
    base.match = verdict.same
    base.first_divergence = verdict.first_divergence
    base.divergence_unit = verdict.divergence_unit
    base.max_logprob_diff = logprob_diff(
        reported_logprobs(reference.chosen_logprobs, reference.top_logprobs),
        reported_logprobs(output.chosen_logprobs, output.top_logprobs),
        aligned,
    )
    base.text = output.text
    base.truncated = bool(
        ref_ids is not None and ids and len(ids) < len(ref_ids) and ref_ids[: len(ids)] == ids
    )
    base.cached_tokens = output.cached_tokens
    base.hit = hit_of(output.cached_tokens)
    own_faults = [f for r in own for f in r.faults]
    base.faults = [*own_faults, *reading.faults, *([] if empty is None else [empty])]
    if token_divergence and verdict.first_divergence is not None and ids and ref_ids:
        at = verdict.first_divergence
        if at < len(ids) and at < len(ref_ids):
            base.tie = tie_divergence(side_tokens(reference), side_tokens(output), at, tie_margin)
    return base


def failed_scenario(
    scenario: str,
    error: str,
    *,
    note: str | None = None,
    companion: str | None = None,
) -> ScenarioResult:
    """A scenario that could not be compared because a request failed (``error``: which, and
    the server's message): exercised, not matching."""
    return ScenarioResult(scenario, True, note, match=False, companion=companion, error=error)


def not_exercised(scenario: str, reason: str) -> ScenarioResult:
    """A scenario left out for ``reason``, known before any request."""
    return ScenarioResult(scenario, False, reason)
