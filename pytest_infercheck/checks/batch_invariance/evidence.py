"""What the ``batch-invariance`` gather facet returns for one prompt: its record as
measured (alone, each trial), the near-tie trials teacher-forced (``fail_on: decisive``),
its measures and how its gathering went."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...metrics.past_tie import Rescored
from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue, Unmeasured
from .records import BatchInvariancePrompt
from .trials import max_diff


@dataclass
class BatchInvarianceEvidence:
    """One prompt alone and in its trials (:func:`~.trials.compare_to_alone`), as measured;
    under ``fail_on: decisive`` the output alone and each near-tie trial's batched output
    scored on the target (``rescored_alone``, ``rescored`` by trial number); a failed
    batched request is a :class:`~pytest_infercheck.verdict.conduct.RequestFailure`."""

    record: BatchInvariancePrompt
    rescored_alone: Rescored | None = None
    rescored: dict[int, Rescored] = field(default_factory=dict)
    no_logprobs: str | None = None
    """Why the target's generations carry no logprobs, when it says."""
    bare: list[str] = field(default_factory=list)
    """The successful outputs that returned no logprobs at all (``the output alone``,
    ``trial 0 (position 2 of 8)'s batched output``)."""
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        """``logprob_diff``: the largest difference of the trials (see :mod:`.spec`);
        unmeasured when an output returned no logprobs while others did (its difference is
        unknown, not 0), or when no trial compared any."""
        diff = max_diff(self.record.trials)
        outputs = 1 + sum(t.error is None for t in self.record.trials)
        if self.bare and len(self.bare) < outputs:
            return {
                "logprob_diff": Unmeasured(
                    f"{', '.join(self.bare)} returned no logprobs: its difference is unknown"
                )
            }
        if diff is not None:
            return {"logprob_diff": diff}
        if all(t.error is not None for t in self.record.trials):
            why = "no trial's batched request succeeded"
        else:
            no = self.no_logprobs or f"{self.record.target} returned no logprobs"
            no = no if no.startswith("no logprobs") else f"no logprobs: {no}"
            why = f"no trial compared logprobs ({no})"
        return {"logprob_diff": Unmeasured(why)}
