"""The evidence of a parity item: what its gather facet fetched (both sides' generations,
the continuations past a near-tie, how the requests went) and the measures its gates read.

Measures (:attr:`ParityEvidence.measures`):

- ``logprob_drift``: :attr:`.compare.SideComparison.logprob_drift`, or
  ``Unmeasured(reason)``: a side produced no output (its request failed, its path is
  lacking), a side returned no logprobs (with the backend's reason where it gives one), no
  token is known to be shared;
- ``similarity``: difflib ratio of the two texts (may be NaN: a fault, and no gate passes
  it), or ``Unmeasured`` when a side produced no output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue, Unmeasured
from .compare import SideComparison, compare_generations

if TYPE_CHECKING:
    from ...backends.base import Generation
    from ...suites import Prompt


@dataclass(frozen=True)
class Forced:
    """The other side's path continued from the reference's tokens: ``generation`` was
    generated after the prompt and the reference's first :attr:`start` tokens (the tokens up
    to and including a near-tie), to be compared with the reference's tokens from there."""

    start: int
    generation: Generation


@dataclass
class ParityEvidence:
    """One parity item's evidence (see the module docstring): ``labels`` are the reference's
    and the other side's (``non-streamed``/``streamed``, two endpoints); a side is None when
    it produced no output (:attr:`conduct` says why)."""

    prompt: Prompt
    target: str
    labels: tuple[str, str]
    reference: Generation | None
    other: Generation | None
    tie_margin: float
    conduct: Conduct = field(default_factory=Conduct)
    forced: list[Forced] = field(default_factory=list)
    """Continuations past a near-tie, in order (gathered under ``fail_on: decisive``)."""
    unforced: str | None = None
    """Why what follows a near-tie could not be judged by a continuation (the path cannot be
    given the reference's tokens); None when it could, or nothing needed it."""
    logprob_note: str | None = None
    """Why the target's generations carry no logprobs, as its backend says (None: it gives
    them, or it says nothing)."""

    @cached_property
    def comparison(self) -> SideComparison | None:
        """Both sides compared (:func:`.compare.compare_generations`); None when a side
        produced no output."""
        if self.reference is None or self.other is None:
            return None
        return compare_generations(
            self.prompt, self.reference, self.other, self.labels, self.tie_margin
        )

    def missing(self) -> str:
        """Which side produced no output, in words."""
        sides = [
            label
            for label, generation in zip(self.labels, (self.reference, self.other), strict=True)
            if generation is None
        ]
        return f"no {' and no '.join(sides)} output to compare"

    @property
    def measures(self) -> dict[str, MeasureValue]:
        comparison = self.comparison
        if comparison is None:
            none = Unmeasured(self.missing())
            return {"logprob_drift": none, "similarity": none}
        drift: MeasureValue
        if comparison.logprob_drift is not None:
            drift = comparison.logprob_drift
        else:
            why = comparison.drift_unmeasured or "not measured"
            if self.logprob_note and why.endswith("carries no logprobs"):
                why = f"{why} ({self.logprob_note})"
            drift = Unmeasured(why)
        return {"logprob_drift": drift, "similarity": comparison.similarity}
