"""Repeatability of generations: determinism across runs, and agreement of two generations
(a prompt alone vs. inside a batch).

Two outputs are the same by the one rule of :mod:`.sameness`: equal text, and equal token
ids where the backend gives them. Logprob differences fail closed: a NaN anywhere makes the
difference NaN (never skipped, never hidden by ``max``), equal values (``-inf`` included)
differ by 0, ``-inf`` against a finite value by ``inf``; only positions the engine did not
report (None, see :func:`.consistency.reported_logprobs`) are left out. Each run's own faults
(:mod:`.consistency`) come with it into the summary. Pure functions on plain values; no
engine, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..records import OMIT_WHEN_EMPTY
from .consistency import empty_fault, is_empty, read_generation, reported_logprobs
from .degenerate import Degenerate, DegenerateScan
from .faults import Fault
from .finite import strict_max
from .past_tie import AfterTie
from .sameness import compare_outputs
from .stats import wilson_interval
from .ties import DEFAULT_TIE_MARGIN, SideTokens, TieDivergence, tie_divergence

if TYPE_CHECKING:
    from ..backends.base import Generation

__all__ = [
    "DeterminismSummary",
    "DistinctOutput",
    "RunOutput",
    "determinism_score",
    "logprob_diff",
    "output_key",
    "run_output",
    "side_tokens",
    "spread",
    "summarize_runs",
]


@dataclass(frozen=True)
class RunOutput:
    """One successful run: its text, token ids (None when the backend gives none), the
    log-probabilities of its chosen tokens (None when not exposed; an element is None where
    the engine reported none), why it stopped, and its own faults and degenerate finding
    (:func:`.consistency.read_generation`, named after the run)."""

    text: str
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float | None, ...] | None = None
    finish_reason: str | None = None
    faults: tuple[Fault, ...] = ()
    degenerate: Degenerate | None = None
    tokens: SideTokens = field(default_factory=SideTokens, compare=False, repr=False)
    """Its token texts, top-k and full rows, for the margins of a divergence
    (:mod:`.ties`)."""

    @property
    def key(self) -> tuple[Any, ...]:
        return output_key(self.text, self.token_ids)


def run_output(generation: Generation, run: int) -> RunOutput:
    """Run ``run`` of a prompt as :func:`summarize_runs` reads it: the generation's text, ids,
    reported logprobs (:func:`.consistency.reported_logprobs`), finish reason and its own
    faults and degenerate finding, named ``run <run>`` (:func:`.consistency.read_generation`)."""
    ids = generation.token_ids
    reported = reported_logprobs(generation.chosen_logprobs, generation.top_logprobs)
    reading = read_generation(f"run {run}", generation)
    return RunOutput(
        generation.text,
        tuple(ids) if ids is not None else None,
        tuple(reported) if reported is not None else None,
        generation.finish_reason,
        tuple(reading.faults),
        reading.degenerate,
        side_tokens(generation),
    )


def side_tokens(generation: Generation) -> SideTokens:
    """What a generation exposes for the margins of a divergence (:mod:`.ties`): its ids,
    token texts, reported chosen logprobs, top-k and full rows."""
    return SideTokens(
        ids=generation.token_ids,
        texts=generation.token_texts,
        chosen=reported_logprobs(generation.chosen_logprobs, generation.top_logprobs),
        top=generation.top_logprobs,
        top_keys=generation.top_keys,
        full=generation.full_logprobs,
    )


def output_key(text: str, token_ids: Sequence[int] | None) -> tuple[Any, ...]:
    """The identity of an output: its token ids (None when not known) and its text, so two
    runs of one backend share a key exactly when :func:`.sameness.compare_outputs` calls them
    the same."""
    return (tuple(token_ids) if token_ids is not None else None, text)


@dataclass
class DistinctOutput:
    """One distinct output among the runs of a prompt (as recorded in its item's data)."""

    text: str
    """The output's text."""
    token_ids: list[int] | None
    """Its token ids; None when the backend gives none."""
    count: int
    """How many runs gave it."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """A non-modal output's first divergent token from the modal output, labelled
    (:mod:`.ties`: the margins of the modal output's first run and this output's first run
    under their own logprobs); absent for the modal output and when the outputs differ only
    in text."""
    after_tie: AfterTie | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Under ``fail_on: decisive``, a near-tie output judged past its near-tie
    (:mod:`.past_tie`: both outputs teacher-forced); absent otherwise."""


@dataclass
class DeterminismSummary:
    """N runs of one prompt, summarised.

    ``modal_share = modal_count / runs`` where ``modal_count`` is the number of runs equal to
    the most frequent output and ``runs`` counts errored runs too (an error is a failed run,
    never dropped from the denominator). ``distinct`` counts distinct successful outputs.
    ``first_divergences[i]`` is the first index (token, else character) where run ``i``
    differs from the modal output; None when it equals it or errored.
    ``max_logprob_drift`` is ``max_g max_t (max_r lp[r][t] - min_r lp[r][t])`` over the
    groups ``g`` of at least two runs with identical tokens that expose logprobs; None when
    there is no such group. ``outputs`` are the distinct outputs, modal first, then by count
    and first appearance.
    """

    runs: int
    errors: int
    modal_count: int
    distinct: int
    first_divergences: list[int | None]
    max_logprob_drift: float | None
    outputs: list[DistinctOutput] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    degenerate: DegenerateScan = field(default_factory=DegenerateScan)
    """The successful runs' degenerate findings (:mod:`.degenerate`)."""

    @property
    def divergence_labels(self) -> list[str]:
        """The labels of the non-modal outputs' divergences (:mod:`.ties`)."""
        return [o.tie.divergence_label for o in self.outputs if o.tie is not None]

    @property
    def modal_share(self) -> float:
        return self.modal_count / self.runs if self.runs else 0.0

    @property
    def deterministic(self) -> bool:
        """Every run succeeded and gave the same output."""
        return self.runs > 0 and self.modal_count == self.runs


def _divergence(modal: RunOutput, run: RunOutput) -> int | None:
    return compare_outputs(modal.text, modal.token_ids, run.text, run.token_ids).first_divergence


def _tie(modal: RunOutput, run: RunOutput, tie_margin: float) -> TieDivergence | None:
    """The labelled first divergent token of ``run`` from ``modal`` (token ids, else token
    texts); None when they differ only in text."""
    verdict = compare_outputs(
        modal.text, modal.token_ids, run.text, run.token_ids, modal.tokens.texts, run.tokens.texts
    )
    if verdict.divergence_unit != "token" or verdict.first_divergence is None:
        return None
    return tie_divergence(modal.tokens, run.tokens, verdict.first_divergence, tie_margin)


def summarize_runs(
    runs: Sequence[RunOutput | None], tie_margin: float = DEFAULT_TIE_MARGIN
) -> DeterminismSummary:
    """Summarise repeated runs of one prompt; ``None`` marks a run that errored. Each
    non-modal output's divergence from the modal one is labelled at ``tie_margin``."""
    groups: dict[tuple[Any, ...], list[RunOutput]] = {}
    for run in runs:
        if run is not None:
            groups.setdefault(run.key, []).append(run)
    # Stable sort: equal counts keep first-appearance order (dicts preserve insertion).
    ordered = sorted(groups.values(), key=len, reverse=True)
    modal = ordered[0][0] if ordered else None
    divergences = [
        None if run is None or modal is None else _divergence(modal, run) for run in runs
    ]
    return DeterminismSummary(
        runs=len(runs),
        errors=sum(run is None for run in runs),
        modal_count=len(ordered[0]) if ordered else 0,
        distinct=len(ordered),
        first_divergences=divergences,
        max_logprob_drift=_max_drift(ordered),
        outputs=[
            DistinctOutput(
                text=group[0].text,
                token_ids=list(group[0].token_ids) if group[0].token_ids is not None else None,
                count=len(group),
                tie=None if n == 0 or modal is None else _tie(modal, group[0], tie_margin),
            )
            for n, group in enumerate(ordered)
        ],
        faults=[f for run in runs if run is not None for f in run.faults] + _empty(runs),
        degenerate=DegenerateScan.of([run.degenerate for run in runs if run is not None]),
    )


def _empty(runs: Sequence[RunOutput | None]) -> list[Fault]:
    """``empty generation: runs 1, 3 generated no tokens while run 0 generated 3``."""
    done = [(i, r) for i, r in enumerate(runs) if r is not None]
    empty = [i for i, r in done if is_empty(r.text, r.token_ids, r.finish_reason)]
    full = [(i, r) for i, r in done if i not in empty]
    if not empty or not full:
        return []
    first, other = full[0]
    sample = runs[empty[0]]
    assert sample is not None
    names = ", ".join(str(i) for i in empty)
    fault = empty_fault(
        (sample.text, sample.token_ids, sample.finish_reason),
        (other.text, other.token_ids, other.finish_reason),
        a_name=f"run{'s' if len(empty) > 1 else ''} {names}",
        b_name=f"run {first}",
    )
    return [] if fault is None else [fault]


def spread(values: Sequence[float]) -> float:
    """``max - min`` of logprobs at one position, failing closed: 0.0 when all are equal
    (``-inf`` included), NaN when any is NaN, ``inf`` for ``-inf`` beside a finite value."""
    if any(math.isnan(v) for v in values):
        return math.nan
    if all(v == values[0] for v in values):
        return 0.0
    return max(values) - min(values)


def _max_drift(groups: Sequence[Sequence[RunOutput]]) -> float | None:
    drifts = []
    for group in groups:
        series = [r.logprobs for r in group if r.logprobs is not None]
        if len(series) < 2 or len({len(s) for s in series}) != 1:
            continue
        columns = [
            spread(reported)
            for column in zip(*series, strict=True)
            if (reported := [v for v in column if v is not None])
        ]
        worst = strict_max(columns)
        drifts.append(0.0 if worst is None else worst)
    return strict_max(drifts)


def logprob_diff(
    a: Sequence[float | None] | None, b: Sequence[float | None] | None, upto: int | None
) -> float | None:
    """``max_t |a[t] - b[t]|`` over the positions before ``upto`` (the first divergence; None:
    all positions both have), left out where either side reported no value (None); failing
    closed (:func:`spread`: NaN when either is NaN, 0.0 for equal values). None when either
    side exposes no logprobs or no position is compared."""
    if a is None or b is None:
        return None
    n = min(len(a), len(b)) if upto is None else min(upto, len(a), len(b))
    diffs = [
        spread([x, y]) for x, y in zip(a[:n], b[:n], strict=True) if x is not None and y is not None
    ]
    return strict_max(diffs)


def determinism_score(
    summaries: Sequence[DeterminismSummary], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Suite determinism score and its interval: ``(score, low, high)``.

    ``score = mean_p modal_share_p`` over prompts ``p``; the interval is the Wilson score
    interval of the pooled proportion ``sum_p modal_count_p / sum_p runs_p`` (equal to the
    score when every prompt has the same number of runs), which treats runs as independent.
    No prompts give ``(0.0, 0.0, 1.0)``.
    """
    if not summaries:
        return (0.0, 0.0, 1.0)
    score = sum(s.modal_share for s in summaries) / len(summaries)
    low, high = wilson_interval(
        sum(s.modal_count for s in summaries), sum(s.runs for s in summaries), confidence
    )
    return (score, low, high)
