"""The ``determinism`` summarize facet: the prompts' records to the aggregate (pure; the
live run and ``pytest-infercheck report`` over shards call it alike).

The determinism score is the mean modal share over the prompts, with the Wilson interval
of the pooled share of runs equal to their modal
(:func:`~pytest_infercheck.metrics.determinism.determinism_score`); the failed runs over all
prompts give the suite's ``error_rate``. Both are measures the suite gates of :mod:`.spec`
read (unmeasured for no prompts, no runs). The kind's own finding: the prompts with faults,
named by fault (``non-finite logprob in 2 of 20 prompts: r003 (run 3 at positions 2, 5),
...``); the framework adds the failed and errored items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...metrics.determinism import DeterminismSummary, determinism_score
from ...metrics.faults import aggregate_faults
from ...metrics.finite import strict_max
from ...metrics.ties import count_labels
from ...render.text import counted
from ...verdict.measure import MeasureValue, Reading, Unmeasured
from ..framework.items import RecordedItem, Summary, records_of
from .records import SCORE_INTERVAL, DeterminismAggregate, DeterminismContext, DeterminismPrompt
from .spec import DeterminismThresholds


def summarize(
    items: Sequence[RecordedItem], thresholds: DeterminismThresholds, context: DeterminismContext
) -> Summary:
    """The aggregate of the prompts' records (see the module docstring)."""
    prompts: list[DeterminismPrompt] = records_of(items, "prompt")
    summaries = [summary_of(p) for p in prompts]
    score, low, high = determinism_score(summaries)
    runs = sum(s.runs for s in summaries)
    errors = sum(s.errors for s in summaries)
    drifts = [s.max_logprob_drift for s in summaries if s.max_logprob_drift is not None]
    deterministic = sum(s.deterministic for s in summaries)
    faulty = [(p.prompt_id, p.faults) for p in prompts if p.faults]
    data = DeterminismAggregate(
        target=context.target,
        runs=context.runs,
        prompts=len(summaries),
        deterministic_prompts=deterministic,
        score=score,
        score_low=low,
        score_high=high,
        interval=SCORE_INTERVAL,
        errors=errors,
        max_logprob_drift=strict_max(drifts),
        engines=context.engines,
        divergence_labels=count_labels([x for s in summaries for x in s.divergence_labels]),
    )
    text = (
        f"{context.target}: {deterministic}/{len(summaries)} prompts deterministic over "
        f"{context.runs} runs; score {score:.4f} (95% CI {low:.4f}-{high:.4f}); "
        f"{errors} failed runs; {len(faulty)} prompts with faults; "
        f"divergences {counted(data.divergence_labels)}"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_determinism_score", score),
        ("infercheck_determinism_score_low", low),
        ("infercheck_determinism_score_high", high),
        ("infercheck_deterministic_prompts", deterministic),
        ("infercheck_errors", errors),
        ("infercheck_max_logprob_drift", data.max_logprob_drift),
        *(
            (f"infercheck_divergences_{label.replace('-', '_')}", n)
            for label, n in data.divergence_labels.items()
        ),
    ]
    measures: dict[str, MeasureValue] = {
        "determinism_score": Reading(score, f"95% Wilson interval {low:.4f}-{high:.4f}")
        if summaries
        else Unmeasured("no prompt was aggregated"),
        "error_rate": Reading(errors / runs, f"{errors}/{runs} runs failed")
        if runs
        else Unmeasured("no runs were recorded"),
    }
    violations = aggregate_faults(faulty, n_items=len(summaries))
    return Summary(data, violations, text, properties, measures)


def summary_of(record: DeterminismPrompt) -> DeterminismSummary:
    """A prompt's summary read back from its record (the modal output is the first)."""
    return DeterminismSummary(
        runs=record.runs,
        errors=record.errors,
        modal_count=record.outputs[0].count if record.outputs else 0,
        distinct=record.distinct,
        first_divergences=record.first_divergences,
        max_logprob_drift=record.max_logprob_drift,
        outputs=record.outputs,
    )
