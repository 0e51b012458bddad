"""The ``batch-invariance`` check (the needle test): a prompt run alone, then placed at a
random position of ``trials`` batches of ``batch_size`` prompts of mixed lengths
(:mod:`.gather`).

A trial passes when the needle's tokens equal the alone tokens (token ids where both sides
have them, else text) and, where logprobs are exposed, ``max_t |lp_alone[t] - lp_batch[t]|``
over the positions before the first divergence is within ``logprob_tolerance`` (a NaN
difference never is), and neither output has a fault of its own
(:mod:`~pytest_infercheck.metrics.consistency`); a failed batched request fails the item
with the server's message. A trial whose tokens leave the alone output's has its first
divergent token labelled ``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``; with
``fail_on: decisive`` a trial that differs at a near-tie passes only once it was judged past
it by teacher forcing (:mod:`.judge`).

Facets: :mod:`.spec`, :mod:`.gather`, :mod:`.judge`, :mod:`.summarize`, :mod:`.present`;
records in :mod:`.records` (:class:`BatchInvariancePrompt`, role ``prompt``, its trials
:class:`Trial`; :class:`BatchInvarianceAggregate`, role ``aggregate``).
"""

from __future__ import annotations

from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import TargetContext, target_label
from .gather import BatchInvarianceGather
from .judge import judge
from .present import PRESENT, batch_invariance_prompt, describe, summary_lines
from .records import AloneOutput, BatchInvarianceAggregate, BatchInvariancePrompt, Trial
from .spec import GATES, HARNESS, BatchInvarianceSpec, BatchInvarianceThresholds, unmeasurable
from .summarize import summarize
from .trials import (
    CONCURRENT_BURST,
    SEQUENTIAL,
    batched_by,
    compare_to_alone,
    record_faults,
    scan,
    trial_labels,
)

__all__ = [
    "BATCH_INVARIANCE",
    "CONCURRENT_BURST",
    "GATES",
    "SEQUENTIAL",
    "AloneOutput",
    "BatchInvarianceAggregate",
    "BatchInvarianceGather",
    "BatchInvariancePrompt",
    "BatchInvarianceSpec",
    "BatchInvarianceThresholds",
    "Trial",
    "batch_invariance_prompt",
    "batched_by",
    "compare_to_alone",
    "describe",
    "judge",
    "record_faults",
    "scan",
    "summarize",
    "summary_lines",
    "trial_labels",
]

BATCH_INVARIANCE = CheckKind(
    name="batch-invariance",
    spec=SpecFacet(
        options=BatchInvarianceSpec,
        thresholds=BatchInvarianceThresholds,
        gates=GATES,
        label=target_label,
        context=TargetContext,
        records={"prompt": BatchInvariancePrompt, "aggregate": BatchInvarianceAggregate},
        harness=HARNESS,
        unmeasurable=unmeasurable,
    ),
    gather=BatchInvarianceGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)
