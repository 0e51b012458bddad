"""The ``determinism`` check: each prompt ``runs`` times at temperature 0 on one target.

An item (one per prompt) fails on any fault of a run's own output, when its runs are not all
identical (token ids where the backend gives them, else text), and on its gates
(:mod:`.spec`: failed runs over ``max_error_rate``, logprob drift among runs with identical
tokens over ``max_logprob_drift``, a NaN drift never passing). The aggregate gates the
suite's determinism score (mean modal share) with ``min_determinism`` and the failed runs
over all runs with ``max_error_rate``, and names the prompts with faults.

Each non-modal output's first divergent token from the modal output is labelled
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``; with ``fail_on: decisive``
distinct outputs that all part at a near-tie pass only once each was judged past it by
teacher forcing (:mod:`.judge`).

Facets: :mod:`.spec` (options, thresholds, gates), :mod:`.gather` (the runs, all I/O),
:mod:`.judge` (pure), :mod:`.summarize` (pure), :mod:`.present`; records in
:mod:`.records` (:class:`DeterminismPrompt`, role ``prompt``; :class:`DeterminismAggregate`,
role ``aggregate``).
"""

from __future__ import annotations

from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import target_label
from .gather import DeterminismGather
from .judge import judge
from .present import PRESENT, describe, determinism_prompt, summary_lines
from .records import SCORE_INTERVAL, DeterminismAggregate, DeterminismContext, DeterminismPrompt
from .spec import GATES, HARNESS, DeterminismSpec, DeterminismThresholds, unmeasurable
from .summarize import summarize, summary_of

__all__ = [
    "DETERMINISM",
    "GATES",
    "SCORE_INTERVAL",
    "DeterminismAggregate",
    "DeterminismContext",
    "DeterminismGather",
    "DeterminismPrompt",
    "DeterminismSpec",
    "DeterminismThresholds",
    "describe",
    "determinism_prompt",
    "judge",
    "summarize",
    "summary_lines",
    "summary_of",
]

DETERMINISM = CheckKind(
    name="determinism",
    spec=SpecFacet(
        options=DeterminismSpec,
        thresholds=DeterminismThresholds,
        gates=GATES,
        label=target_label,
        context=DeterminismContext,
        records={"prompt": DeterminismPrompt, "aggregate": DeterminismAggregate},
        harness=HARNESS,
        unmeasurable=unmeasurable,
    ),
    gather=DeterminismGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)
