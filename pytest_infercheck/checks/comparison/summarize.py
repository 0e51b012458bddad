"""The aggregate of a comparison check x suite, a pure function of its items' records
(:attr:`~..protocol.CheckKind.summarize`): the live run calls it on the records of its items,
``pytest-infercheck report`` on the union of a sharded run's records, so both give the same
aggregate.

- per test side (in the user's order, :attr:`ComparisonContext.tests`): its prompts' records
  pooled (:func:`.aggregate.aggregate`) with its suite gates (:func:`.aggregate.
  aggregate_violations`, the level's ``violations``), each violation prefixed by the side;
- errored items (no record) are a violation of every side (the record's ``errored``), and so
  is a side without any record;
- ``ungated`` when the check writes no gate (:func:`.gates.is_ungated`);
- a sweep (:func:`summarize_sweep`) adds its degradation cliff, whose first level is read
  from the ``self-check`` item's record (the prompts whose baseline did not reproduce).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ...records import OMIT_WHEN_EMPTY
from ..protocol import RecordedItem, Summary, errored_items, records_of
from .aggregate import (
    SELF_CHECK,
    CliffLevel,
    ComparisonAggregateRecord,
    SelfCheckRecord,
    SuiteAggregate,
    SweepAggregateRecord,
    aggregate,
    cliff_evidence,
    cliff_table,
    format_aggregate,
    self_check_level,
    sweep_cliff,
)
from .gates import is_ungated, ungated_reason
from .options import Thresholds
from .prompt import PromptComparison


@dataclass
class ComparisonContext:
    """What a comparison's aggregate takes besides its items' records (fields of
    :class:`~.aggregate.ComparisonAggregateRecord`)."""

    check: str
    """The kind (``compare``, ``sweep``, ``diff``)."""
    suite: str
    tests: list[str]
    """The test sides' target labels, in the user's order."""
    engines: dict[str, dict[str, Any]]
    replay: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """A golden baseline's replay line (:func:`~pytest_infercheck.golden.replay_lines`)."""


@dataclass
class SweepContext(ComparisonContext):
    """A sweep's context: a comparison's, its cliff's significance level and whether it
    checks its baseline first (fields of :class:`~.aggregate.SweepAggregateRecord`)."""

    cliff_alpha: float = field(kw_only=True)
    self_check: bool = field(kw_only=True)


AGGREGATE_PROPERTIES = (
    "n_prompts",
    "n_failed",
    "n_identical",
    "kl_mean",
    "kl_se",
    "kl_p99",
    "kl_max",
    "same_top_rate",
    "n_flips",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    "mcnemar_p",
    "noise_floor",
)


def aggregate_properties(aggregates: list[SuiteAggregate]) -> list[tuple[str, Any]]:
    """Scalar JUnit properties of a suite's aggregates: ``infercheck_kl_mean`` and so on; with
    several test sides (a sweep) each name carries the side: ``infercheck_q4@local_kl_mean``;
    the divergence labels' counts as ``infercheck_divergences_near_tie`` and so on."""
    properties: list[tuple[str, Any]] = []
    for agg in aggregates:
        prefix = "infercheck_" if len(aggregates) == 1 else f"infercheck_{agg.test}_"
        properties.extend((prefix + name, getattr(agg, name)) for name in AGGREGATE_PROPERTIES)
        properties.extend(
            (f"{prefix}divergences_{label.replace('-', '_')}", n)
            for label, n in agg.divergence_labels.items()
        )
    return properties


class _Compared(NamedTuple):
    """The test sides that have records: their aggregates and their prompts' records."""

    levels: list[SuiteAggregate]
    results: list[list[PromptComparison]]
    summary: Summary


def _compared(
    items: Sequence[RecordedItem], thresholds: Thresholds, context: ComparisonContext
) -> _Compared:
    results: list[PromptComparison] = records_of(items, "prompt")
    errored = errored_items(items)
    violations: list[str] = []
    levels: list[SuiteAggregate] = []
    per_level: list[list[PromptComparison]] = []
    texts: list[str] = []
    for test in dict.fromkeys(context.tests):
        mine = [r for r in results if r.test == test]
        if not mine:
            violations.append(f"{test}: no prompt of this side has a record")
            continue
        agg = aggregate(mine, thresholds)
        levels.append(agg)
        per_level.append(mine)
        texts.append(format_aggregate(agg))
        violations += [f"{agg.test}: {v}" for v in agg.violations or []]
    texts += context.replay
    ungated = is_ungated(thresholds)
    if ungated:
        identical = ", ".join(f"{lv.test} {lv.n_identical}/{lv.n_prompts}" for lv in levels)
        texts.append(f"UNGATED: {ungated_reason(thresholds)} (identical outputs: {identical})")
    record = ComparisonAggregateRecord(
        context.check,
        context.suite,
        levels,
        context.engines,
        tests=context.tests,
        ungated=ungated,
        replay=context.replay,
        errored=errored,
    )
    properties = aggregate_properties(levels)
    properties.append(("infercheck_engines", json.dumps(context.engines, sort_keys=True)))
    properties.append(("infercheck_ungated", ungated))
    return _Compared(levels, per_level, Summary(record, violations, "\n\n".join(texts), properties))


def summarize(
    items: Sequence[RecordedItem], thresholds: Thresholds, context: ComparisonContext
) -> Summary:
    """The aggregate of a compare or diff: a level per test side (see the module
    docstring)."""
    return _compared(items, thresholds, context).summary


def summarize_sweep(
    items: Sequence[RecordedItem], thresholds: Thresholds, context: SweepContext
) -> Summary:
    """The aggregate of a sweep: a comparison's, and its degradation cliff from the
    self-check (:func:`first_level`) through the levels in the user's order."""
    compared = _compared(items, thresholds, context)
    summary = compared.summary
    prompt_ids = {r.prompt_id for results in compared.results for r in results}
    first = first_level(items, context.self_check, prompt_ids)
    cliff, steps = sweep_cliff(
        first, compared.levels, compared.results, thresholds, context.cliff_alpha
    )
    base: ComparisonAggregateRecord = summary.record
    record = SweepAggregateRecord(
        base.check,
        base.suite,
        base.levels,
        base.engines,
        cliff,
        cliff_alpha=context.cliff_alpha,
        cliff_steps=steps,
        tests=base.tests,
        ungated=base.ungated,
        replay=base.replay,
        errored=base.errored,
        self_check=context.self_check,
    )
    evidence = "\n".join(
        [
            f"degradation cliff: {cliff_evidence(cliff, steps, context.cliff_alpha)}",
            *cliff_table(cliff, steps, context.cliff_alpha),
        ]
    )
    return Summary(
        record,
        summary.violations,
        f"{summary.text}\n\n{evidence}",
        [*summary.properties, ("infercheck_cliff", cliff)],
    )


def first_level(items: Sequence[RecordedItem], ran: bool, prompt_ids: set[str]) -> CliffLevel:
    """The cliff's first level over the prompts ``prompt_ids``: the self-check, its failed
    prompts read from the ``self-check`` item's record (:func:`~.aggregate.
    self_check_level`); a clean ``baseline`` when the sweep runs no self-check (``ran``
    false). When it runs one but its record is missing (the item errored, or is in another
    shard) the level has no failed prompt known and no mean KL: no level's KL can cross from
    it, and the errored item fails the aggregate on its own."""
    if not ran:
        return self_check_level([], len(prompt_ids), ran=False)
    records: list[SelfCheckRecord] = records_of(items, SELF_CHECK)
    if not records:
        return CliffLevel(SELF_CHECK, frozenset(), len(prompt_ids), math.nan, math.nan, False)
    failed = {p for record in records for p in record.failed if p in prompt_ids}
    return self_check_level(failed, len(prompt_ids))
