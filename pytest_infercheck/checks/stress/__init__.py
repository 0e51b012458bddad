"""stress: the suite at increasing concurrency, every output compared with its reference.

Items: one per level (``c1``, ``c2``, ... role ``level``) plus ``aggregate``. The reference
is each prompt generated alone; each level sends every prompt several times at once
(:mod:`.gather`), and its figures (:mod:`.measure`) are gated per level (:mod:`.spec`:
``max_error_rate``, ``min_consistency``, ``flips.max_rate``), every fault of a level failing
it whatever the thresholds (:mod:`.judge`). With ``fail_on: decisive`` outputs that leave
their reference at a near-tie count as consistent only once judged past it by teacher
forcing. The aggregate is every level's record (:mod:`.summarize`); it fails when any level
fails or errors.

Facets: :mod:`.spec`, :mod:`.gather`, :mod:`.judge`, :mod:`.summarize`, :mod:`.present`;
records in :mod:`.records` (:class:`StressLevel`, role ``level``, its mismatches
:class:`Mismatch`; :class:`StressAggregate`, role ``aggregate``).
"""

from __future__ import annotations

from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import TargetContext, target_label
from .evidence import NearTie, StressEvidence
from .gather import StressGather, send_batches, send_burst
from .judge import judge
from .measure import (
    MAX_MISMATCHES,
    Output,
    batches,
    error_kind,
    jobs_for,
    level_data,
    measure_level,
    reference_of,
    token_count,
)
from .present import (
    PRESENT,
    level_charts,
    level_columns,
    level_properties,
    level_table,
    level_text,
    stress_level,
    summary_lines,
)
from .records import Mismatch, Reference, StressAggregate, StressLevel
from .spec import (
    GATES,
    HARNESS,
    StressSpec,
    StressThresholds,
    flip_rate_gates,
    plan,
    refuse,
    unmeasurable,
)
from .summarize import summarize

__all__ = [
    "GATES",
    "MAX_MISMATCHES",
    "STRESS",
    "Mismatch",
    "NearTie",
    "Output",
    "Reference",
    "StressAggregate",
    "StressEvidence",
    "StressGather",
    "StressLevel",
    "StressSpec",
    "StressThresholds",
    "batches",
    "error_kind",
    "jobs_for",
    "judge",
    "level_charts",
    "level_columns",
    "level_data",
    "level_properties",
    "level_table",
    "level_text",
    "measure_level",
    "reference_of",
    "send_batches",
    "send_burst",
    "stress_level",
    "summarize",
    "summary_lines",
    "token_count",
]

STRESS = CheckKind(
    name="stress",
    spec=SpecFacet(
        options=StressSpec,
        thresholds=StressThresholds,
        gates=GATES,
        label=target_label,
        context=TargetContext,
        records={"level": StressLevel, "aggregate": StressAggregate},
        plan=plan,
        rate_gates=flip_rate_gates,
        refuse=refuse,
        unmeasurable=unmeasurable,
        spread_over_workers=True,
        harness=HARNESS,
    ),
    gather=StressGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)
