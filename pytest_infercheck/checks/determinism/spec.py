"""The ``determinism`` kind's YAML and gates: each prompt ``runs`` times at temperature 0 on
one target.

Gates (each reads a measure of :class:`~.evidence.DeterminismEvidence` or of the aggregate's
summary; a written gate whose measure is unmeasured fails):

- ``max_error_rate`` (item): ``error_rate = failed runs / runs`` of the prompt;
- ``max_logprob_drift`` (item): ``logprob_drift``, the largest logprob spread at one position
  among runs with identical tokens (:func:`~pytest_infercheck.metrics.determinism.
  summarize_runs`); unmeasured when no two runs with identical tokens expose logprobs (a
  backend without logprobs: written on a backend with ``logprobs: false`` it is a collection
  error at its line);
- ``min_determinism`` (suite): ``determinism_score``, the mean over prompts of the share of
  runs equal to the modal output (point estimate);
- ``max_error_rate`` (suite): ``error_rate = failed runs / runs`` over every prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from ...specs import ErrorRate, TargetCheck, TieGates
from ...verdict.gate import Gate
from ..framework.harness import BOTH_SHAPES, SELF_COMPARED, TIGHT, HarnessProfile
from ..framework.target import no_logprobs_reason

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix


class DeterminismSpec(TargetCheck):
    """Each prompt ``runs`` times at temperature 0."""

    runs: int = Field(default=10, ge=2)
    """How many times each prompt is generated at temperature 0 (at least 2, default 10)."""


class DeterminismThresholds(ErrorRate, TieGates):
    """``min_determinism``: suite gate on the determinism score (the mean over prompts of the
    share of runs equal to the modal output), on the point estimate. ``max_logprob_drift``:
    per item, the largest |logprob difference| among runs with identical tokens (None:
    reported only). ``max_error_rate``: per item and over all runs. ``tie_margin`` labels
    divergences; ``fail_on: decisive`` passes distinct outputs that all part at a near-tie
    once each was judged past it (:class:`~pytest_infercheck.specs.TieGates`)."""

    min_determinism: float | None = Field(default=None, ge=0, le=1)
    """Suite gate: the least determinism score (mean over prompts of the share of runs equal to
    the modal output). None: not gated."""
    max_logprob_drift: float | None = Field(default=None, ge=0)
    """Per item: the largest |logprob difference| among runs with identical tokens. None:
    reported only."""


GATES = (
    Gate("max_error_rate", "error_rate", "max", "error rate"),
    Gate(
        "max_logprob_drift",
        "logprob_drift",
        "max",
        "logprob drift among runs with identical tokens",
    ),
    Gate("min_determinism", "determinism_score", "min", "determinism score", scope="suite"),
    Gate("max_error_rate", "error_rate", "max", "error rate over all runs", scope="suite"),
)


def unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> dict[str, str]:
    """``max_logprob_drift`` on a target known from the matrix to return no logprobs: no
    run exposes logprobs, so no drift can be measured (a collection error at its line)."""
    reason = no_logprobs_reason(loaded, check, index)
    return {} if reason is None else {"max_logprob_drift": f"not measured on any item: {reason}"}


HARNESS = HarnessProfile(
    {
        "determinism": {"target": "{target}", "runs": 3},
        "max_logprob_drift": TIGHT,
        "min_determinism": 1.0,
        "max_error_rate": 0.0,
    },
    blind=SELF_COMPARED,
    shapes=BOTH_SHAPES,
)
"""The verdict harness's check (``tests/harness``): every gate written as tightly as a
faithful engine passes; blind to what a kind comparing a target with itself cannot see."""
