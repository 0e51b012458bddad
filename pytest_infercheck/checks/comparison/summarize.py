"""The summarize facet of the comparison kinds: the aggregate of a check x suite, a pure
function of its items' records and verdicts (:attr:`~..framework.kind.CheckKind.summarize`):
the live run calls it on the records of its items, ``pytest-infercheck report`` on the union
of a sharded run's records, so both give the same aggregate.

- per test side (in the user's order, :attr:`ComparisonContext.tests`): its prompts' records
  pooled (:func:`.aggregate.aggregate`), its failed items those whose item failed (their
  verdicts), and the measures its suite gates read (:func:`.aggregate.level_measures`),
  which the framework judges per side (``Summary.column_measures``: each violation named by
  the side); the framework also fails the aggregate for every failed or errored item;
- a side's problems (fail closed) are violations of the aggregate, prefixed by the side;
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
from ...verdict.measure import MeasureValue
from ..framework.items import RecordedItem, Summary, errored_items, records_of
from .aggregate import (
    CliffLevel,
    ComparisonAggregateRecord,
    SuiteAggregate,
    SweepAggregateRecord,
    aggregate,
    cliff_evidence,
    cliff_table,
    format_aggregate,
    level_measures,
    self_check_level,
    sweep_cliff,
)
from .prompt import SELF_CHECK, PromptComparison, SelfCheckRecord
from .spec import Thresholds, is_ungated, ungated_reason


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
    """The test sides that have records: their aggregates and their failed prompts."""

    levels: list[SuiteAggregate]
    failed: list[frozenset[str]]
    summary: Summary


def _compared(
    items: Sequence[RecordedItem], thresholds: Thresholds, context: ComparisonContext
) -> _Compared:
    prompts = [item for item in items if item.role == "prompt" and item.record is not None]
    errored = errored_items(items)
    violations: list[str] = []
    levels: list[SuiteAggregate] = []
    failed_per_level: list[frozenset[str]] = []
    columns: dict[str, dict[str, MeasureValue]] = {}
    texts: list[str] = []
    for test in dict.fromkeys(context.tests):
        mine = [item for item in prompts if item.record.test == test]
        if not mine:
            violations.append(f"{test}: no prompt of this side has a record")
            continue
        results: list[PromptComparison] = [item.record for item in mine]
        failed = frozenset(item.record.prompt_id for item in mine if item.violations)
        agg = aggregate(results, thresholds, failed)
        levels.append(agg)
        failed_per_level.append(failed)
        columns[agg.test] = level_measures(agg, thresholds)
        texts.append(format_aggregate(agg))
        violations += [f"{agg.test}: {v}" for v in agg.problems]
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
    summary = Summary(record, violations, "\n\n".join(texts), properties, column_measures=columns)
    return _Compared(levels, failed_per_level, summary)


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
    prompt_ids = {
        item.record.prompt_id for item in items if item.role == "prompt" and item.record is not None
    }
    first = first_level(items, context.self_check, prompt_ids)
    cliff, steps = sweep_cliff(
        first, compared.levels, compared.failed, thresholds, context.cliff_alpha
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
        column_measures=summary.column_measures,
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
