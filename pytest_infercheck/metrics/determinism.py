"""Repeatability of generations: determinism across runs, and agreement of two generations
(a prompt alone vs. inside a batch).

Two outputs are the same by the one rule of :mod:`.sameness`: equal text, and equal token
ids where the backend gives them. Pure functions on plain values; no engine, no numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .sameness import compare_outputs
from .stats import wilson_interval

__all__ = [
    "DeterminismSummary",
    "DistinctOutput",
    "RunOutput",
    "determinism_score",
    "logprob_diff",
    "output_key",
    "summarize_runs",
]


@dataclass(frozen=True)
class RunOutput:
    """One successful run: its text, token ids (None when the backend gives none) and the
    log-probabilities of its chosen tokens (None when not exposed)."""

    text: str
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        return output_key(self.text, self.token_ids)


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

    @property
    def modal_share(self) -> float:
        return self.modal_count / self.runs if self.runs else 0.0

    @property
    def deterministic(self) -> bool:
        """Every run succeeded and gave the same output."""
        return self.runs > 0 and self.modal_count == self.runs


def _divergence(modal: RunOutput, run: RunOutput) -> int | None:
    return compare_outputs(modal.text, modal.token_ids, run.text, run.token_ids).first_divergence


def summarize_runs(runs: Sequence[RunOutput | None]) -> DeterminismSummary:
    """Summarise repeated runs of one prompt; ``None`` marks a run that errored."""
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
            )
            for group in ordered
        ],
    )


def _max_drift(groups: Sequence[Sequence[RunOutput]]) -> float | None:
    drifts = [
        max((max(column) - min(column) for column in zip(*series, strict=True)), default=0.0)
        for group in groups
        if len(series := [r.logprobs for r in group if r.logprobs is not None]) >= 2
        and len({len(s) for s in series}) == 1
    ]
    return max(drifts) if drifts else None


def logprob_diff(
    a: Sequence[float] | None, b: Sequence[float] | None, upto: int | None
) -> float | None:
    """``max_t |a[t] - b[t]|`` over the positions before ``upto`` (the first divergence; None:
    all positions both have). None when either side exposes no logprobs or no position is
    compared."""
    if a is None or b is None:
        return None
    n = min(len(a), len(b)) if upto is None else min(upto, len(a), len(b))
    return max((abs(a[t] - b[t]) for t in range(n)), default=None)


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
