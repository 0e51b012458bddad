"""cache-parity's aggregate (pure): a function of its items' records, the same for a live
run and a merge of shards (``pytest-infercheck report``).

Per scenario (in the order they run) it counts the prompts compared, those whose scenario
has a finding (a fault, an output that differs), those without an expected hit
(``no_hit``: reported 0 cached tokens), those whose hits the engine did not report, those
not exercised and those where a request failed; besides, the prompts without any violation
and the first divergences' labels. Its own findings are the faults by kind
(:func:`~pytest_infercheck.metrics.consistency.aggregate_faults`); the framework adds its
failed and errored items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...metrics.faults import aggregate_faults
from ...metrics.ties import count_labels
from ..framework.items import RecordedItem, Summary, records_of
from .judge import scenario_findings
from .records import CacheParityAggregate, CacheParityContext, CacheParityPrompt, ScenarioCounts
from .spec import EXPECTS_HIT, SCENARIOS, CacheParityThresholds


def scenario_counts(
    records: Sequence[CacheParityPrompt], thresholds: CacheParityThresholds
) -> dict[str, ScenarioCounts]:
    """Per scenario (in :data:`SCENARIOS` order, those that ran): prompts compared, with a
    finding, without an expected hit, with unreported hits, not exercised, failed."""
    counts: dict[str, ScenarioCounts] = {}
    for record in records:
        for r in record.scenarios:
            c = counts.setdefault(r.scenario, ScenarioCounts())
            if not r.exercised:
                c.not_exercised += 1
                continue
            if r.error is not None:
                c.failed += 1
                continue
            c.compared += 1
            c.differ += bool(scenario_findings(r, record.reference_text, thresholds)[0])
            c.no_hit += r.scenario in EXPECTS_HIT and r.hit == "no-hit"
            c.unreported += r.hit == "unreported"
    return {s: counts[s] for s in SCENARIOS if s in counts}


def counts_text(c: ScenarioCounts) -> str:
    """``3 compared, 0 differ, 1 no hit, 0 hits unreported, 0 not exercised, 0 failed``."""
    return (
        f"{c.compared} compared, {c.differ} differ, {c.no_hit} no hit, "
        f"{c.unreported} hits unreported, {c.not_exercised} not exercised, {c.failed} failed"
    )


def summarize(
    items: Sequence[RecordedItem], thresholds: CacheParityThresholds, context: CacheParityContext
) -> Summary:
    """The aggregate of the prompts' records (see the module docstring)."""
    records: list[CacheParityPrompt] = records_of(items, "prompt")
    counts = scenario_counts(records, thresholds)
    faulty = [
        (r.prompt_id, [*r.reference_faults, *(f for s in r.scenarios for f in s.faults)])
        for r in records
        if r.reference_faults or any(s.faults for s in r.scenarios)
    ]
    violations = aggregate_faults(faulty, n_items=len(records))
    labels = [s.tie.divergence_label for r in records for s in r.scenarios if s.tie is not None]
    kinds = {r.reference_kind for r in records}
    parity = sum(
        1
        for item in items
        if item.role == "prompt" and item.record is not None and not item.violations
    )
    data = CacheParityAggregate(
        target=context.target,
        prompts=len(records),
        parity_prompts=parity,
        reference_kind=kinds.pop() if len(kinds) == 1 else None,
        scenarios=counts,
        engines=context.engines,
        divergence_labels=count_labels(labels) if labels else {},
    )
    lines = [
        f"{context.target}: {data.parity_prompts}/{len(records)} prompts identical on every "
        f"cache scenario (reference: {data.reference_kind})"
    ]
    lines += [f"  {name}: {counts_text(c)}" for name, c in counts.items()]
    properties: list[tuple[str, Any]] = [
        ("infercheck_parity_prompts", data.parity_prompts),
        ("infercheck_prompts", len(records)),
        *((f"infercheck_no_hit_{s.replace('-', '_')}", c.no_hit) for s, c in counts.items()),
    ]
    return Summary(data, violations, "\n".join(lines), properties)
