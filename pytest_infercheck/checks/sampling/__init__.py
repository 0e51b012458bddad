"""The ``sampling`` check: does the engine sample the distribution its parameters define,
and does its seed replay a sample?

Items: one per prompt x parameter set x position (``<prompt>[t1-p0.9-pos0]``, role
``position``), and per prompt a seed item (``<prompt>[seed]``, role ``seed``) under ``seed:
true``. Facets: :mod:`.spec` (options, thresholds, gates, plan), :mod:`.gather` (the draws,
the reference's rows, the seeded requests: all I/O), :mod:`.evidence` (the analysis, pure),
:mod:`.judge` (pure), :mod:`.summarize` (Holm over the check x suite), :mod:`.present`;
records in :mod:`.records`. The statistics are :mod:`pytest_infercheck.metrics.sampling`.
"""

from __future__ import annotations

from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import TargetContext, target_label
from .gather import SamplingGather
from .judge import judge
from .present import PRESENT
from .records import SamplingAggregate, SamplingPosition, SamplingSeed
from .spec import GATES, HARNESS, SamplingSpec, SamplingThresholds, plan, refuse, unmeasurable
from .summarize import summarize

__all__ = ["SAMPLING", "SamplingAggregate", "SamplingPosition", "SamplingSeed"]

SAMPLING = CheckKind(
    name="sampling",
    spec=SpecFacet(
        options=SamplingSpec,
        thresholds=SamplingThresholds,
        gates=GATES,
        label=target_label,
        context=TargetContext,
        records={
            "position": SamplingPosition,
            "seed": SamplingSeed,
            "aggregate": SamplingAggregate,
        },
        plan=plan,
        refuse=refuse,
        unmeasurable=unmeasurable,
        harness=HARNESS,
    ),
    gather=SamplingGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)
