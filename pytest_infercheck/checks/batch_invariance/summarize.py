"""The ``batch-invariance`` summarize facet: the prompts' records to the aggregate (pure; the
live run and ``pytest-infercheck report`` over shards call it alike).

A prompt is invariant when its item passed (no violation in any trial, as judged when it
ran); ``rate = invariant / prompts``. The kind's own finding: the prompts whose outputs
carry faults, named by fault; the framework adds the failed and errored items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...metrics.faults import aggregate_faults
from ...metrics.ties import count_labels
from ...render.text import counted
from ..framework.items import RecordedItem, Summary
from ..framework.target import TargetContext
from .records import BatchInvarianceAggregate, BatchInvariancePrompt
from .spec import BatchInvarianceThresholds
from .trials import record_faults


def summarize(
    items: Sequence[RecordedItem], thresholds: BatchInvarianceThresholds, context: TargetContext
) -> Summary:
    """The aggregate of the prompts' records (see the module docstring)."""
    judged = [i for i in items if i.role == "prompt" and i.record is not None]
    results: list[BatchInvariancePrompt] = [i.record for i in judged]
    invariant = sum(not i.violations for i in judged)
    faulty = [(r.prompt_id, record_faults(r)) for r in results if record_faults(r)]
    trials = sum(len(r.trials) for r in results)
    rate = invariant / len(results) if results else 0.0
    data = BatchInvarianceAggregate(
        target=context.target,
        prompts=len(results),
        invariant_prompts=invariant,
        rate=rate,
        trials=trials,
        batched_by=results[0].batched_by if results else None,
        engines=context.engines,
        divergence_labels=count_labels(
            [t.tie.divergence_label for r in results for t in r.trials if t.tie is not None]
        ),
    )
    text = (
        f"{context.target}: {invariant}/{len(results)} prompts batch-invariant over "
        f"{trials} trials ({data.batched_by}); divergences {counted(data.divergence_labels)}"
    )
    props: list[tuple[str, Any]] = [
        ("infercheck_invariant_prompts", invariant),
        ("infercheck_batch_invariance_rate", rate),
        ("infercheck_trials", trials),
        *(
            (f"infercheck_divergences_{label.replace('-', '_')}", n)
            for label, n in data.divergence_labels.items()
        ),
    ]
    violations = aggregate_faults(faulty, n_items=len(results))
    return Summary(data, violations, text, props)
