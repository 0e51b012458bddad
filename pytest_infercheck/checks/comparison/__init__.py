"""The comparison family (compare, sweep, diff) as a package of facets: :mod:`.spec` (options,
thresholds, gates, plan), :mod:`.gather` (all I/O, with :mod:`.gather_prompt`,
:mod:`.scoring`, :mod:`.origins`, :mod:`.batched`, :mod:`.inputs`), :mod:`.evidence`,
:mod:`.judge` (pure: evidence to record and verdict), :mod:`.summarize` (with
:mod:`.aggregate`: the suite statistics and the cliff), :mod:`.present`.

- ``compare``: two targets (``compare(bf16-vs-q4)``); the baseline may be a golden file;
- ``sweep``: several models against one baseline (``sweep(bf16)``, items ``r017[q4]``), the
  baseline generated twice first (``self-check``), the degradation cliff named across levels;
- ``diff``: one model across backends, the first the baseline (``diff(bf16)``, items
  ``r017[llama]``); by default it expects identical outputs (``expect: identical``).
"""

from __future__ import annotations

import dataclasses

from ...golden.record import GoldenRecording
from ..framework.kind import CheckKind, PresentFacet, SpecFacet
from .aggregate import ComparisonAggregateRecord, SweepAggregateRecord
from .gather import ComparisonGatherer
from .judge import judge
from .present import (
    FLIP_BARS,
    KL_DISTRIBUTION,
    MEASURES,
    comparison_aggregate,
    comparison_prompt,
    describe_item,
    item_properties,
    level_charts,
    self_check,
    side_columns,
    side_verdicts,
    sweep_notes,
)
from .prompt import SELF_CHECK, PromptComparison, SelfCheckRecord
from .spec import (
    COMPARE_HARNESS,
    DIFF_HARNESS,
    GATES,
    SWEEP_HARNESS,
    CompareSpec,
    DiffSpec,
    DiffThresholds,
    SweepSpec,
    Thresholds,
    baseline_model,
    both_sides,
    flip_rate_gates,
    plan,
    unmeasurable,
)
from .summarize import ComparisonContext, SweepContext, summarize, summarize_sweep
from .terminal import summary_lines

__all__ = ["COMPARE", "DIFF", "SWEEP"]

_VIEWS = {"prompt": comparison_prompt, "aggregate": comparison_aggregate}
_RECORDS = {"prompt": PromptComparison, "aggregate": ComparisonAggregateRecord}
"""What each item records, by role; a compare also records a golden (``record``), a sweep
checks its baseline first (``self-check``) and names its cliff."""

COMPARE = CheckKind(
    name="compare",
    spec=SpecFacet(
        options=CompareSpec,
        thresholds=Thresholds,
        gates=GATES,
        label=both_sides,
        context=ComparisonContext,
        records={**_RECORDS, "record": GoldenRecording},
        plan=plan,
        rate_gates=flip_rate_gates,
        unmeasurable=unmeasurable,
        harness=COMPARE_HARNESS,
    ),
    gather=ComparisonGatherer,
    judge=judge,
    summarize=summarize,
    present=PresentFacet(
        family="comparison",
        describe=describe_item,
        properties=item_properties,
        summary_lines=summary_lines,
        views=_VIEWS,
        measures=MEASURES,
        other_measures=False,
        columns=side_columns,
        verdicts=side_verdicts,
        bars=FLIP_BARS,
        distribution=KL_DISTRIBUTION,
    ),
)
SWEEP = dataclasses.replace(
    COMPARE,
    name="sweep",
    spec=dataclasses.replace(
        COMPARE.spec,
        options=SweepSpec,
        label=baseline_model,
        context=SweepContext,
        records={**_RECORDS, "aggregate": SweepAggregateRecord, SELF_CHECK: SelfCheckRecord},
        harness=SWEEP_HARNESS,
    ),
    summarize=summarize_sweep,
    present=dataclasses.replace(
        COMPARE.present,
        charts=level_charts,
        views={**_VIEWS, SELF_CHECK: self_check},
        notes=sweep_notes,
    ),
)
DIFF = dataclasses.replace(
    COMPARE,
    name="diff",
    spec=dataclasses.replace(
        COMPARE.spec,
        options=DiffSpec,
        thresholds=DiffThresholds,
        label=baseline_model,
        records=_RECORDS,
        harness=DIFF_HARNESS,
    ),
)
