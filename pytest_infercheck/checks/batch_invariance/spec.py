"""The ``batch-invariance`` kind's YAML and gates: each prompt alone, then at a random
position of ``trials`` batches of ``batch_size`` prompts of mixed lengths.

The gate: ``logprob_tolerance`` (item) reads ``logprob_diff``, the largest ``max_t
|lp_alone[t] - lp_batch[t]|`` of the prompt's trials (a NaN never passes). Written in the
check entry, it is a gate like any other: unmeasured when no trial compared logprobs (a
backend without logprobs; with ``logprobs: false`` in the matrix, a collection error at its
line), and then it fails. Not written, its default (1e-4) applies to each trial that
compared logprobs (:mod:`.judge`) and is not required of a backend that gives none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from ...specs import LogprobTolerance, TargetCheck, TieGates
from ...verdict.gate import Gate
from ..framework.harness import BOTH_SHAPES, SELF_COMPARED, TIGHT, HarnessProfile
from ..framework.target import no_logprobs_reason

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix


class BatchInvarianceSpec(TargetCheck):
    """Each prompt alone, then at a random position of ``trials`` batches of ``batch_size``
    prompts of mixed lengths, drawn with ``seed``."""

    trials: int = Field(default=3, ge=1)
    """How many batches each prompt is placed in (default 3)."""
    batch_size: int = Field(default=8, ge=2)
    """Prompts per batch, at least 2 (default 8)."""
    seed: int = 0
    """The seed that draws the batches and the prompt's place in them (default 0)."""


class BatchInvarianceThresholds(LogprobTolerance, TieGates):
    """``logprob_tolerance`` (:class:`~pytest_infercheck.specs.LogprobTolerance`);
    ``tie_margin`` labels a trial's divergence, ``fail_on: decisive`` passes a trial that
    differs only at a near-tie once it was judged past it
    (:class:`~pytest_infercheck.specs.TieGates`)."""


def tolerance_written(thresholds: Any) -> bool:
    """Whether the check entry writes ``logprob_tolerance`` (not only its default)."""
    return "logprob_tolerance" in thresholds.model_fields_set


GATES = (
    Gate(
        "logprob_tolerance",
        "logprob_diff",
        "max",
        "largest |logprob difference| between the prompt alone and batched",
        written=tolerance_written,
    ),
)


def unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> dict[str, str]:
    """``logprob_tolerance`` written on a target known from the matrix to return no
    logprobs: no difference alone vs batched can be measured (a collection error at its
    line)."""
    reason = no_logprobs_reason(loaded, check, index)
    return {} if reason is None else {"logprob_tolerance": f"not measured on any item: {reason}"}


HARNESS = HarnessProfile(
    {
        "batch-invariance": {"target": "{target}", "trials": 1, "batch_size": 3},
        "logprob_tolerance": TIGHT,
    },
    blind=SELF_COMPARED,
    shapes=BOTH_SHAPES,
)
"""The verdict harness's check (``tests/harness``)."""
