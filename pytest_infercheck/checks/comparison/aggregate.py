"""Suite-level statistics of a comparison and the suite gates.

- KL: mean +- standard error clustered by prompt, median, p90, p99, max over all positions.
- same-top rate: share of positions where both argmaxes agree (pooled).
- delta-p: p_test - p_base of the baseline's chosen token, mean and RMS (pooled).
- flips: counted over prompts with an answer kind; rate with its Wilson interval; McNemar's
  exact p-value on correct->wrong vs wrong->correct.
- failures: prompts that broke a per-item threshold.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...metrics.stats import mcnemar_exact, rms, summarize, wilson_interval
from ...records import Measured
from ...specs import Thresholds
from .prompt import PromptComparison
from .verdicts import item_violations

SELF_CHECK = "self-check"
"""The sweep's first item (the baseline generated twice), and the cliff's level 0."""


@dataclass(frozen=True)
class SuiteAggregate:
    """The numbers of one check x suite x test side (a sweep has one per level): an entry of
    the aggregate record's ``levels``. KL values are in nats; ``Measured`` values are NaN
    (``null`` in JSON) when no position was compared."""

    baseline: str
    """The baseline's target label."""
    test: str
    """The test side's target label (a sweep's level)."""
    n_prompts: int
    """Prompts compared."""
    n_failed: int
    """Prompts that broke a per-item threshold."""
    kl_n: int
    """Positions pooled into the KL statistics."""
    kl_mean: Measured
    """Mean KL_t over the pooled positions."""
    kl_se: Measured
    """Standard error of :attr:`kl_mean`, clustered by prompt."""
    kl_median: Measured
    kl_p90: Measured
    kl_p99: Measured
    kl_max: Measured
    """Median, 90th and 99th percentile and maximum of KL_t over the pooled positions."""
    same_top_rate: float | None
    """Share of pooled positions where both argmaxes agree (None without such positions)."""
    delta_p_mean: float | None
    """Mean of p_test - p_base of the baseline's chosen token (None without positions)."""
    delta_p_rms: float | None
    """Root mean square of the same (None without positions)."""
    n_answered: int
    """Prompts with an answer kind (whose answers were judged)."""
    flips: dict[str, int]
    """Answered prompts by flip kind (``unchanged``, ``correct_to_wrong``, ...)."""
    n_flips: int
    """Answered prompts whose answer flipped."""
    flip_rate: float | None
    """``n_flips / n_answered`` (None without answered prompts)."""
    flip_rate_low: float
    flip_rate_high: float
    """The flip rate's Wilson interval at the thresholds' confidence (0, 1 without answers)."""
    mcnemar_p: float
    """McNemar's exact two-sided p-value on correct->wrong vs wrong->correct."""
    severities: dict[str, int]
    """Prompts by output severity (``identical``, ``minor``, ...)."""
    methods: dict[str, int]
    """Prompts by comparison method (``teacher-forced``, ``text``, ...)."""

    @property
    def failure_rate(self) -> float:
        return self.n_failed / self.n_prompts if self.n_prompts else 0.0


@dataclass(frozen=True)
class ComparisonAggregateRecord:
    """The record of a compare or diff ``aggregate`` item (a sweep's is a
    :class:`SweepAggregateRecord`)."""

    check: str
    """The kind (``compare``, ``diff``, ``sweep``)."""
    suite: str
    """The suite's name."""
    levels: list[SuiteAggregate]
    """One entry per test side, in the user's order (one for compare)."""
    engines: dict[str, dict[str, Any]]
    """Engine identities (backend kind, versions, model path, ...) by target label, the
    baseline's first."""


@dataclass(frozen=True)
class SweepAggregateRecord(ComparisonAggregateRecord):
    """The record of a sweep's ``aggregate`` item: a comparison aggregate and its cliff. Only
    a sweep's aggregate has the key ``cliff`` (its presence tells the two records apart)."""

    cliff: str
    """The degradation cliff: the first level whose failure or flip rate more than doubles
    the previous level's (:func:`degradation_cliff`, from the self-check at 0, 0), or
    ``none``."""


def sweep_cliff(levels: list[SuiteAggregate]) -> str:
    """The cliff of a sweep's levels (see :attr:`SweepAggregateRecord.cliff`)."""
    steps = [(SELF_CHECK, 0.0, 0.0)]
    steps += [(a.test, a.failure_rate, a.flip_rate or 0.0) for a in levels]
    return degradation_cliff(steps) or "none"


def aggregate(results: list[PromptComparison], thresholds: Thresholds) -> SuiteAggregate:
    """Pool ``results`` (one per prompt of a suite) into a :class:`SuiteAggregate`."""
    if not results:
        raise ValueError("cannot aggregate an empty suite")
    kl = summarize([np.asarray(r.kl_per_position, dtype=np.float64) for r in results])
    same_top = [s for r in results for s in r.same_top]
    delta_p = [d for r in results for d in r.delta_p]
    answered = [r for r in results if r.answer_kind is not None]
    flips = Counter(r.flip for r in answered)
    n_flips = sum(1 for r in answered if r.is_flip)
    low, high = wilson_interval(n_flips, len(answered), thresholds.flips.confidence)
    return SuiteAggregate(
        baseline=results[0].baseline,
        test=results[0].test,
        n_prompts=len(results),
        n_failed=sum(1 for r in results if item_violations(r, thresholds)),
        kl_n=kl.n,
        kl_mean=kl.mean,
        kl_se=kl.se,
        kl_median=kl.median,
        kl_p90=kl.p90,
        kl_p99=kl.p99,
        kl_max=kl.max,
        same_top_rate=sum(same_top) / len(same_top) if same_top else None,
        delta_p_mean=float(np.mean(delta_p)) if delta_p else None,
        delta_p_rms=rms(np.asarray(delta_p)) if delta_p else None,
        n_answered=len(answered),
        flips=dict(sorted(flips.items())),
        n_flips=n_flips,
        flip_rate=n_flips / len(answered) if answered else None,
        flip_rate_low=low,
        flip_rate_high=high,
        mcnemar_p=mcnemar_exact(flips["correct_to_wrong"], flips["wrong_to_correct"]),
        severities=dict(sorted(Counter(r.severity for r in results).items())),
        methods=dict(sorted(Counter(r.method for r in results).items())),
    )


def aggregate_violations(agg: SuiteAggregate, thresholds: Thresholds) -> list[str]:
    """Suite gates broken by ``agg``."""
    out: list[str] = []
    flips = thresholds.flips
    if flips.max_rate is not None and agg.flip_rate is not None:
        measured = agg.flip_rate_high if flips.gate == "upper" else agg.flip_rate
        if measured > flips.max_rate:
            what = (
                f"upper {flips.confidence:.0%} Wilson bound {agg.flip_rate_high:.4f}"
                if flips.gate == "upper"
                else f"{agg.flip_rate:.4f}"
            )
            out.append(
                f"flip rate {agg.n_flips}/{agg.n_answered}: {what} > max_rate {flips.max_rate:g}"
            )
    if (
        thresholds.max_mean_kl is not None
        and not math.isnan(agg.kl_mean)
        and agg.kl_mean > thresholds.max_mean_kl
    ):
        out.append(
            f"mean KL {agg.kl_mean:.6g} +- {agg.kl_se:.2g} > max_mean_kl {thresholds.max_mean_kl:g}"
        )
    if (
        thresholds.min_same_top is not None
        and agg.same_top_rate is not None
        and agg.same_top_rate < thresholds.min_same_top
    ):
        out.append(
            f"same-top rate {agg.same_top_rate:.4f} < min_same_top {thresholds.min_same_top:g}"
        )
    return out


def degradation_cliff(levels: list[tuple[str, float, float]]) -> str | None:
    """The first level whose failure or flip rate more than doubles the previous level's.

    ``levels`` is ``(label, failure_rate, flip_rate)`` in the user's order, starting with the
    baseline's self-check (normally 0, 0). A rate rising from 0 to anything above 0 counts as
    more than doubling. None when no level qualifies.
    """
    for (_, prev_fail, prev_flip), (label, fail, flip) in itertools.pairwise(levels):
        if fail > 2 * prev_fail or flip > 2 * prev_flip:
            return label
    return None


def format_aggregate(agg: SuiteAggregate) -> str:
    """A few lines with the suite's numbers, for the aggregate item's report."""
    rate = "n/a" if agg.flip_rate is None else f"{agg.flip_rate:.3f}"
    lines = [
        f"{agg.test} vs {agg.baseline}: {agg.n_prompts} prompts, {agg.n_failed} failed items",
        f"KL mean {agg.kl_mean:.6g} +- {agg.kl_se:.2g} (SE, by prompt), median "
        f"{agg.kl_median:.4g}, p90 {agg.kl_p90:.4g}, p99 {agg.kl_p99:.4g}, max {agg.kl_max:.4g}"
        f" over {agg.kl_n} positions",
    ]
    if agg.same_top_rate is not None:
        lines.append(
            f"same-top rate {agg.same_top_rate:.4f}; delta-p mean {agg.delta_p_mean:+.4g}, "
            f"RMS {agg.delta_p_rms:.4g}"
        )
    lines.append(
        f"flips {agg.n_flips}/{agg.n_answered} = {rate} (CI {agg.flip_rate_low:.3f}-"
        f"{agg.flip_rate_high:.3f}) {agg.flips}; McNemar p = {agg.mcnemar_p:.3g}"
    )
    lines.append(f"severity {agg.severities}; methods {agg.methods}")
    return "\n".join(lines)
