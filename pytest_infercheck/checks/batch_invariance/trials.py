"""What a batch-invariance trial measured: the needle's batched generation against its
generation alone (pure; the gather facet calls it on what the engine returned)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...metrics.consistency import (
    empty_fault,
    read_generation,
    reported_logprobs,
)
from ...metrics.degenerate import DegenerateScan
from ...metrics.determinism import logprob_diff, side_tokens
from ...metrics.faults import Fault
from ...metrics.finite import strict_max
from ...metrics.sameness import same_generation
from ...metrics.ties import DEFAULT_TIE_MARGIN, count_labels, tie_divergence
from .records import BatchInvariancePrompt, Trial

if TYPE_CHECKING:
    from ...backends import Backend, Generation

CONCURRENT_BURST = "concurrent burst"
SEQUENTIAL = "sequential (the backend takes one request at a time)"


def batched_by(backend: Backend) -> str:
    """How ``backend.generate_batch`` runs a batch: the backend's own batching (its
    ``batching`` attribute), else a burst of concurrent requests, which a backend that takes
    one request at a time serves one after the other."""
    if backend.batching is not None:
        return backend.batching
    return CONCURRENT_BURST if backend.concurrency > 1 else SEQUENTIAL


def compare_to_alone(
    alone: Generation,
    batched: Generation | BaseException,
    *,
    trial: int,
    position: int,
    batch: list[str],
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> Trial:
    """The trial ``trial`` (the needle at ``position`` of ``batch``): ``match``
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`: ids and text),
    ``first_divergence`` and its unit, ``max_logprob_diff`` over the positions both runs
    share a token (:func:`~pytest_infercheck.metrics.determinism.logprob_diff`: NaN when a
    compared logprob is NaN), ``text`` of the needle's batched generation against the alone
    one (``error`` when the batched request failed), the batched output's ``faults`` and
    ``degenerate`` finding (:func:`~pytest_infercheck.metrics.consistency.read_generation`), and
    the first divergent token's ``tie`` labelled at ``tie_margin``."""
    if isinstance(batched, BaseException):
        return Trial(
            trial=trial,
            position=position,
            batch=batch,
            match=False,
            first_divergence=None,
            divergence_unit=None,
            max_logprob_diff=None,
            text=None,
            error=f"{type(batched).__name__}: {batched}",
        )
    verdict = same_generation(alone, batched)
    reading = read_generation("the batched output", batched)
    found = empty_fault(
        (batched.text, batched.token_ids, batched.finish_reason),
        (alone.text, alone.token_ids, alone.finish_reason),
        a_name="the batched output",
        b_name="the output alone",
    )
    empty = [] if found is None else [found]
    if verdict.same or verdict.detokenization_difference:
        aligned: int | None = None  # every position holds the same token
    elif verdict.divergence_unit == "token":
        aligned = verdict.first_divergence
    else:
        aligned = 0  # texts differ and no tokens say where: no position is comparable
    return Trial(
        trial=trial,
        position=position,
        batch=batch,
        match=verdict.same,
        first_divergence=verdict.first_divergence,
        divergence_unit=verdict.divergence_unit,
        max_logprob_diff=logprob_diff(
            reported_logprobs(alone.chosen_logprobs, alone.top_logprobs),
            reported_logprobs(batched.chosen_logprobs, batched.top_logprobs),
            aligned,
        ),
        text=batched.text,
        faults=[*reading.faults, *empty],
        degenerate=reading.degenerate,
        tie=None
        if verdict.divergence_unit != "token" or verdict.first_divergence is None
        else tie_divergence(
            side_tokens(alone), side_tokens(batched), verdict.first_divergence, tie_margin
        ),
    )


def trial_labels(trials: Sequence[Trial]) -> dict[str, int]:
    """The trials' divergence labels counted; empty when no trial's tokens diverge."""
    labels = [t.tie.divergence_label for t in trials if t.tie is not None]
    return count_labels(labels) if labels else {}


def record_faults(record: BatchInvariancePrompt) -> list[Fault]:
    """Every fault of a prompt's record: the output alone's, then each trial's."""
    return [*record.alone.faults, *(f for t in record.trials for f in t.faults)]


def scan(record: BatchInvariancePrompt) -> DegenerateScan:
    """The degenerate findings of a prompt's generations: alone, and in each trial whose
    request succeeded."""
    trials = [t.degenerate for t in record.trials if t.error is None]
    return DegenerateScan.of([record.alone.degenerate, *trials])


def max_diff(trials: Sequence[Trial]) -> float | None:
    """The largest ``max_logprob_diff`` of the trials (NaN wins); None when none has one."""
    return strict_max([t.max_logprob_diff for t in trials if t.max_logprob_diff is not None])


def where(trial: Trial) -> str:
    """``trial 0 (position 2 of 8)``."""
    return f"trial {trial.trial} (position {trial.position} of {len(trial.batch)})"
