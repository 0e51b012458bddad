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
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ...metrics.stats import mcnemar_exact, rms, summarize, wilson_interval
from ...specs import Thresholds
from .prompt import PromptComparison
from .verdicts import item_violations


@dataclass
class SuiteAggregate:
    """Aggregate numbers of one check x suite (x test model, for sweeps); plain types."""

    baseline: str
    test: str
    n_prompts: int
    n_failed: int
    kl_n: int
    kl_mean: float
    kl_se: float
    kl_median: float
    kl_p90: float
    kl_p99: float
    kl_max: float
    same_top_rate: float | None
    delta_p_mean: float | None
    delta_p_rms: float | None
    n_answered: int
    flips: dict[str, int]
    n_flips: int
    flip_rate: float | None
    flip_rate_low: float
    flip_rate_high: float
    mcnemar_p: float
    severities: dict[str, int]
    methods: dict[str, int]

    @property
    def failure_rate(self) -> float:
        return self.n_failed / self.n_prompts if self.n_prompts else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
