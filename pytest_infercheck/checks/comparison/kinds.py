"""The comparison kinds: a test side against a baseline, prompt by prompt.

- ``compare``: two targets (``compare(bf16-vs-q4)``); the baseline may be a golden file;
- ``sweep``: several models against one baseline (``sweep(bf16)``, items ``r017[q4]``), the
  baseline generated twice first (``self-check``), the degradation cliff named across levels;
- ``diff``: one model across backends, the first the baseline (``diff(bf16)``, items
  ``r017[llama]``); by default it expects identical outputs (``expect: identical``).

Their options and thresholds are in :mod:`.options`, their aggregate in :mod:`.summary`, their
gates in :mod:`.gates`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...golden.record import GoldenRecording
from ..protocol import LegacyKind
from .aggregate import SELF_CHECK, ComparisonAggregateRecord, SelfCheckRecord, SweepAggregateRecord
from .gates import flip_rate_gates
from .options import CompareSpec, DiffSpec, DiffThresholds, SweepSpec, Thresholds
from .present import (
    FLIP_BARS,
    KL_DISTRIBUTION,
    MEASURES,
    comparison_aggregate,
    comparison_prompt,
    level_charts,
    self_check,
    side_columns,
    side_verdicts,
    summary_lines,
)
from .prompt import PromptComparison
from .run import CompareRun, DiffRun, SweepRun
from .summary import ComparisonContext, SweepContext, summarize, summarize_sweep

if TYPE_CHECKING:
    from ...config import CheckSpec, LoadedMatrix, Target


def baseline_model(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``sweep(bf16)``, ``diff(bf16)``: the baseline's model."""
    side = check.baseline_side(index)
    return loaded.target(side.ref, side.loc).model


def both_sides(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``compare(bf16-vs-q4)``; backends appear only where they tell the sides apart."""
    baseline = check.baseline_side(index)
    base = loaded.target(baseline.ref, baseline.loc)
    (side,) = check.test_sides(index)
    test = loaded.target(side.ref, side.loc)
    return f"{_side(base, test)}-vs-{_side(test, base)}"


def _side(target: Target, other: Target) -> str:
    if target.backend == other.backend:
        return target.model
    return target.model if target.model != other.model else f"{target.model}.{target.backend}"


_VIEWS = {"prompt": comparison_prompt, "aggregate": comparison_aggregate}
_RECORDS = {"prompt": PromptComparison, "aggregate": ComparisonAggregateRecord}
"""What each item records, by role; a compare also records a golden (``record``), a sweep
checks its baseline first (``self-check``) and names its cliff."""

COMPARE = LegacyKind(
    name="compare",
    spec=CompareSpec,
    run=CompareRun,
    label=both_sides,
    thresholds=Thresholds,
    context=ComparisonContext,
    summarize=summarize,
    family="comparison",
    summary_lines=summary_lines,
    records={**_RECORDS, "record": GoldenRecording},
    views=_VIEWS,
    measures=MEASURES,
    other_measures=False,
    columns=side_columns,
    verdicts=side_verdicts,
    bars=FLIP_BARS,
    distribution=KL_DISTRIBUTION,
    rate_gates=flip_rate_gates,
)
SWEEP = dataclasses.replace(
    COMPARE,
    name="sweep",
    spec=SweepSpec,
    run=SweepRun,
    label=baseline_model,
    context=SweepContext,
    summarize=summarize_sweep,
    charts=level_charts,
    records={**_RECORDS, "aggregate": SweepAggregateRecord, SELF_CHECK: SelfCheckRecord},
    views={**_VIEWS, SELF_CHECK: self_check},
)
DIFF = dataclasses.replace(
    COMPARE,
    name="diff",
    spec=DiffSpec,
    run=DiffRun,
    label=baseline_model,
    thresholds=DiffThresholds,
    records=_RECORDS,
)
