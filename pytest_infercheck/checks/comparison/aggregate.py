"""Suite-level statistics of a comparison and the suite gates.

- KL: mean ± standard error clustered by prompt, median, p90, p99, max over all positions.
- same-top rate: share of positions where both argmaxes agree (pooled).
- delta-p: p_test - p_base of the baseline's chosen token, mean and RMS (pooled).
- flips: counted over prompts with an answer kind; rate with its Wilson interval; McNemar's
  exact p-value on correct->wrong vs wrong->correct.
- failures: prompts that broke a per-item threshold (or have a fail-closed problem).
- problems: the prompts whose numbers are unusable (non-finite KL or logprobs, rows that do
  not normalise, an empty generation against a non-empty one), one line per kind of problem
  naming the prompts; each line is a suite violation of its own.
- divergences: the prompts whose outputs diverge, counted by label (``near-tie``,
  ``decisive``, ``unknown``), and the largest noise floor (:mod:`~pytest_infercheck.metrics.
  ties`).
- a sweep's degradation cliff (:func:`degradation_cliff`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ...metrics.faults import aggregate_faults
from ...metrics.finite import strict_max
from ...metrics.stats import mcnemar_exact, rms, summarize, wilson_interval
from ...metrics.ties import count_labels
from ...records import OMIT_WHEN_EMPTY, Measured
from ...render.text import counted
from ...verdict.gate import judge_gates
from ...verdict.measure import MeasureValue, Reading, Unmeasured
from .buckets import BucketStat, bucket_line, bucket_stats
from .evidence import LOWER_BOUND_METHODS, NO_ARGMAX_METHODS, TEXT_ONLY
from .judge import item_verdict
from .prompt import SELF_CHECK, PromptComparison, SelfCheckRecord
from .spec import DEFAULT_CLIFF_ALPHA, GATES, KL_MEAN, SAME_TOP_RATE, Thresholds
from .verdicts import item_faults

__all__ = [
    "SELF_CHECK",
    "ComparisonAggregateRecord",
    "SelfCheckRecord",
    "SuiteAggregate",
    "SweepAggregateRecord",
    "aggregate",
    "level_measures",
]


class CliffLevel(NamedTuple):
    """One level of a sweep as the cliff sees it (the self-check first)."""

    label: str
    """The level (its test side's label), or ``self-check``."""
    failed: frozenset[str]
    """Prompt ids that failed at this level (at the self-check: did not reproduce)."""
    n_prompts: int
    kl_mean: float
    """Pooled mean KL (NaN: non-finite values, or not measured)."""
    kl_se: float
    kl_measured: bool
    """Whether the level has a mean KL at all (False: no position was compared, or a
    self-check whose baseline did not reproduce)."""


@dataclass(frozen=True)
class CliffStep:
    """The cliff's evidence at one level of a sweep, against the previous level (the first
    step, the self-check, against nothing)."""

    level: str
    """The level's test side (``q4@local``), or ``self-check`` (``baseline`` when the sweep's
    self-check is off, and the first level is compared with a clean baseline)."""
    n_prompts: int
    """Prompts compared at this level."""
    failed: list[str]
    """The prompts that failed at this level, sorted (at the self-check: those whose two
    baseline generations differ)."""
    kl_mean: Measured
    kl_se: Measured
    """Pooled mean KL and its standard error clustered by prompt (0, 0 at a self-check that
    reproduced the baseline; NaN, ``null`` in JSON, when not measured or not finite)."""
    kl_within: bool | None
    """Whether the mean KL is within ``max_mean_kl`` (None: no such gate, or no mean KL at
    this level). A NaN mean KL is not within."""
    newly_failed: int
    """McNemar's b: prompts failed here and not at the previous level."""
    recovered: int
    """McNemar's c: prompts failed at the previous level and not here."""
    p_value: float
    """Exact two-sided McNemar p-value of (b, c) (1 for the first step)."""
    failures_rise: bool
    """b > c and p < alpha: the failed items rise significantly over the previous level's."""
    kl_crosses: bool
    """The mean KL crosses ``max_mean_kl`` here while the previous level's is within."""

    @property
    def n_failed(self) -> int:
        return len(self.failed)

    @property
    def is_cliff(self) -> bool:
        return self.failures_rise or self.kl_crosses


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
    """Prompts that broke a per-item threshold (or expected identical outputs that differ,
    :func:`~.gates.item_verdict`)."""
    n_identical: int | None = field(default=None, kw_only=True)
    """Prompts whose outputs are the same (their records' sameness verdict,
    :attr:`~.prompt.PromptComparison.identical`); None in a results file written before it
    was counted."""
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
    divergence_labels: dict[str, int] = field(default_factory=dict, kw_only=True)
    """Prompts whose outputs diverge token by token, by the first divergence's label
    (:mod:`~pytest_infercheck.metrics.ties`): ``{near-tie: n, decisive: m, unknown: k}``
    (empty in a results file written before it was counted)."""
    noise_floor: float | None = field(default=None, kw_only=True)
    """The largest of the prompts' noise floors (|delta logprob| of the chosen tokens where
    the sides agree), NaN when one is NaN; None when no prompt measured one."""
    problems: list[str] = field(default_factory=list)
    """Fail closed: one line per kind of problem found in the prompts
    (:func:`~.verdicts.item_faults`), naming them, e.g. ``non-finite KL in 2 of 60
    prompts: r003 (positions 2, 5), r007 (position 0)``; each is a suite violation."""
    answer_matrix: dict[str, int] = field(default_factory=dict, kw_only=True)
    """The flip matrix of the prompts with a reference answer whose baseline correctness is
    known (:func:`answer_matrix`): ``correct_to_correct``, ``correct_to_wrong``,
    ``wrong_to_correct``, ``wrong_to_wrong`` (a wrong answer unchanged counts there too);
    empty without such prompts, or in a results file written before it was counted."""
    buckets: list[BucketStat] = field(default_factory=list, kw_only=True, metadata=OMIT_WHEN_EMPTY)
    """KL, argmax flips and failed items by the prompts' bucket (:mod:`.buckets`; a
    ``context-ladder`` suite's lengths); empty when no prompt has a bucket."""
    violations: list[str] | None = field(default=None, kw_only=True)
    """The suite gates this side broke (:func:`aggregate_violations`), without the side's
    label: a sweep level fails for its own gates only. None in a results file written before
    they were recorded per side."""

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
    tests: list[str] = field(default_factory=list, kw_only=True)
    """The test sides' target labels in the user's order (a level of :attr:`levels` each,
    but a side none of whose items has a record)."""
    ungated: bool = field(default=False, kw_only=True)
    """The check writes no gate (:func:`~.gates.is_ungated`): it passes whatever its outputs
    are; said in every report and warned about."""
    replay: list[str] = field(default_factory=list, kw_only=True, metadata=OMIT_WHEN_EMPTY)
    """For a golden baseline: the engine it was recorded on and the live ones, a line
    (absent from the JSON otherwise)."""
    errored: list[str] = field(default_factory=list, kw_only=True, metadata=OMIT_WHEN_EMPTY)
    """The aggregate's violations that no side owns (items that errored,
    :func:`~..framework.items.errored_items`): they fail every side (absent from the JSON when
    none)."""


@dataclass(frozen=True)
class SweepAggregateRecord(ComparisonAggregateRecord):
    """The record of a sweep's ``aggregate`` item: a comparison aggregate and its cliff. Only
    a sweep's aggregate has the key ``cliff`` (its presence tells the two records apart)."""

    cliff: str
    """The degradation cliff (:func:`degradation_cliff`): the first level whose failed
    items rise significantly over the previous level's (exact McNemar test at
    :attr:`cliff_alpha`), or whose mean KL crosses ``max_mean_kl`` while the previous
    level's does not; the previous level of the first is the measured self-check. ``none``
    when no level qualifies."""
    cliff_alpha: float = DEFAULT_CLIFF_ALPHA
    """The significance level of the cliff's McNemar test (the sweep's ``cliff_alpha``)."""
    cliff_steps: list[CliffStep] = field(default_factory=list)
    """The cliff's evidence: the self-check, then every level in the user's order."""
    self_check: bool = field(default=True, kw_only=True)
    """Whether the sweep generates its baseline twice first (its ``self_check``); its
    ``self-check`` item's record then holds the cliff's first level."""


def sweep_cliff(
    first: CliffLevel,
    levels: list[SuiteAggregate],
    failed: list[frozenset[str]],
    thresholds: Thresholds,
    alpha: float = DEFAULT_CLIFF_ALPHA,
) -> tuple[str, list[CliffStep]]:
    """The cliff of a sweep (see :attr:`SweepAggregateRecord.cliff`) and its evidence:
    ``first`` is the self-check (:func:`self_check_level`), ``levels`` the aggregates of the
    sweep's levels and ``failed`` the prompts that failed at each, in the same order."""
    steps = [first]
    for agg, level_failed in zip(levels, failed, strict=True):
        steps.append(comparison_level(agg, level_failed))
    cliff, evidence = degradation_cliff(steps, alpha=alpha, max_mean_kl=thresholds.max_mean_kl)
    return cliff or "none", evidence


def aggregate(
    results: list[PromptComparison],
    thresholds: Thresholds,
    failed: Iterable[str] | None = None,
) -> SuiteAggregate:
    """Pool ``results`` (one per prompt of a suite) into a :class:`SuiteAggregate`;
    ``failed``: the prompt ids whose items failed (the items' verdicts; default: each record
    judged again, :func:`~.judge.item_verdict`). Its ``violations`` are its problems and the
    suite gates judged on :func:`level_measures` (as the framework judges them)."""
    if not results:
        raise ValueError("cannot aggregate an empty suite")
    if failed is None:
        failed = [r.prompt_id for r in results if item_verdict(r, thresholds)]
    failed_ids = set(failed)
    kl = summarize([np.asarray(r.kl_per_position, dtype=np.float64) for r in results])
    same_top = [s for r in results for s in r.same_top]
    delta_p = [d for r in results for d in r.delta_p]
    answered = [r for r in results if r.answer_kind is not None]
    flips = Counter(r.flip for r in answered)
    n_flips = sum(1 for r in answered if r.is_flip)
    low, high = wilson_interval(n_flips, len(answered), thresholds.flips.confidence)
    floors = [r.noise_floor for r in results if r.noise_floor is not None]
    agg = SuiteAggregate(
        baseline=results[0].baseline,
        test=results[0].test,
        n_prompts=len(results),
        n_failed=sum(1 for r in results if r.prompt_id in failed_ids),
        n_identical=sum(1 for r in results if r.identical),
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
        problems=aggregate_faults([(r.prompt_id, item_faults(r)) for r in results]),
        divergence_labels=count_labels([r.divergence_label for r in results]),
        noise_floor=strict_max(floors) if floors else None,
        answer_matrix=answer_matrix(results),
        buckets=bucket_stats(results, failed_ids),
    )
    return dataclasses.replace(agg, violations=aggregate_violations(agg, thresholds))


MATRIX_CELLS = ("correct_to_correct", "correct_to_wrong", "wrong_to_correct", "wrong_to_wrong")


def answer_matrix(results: Iterable[PromptComparison]) -> dict[str, int]:
    """Correct or wrong before (the baseline's answer against the reference) x after (the
    test side's), counted over the prompts whose :attr:`~.prompt.PromptComparison.
    base_correct` is known: after is wrong for ``correct_to_wrong`` and ``wrong_to_wrong``,
    correct for ``wrong_to_correct``, and the same as before for ``unchanged``. Every cell
    is present (0 when empty); empty when no prompt is counted."""
    counts = dict.fromkeys(MATRIX_CELLS, 0)
    counted = 0
    for r in results:
        if r.base_correct is None:
            continue
        after = {"correct_to_wrong": False, "wrong_to_wrong": False, "wrong_to_correct": True}
        test_correct = after.get(r.flip, r.base_correct)
        before = "correct" if r.base_correct else "wrong"
        counts[f"{before}_to_{'correct' if test_correct else 'wrong'}"] += 1
        counted += 1
    return counts if counted else {}


def aggregate_violations(agg: SuiteAggregate, thresholds: Thresholds) -> list[str]:
    """A side's problems (each a violation of its own, whatever the thresholds), then the
    suite gates judged on :func:`level_measures`, as the framework judges them."""
    gates = judge_gates(GATES, thresholds, level_measures(agg, thresholds), "suite")
    return [*agg.problems, *(g.text for g in gates)]


def level_measures(agg: SuiteAggregate, thresholds: Thresholds) -> dict[str, MeasureValue]:
    """What the suite gates read of one test side (:data:`.spec.GATES`):

    - ``kl_mean``: the pooled mean ``KL_t`` (a lower bound when a prompt's method is), not
      measured when a prompt was compared by text only (its KL is unknown, so the mean over
      the others is not the suite's) or no position was compared;
    - ``same_top_rate``: the pooled argmax agreement, not measured when a prompt was compared
      by a method without a teacher-forced argmax (``top-k-lower-bound``, ``text``);
    - ``flip_rate`` and ``flip_rate_high`` (its upper Wilson bound at ``flips.confidence``),
      not measured when no prompt has an answer kind."""
    out: dict[str, MeasureValue] = {}
    methods = agg.methods
    text = methods.get(TEXT_ONLY, 0)
    no_argmax = {m: n for m, n in methods.items() if m in NO_ARGMAX_METHODS and n}
    if text:
        out[KL_MEAN] = Unmeasured(
            f"method text, {text} of {agg.n_prompts} prompts compared by text only: no KL over "
            "the suite"
        )
    elif agg.kl_n == 0:
        out[KL_MEAN] = Unmeasured("no position was compared")
    else:
        bound = any(n and m in LOWER_BOUND_METHODS for m, n in methods.items())
        out[KL_MEAN] = Reading(agg.kl_mean, "lower bound" if bound else "")
    if no_argmax:
        out[SAME_TOP_RATE] = Unmeasured(
            f"method {', '.join(sorted(no_argmax))}: {sum(no_argmax.values())} of "
            f"{agg.n_prompts} prompts have no teacher-forced argmax"
        )
    elif agg.same_top_rate is None:
        out[SAME_TOP_RATE] = Unmeasured("no position was compared")
    else:
        out[SAME_TOP_RATE] = agg.same_top_rate
    if agg.flip_rate is None:
        none = Unmeasured("no prompt of the suite has an answer kind: no flip rate")
        out["flip_rate"] = out["flip_rate_high"] = none
    else:
        counted = f"{agg.n_flips}/{agg.n_answered} answered"
        out["flip_rate"] = Reading(agg.flip_rate, counted)
        out["flip_rate_high"] = Reading(
            agg.flip_rate_high,
            f"upper {thresholds.flips.confidence:.0%} Wilson bound, {counted}",
        )
    return out


def comparison_level(agg: SuiteAggregate, failed: frozenset[str]) -> CliffLevel:
    """A sweep level for the cliff: its failed prompts (as counted in ``agg.n_failed``) and
    its mean KL."""
    return CliffLevel(agg.test, failed, agg.n_prompts, agg.kl_mean, agg.kl_se, agg.kl_n > 0)


def self_check_level(failed: Iterable[str], n_prompts: int, ran: bool = True) -> CliffLevel:
    """The cliff's first level: the self-check, whose failed prompts are those whose two
    baseline generations differ. Its mean KL is 0 (± 0) when every prompt reproduced (the
    baseline against itself) and not measured otherwise. When the sweep's self-check is off
    (``ran=False``) the first level is a clean baseline (nothing failed, KL 0), named
    ``baseline``."""
    failed = frozenset(failed)
    clean = not failed
    label = SELF_CHECK if ran else "baseline"
    kl = 0.0 if clean else math.nan
    return CliffLevel(label, failed, n_prompts, kl, kl, clean)


def degradation_cliff(
    levels: list[CliffLevel],
    *,
    alpha: float = DEFAULT_CLIFF_ALPHA,
    max_mean_kl: float | None = None,
) -> tuple[str | None, list[CliffStep]]:
    """The degradation cliff of a sweep and its evidence.

    ``levels`` starts with the self-check (:func:`self_check_level`), then the sweep's
    levels in the user's order; levels share their prompts. Between each level and the
    previous one:

    - failed items: ``b`` = prompts failed here and not at the previous level, ``c`` = the
      reverse; the exact two-sided McNemar p-value of (b, c) (levels share prompts, so the
      test is paired); they *rise significantly* when ``b > c`` and ``p < alpha``;
    - KL: the mean KL *crosses* ``max_mean_kl`` (when set) when the previous level's is
      within it (``<=``) and this level's is not (a NaN mean is not within; a level with no
      mean KL neither crosses nor lets the next level cross).

    The cliff is the first level where either happens; None when no level qualifies. A rate
    rising from 0 is not enough on its own: one failed prompt against none gives
    ``p = 1``, and with nothing failed before at least 6 newly failed prompts are needed at
    ``alpha = 0.05`` (``p = 2 / 2^6``).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")

    def within(level: CliffLevel) -> bool | None:
        if max_mean_kl is None or not level.kl_measured:
            return None
        return bool(level.kl_mean <= max_mean_kl)  # NaN: False

    steps: list[CliffStep] = []
    cliff: str | None = None
    previous: CliffLevel | None = None
    for level in levels:
        b = c = 0
        p = 1.0
        crosses = False
        if previous is not None:
            b = len(level.failed - previous.failed)
            c = len(previous.failed - level.failed)
            p = mcnemar_exact(b, c)
            crosses = within(previous) is True and within(level) is False
        step = CliffStep(
            level=level.label,
            n_prompts=level.n_prompts,
            failed=sorted(level.failed),
            kl_mean=level.kl_mean,
            kl_se=level.kl_se,
            kl_within=within(level),
            newly_failed=b,
            recovered=c,
            p_value=p,
            failures_rise=previous is not None and b > c and p < alpha,
            kl_crosses=crosses,
        )
        steps.append(step)
        if cliff is None and step.is_cliff:
            cliff = level.label
        previous = level
    return cliff, steps


def _kl(step: CliffStep) -> str:
    """``0.01518 ± 0.0084``; ``NaN`` (not measured, or not finite)."""
    if math.isnan(step.kl_mean):
        return "NaN"
    se = "NaN" if math.isnan(step.kl_se) else f"{step.kl_se:.2g}"
    return f"{step.kl_mean:.4g} ± {se}"


def cliff_evidence(cliff: str, steps: list[CliffStep], alpha: float) -> str:
    """One line: the cliff and why, e.g. ``q4@local: failed items 0 -> 9 of 60 (9 newly
    failed, 0 recovered; exact McNemar p = 0.0039 < alpha 0.05); mean KL 0.00028 ± 0.0001
    -> 0.01518 ± 0.0084 crosses max_mean_kl``; or ``none`` and what no level showed."""
    at = next((i for i, s in enumerate(steps) if i > 0 and s.level == cliff), None)
    if at is None:
        return (
            f"none (no level's failed items rise significantly at alpha {alpha:g}, and no "
            "level's mean KL crosses max_mean_kl)"
        )
    prev, step = steps[at - 1], steps[at]
    parts = []
    mcnemar = (
        f"{step.newly_failed} newly failed, {step.recovered} recovered; exact McNemar p = "
        f"{step.p_value:.3g} {'<' if step.p_value < alpha else '>='} alpha {alpha:g}"
    )
    parts.append(f"failed items {prev.n_failed} -> {step.n_failed} of {step.n_prompts} ({mcnemar})")
    kl = f"mean KL {_kl(prev)} -> {_kl(step)}"
    if step.kl_crosses:
        kl += " crosses max_mean_kl"
    parts.append(kl)
    return f"{cliff}: " + "; ".join(parts)


def cliff_table(cliff: str, steps: list[CliffStep], alpha: float) -> list[str]:
    """The cliff's evidence level by level, for the aggregate's text."""
    lines = []
    for i, step in enumerate(steps):
        within = {None: "", True: ", within max_mean_kl", False: ", above max_mean_kl"}
        against = (
            ""
            if i == 0
            else f", vs previous +{step.newly_failed} -{step.recovered} "
            f"(McNemar p = {step.p_value:.3g})"
        )
        mark = "  <- cliff" if i > 0 and step.level == cliff else ""
        lines.append(
            f"  {step.level}: {step.n_failed}/{step.n_prompts} failed{against}; "
            f"mean KL {_kl(step)}{within[step.kl_within]}{mark}"
        )
    return [f"cliff evidence (alpha {alpha:g}):", *lines]


def format_aggregate(agg: SuiteAggregate) -> str:
    """A few lines with the suite's numbers, for the aggregate item's report."""
    rate = "n/a" if agg.flip_rate is None else f"{agg.flip_rate:.3f}"
    lines = [
        f"{agg.test} vs {agg.baseline}: {agg.n_prompts} prompts, {agg.n_failed} failed items",
        f"KL mean {agg.kl_mean:.6g} ± {agg.kl_se:.2g} (SE, by prompt), median "
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
        f"{agg.flip_rate_high:.3f}) {counted(agg.flips)}; McNemar p = {agg.mcnemar_p:.3g}"
    )
    lines.append(f"severity {counted(agg.severities)}; methods {counted(agg.methods)}")
    if any(agg.divergence_labels.values()) or agg.noise_floor is not None:
        floor = "n/a" if agg.noise_floor is None else f"{agg.noise_floor:.4g}"
        lines.append(f"divergences {counted(agg.divergence_labels)}; noise floor {floor} nats")
    if agg.buckets:
        lines.append(bucket_line(agg.buckets))
    lines.extend(f"problem: {line}" for line in agg.problems)
    return "\n".join(lines)
