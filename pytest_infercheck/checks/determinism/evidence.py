"""What the ``determinism`` gather facet returns for one prompt: its runs summarised, the
failed runs' messages, the near-tie outputs teacher-forced (``fail_on: decisive``), its
measures and how its gathering went."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...metrics.determinism import DeterminismSummary
from ...metrics.past_tie import Rescored
from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue, Reading, Unmeasured


@dataclass
class DeterminismEvidence:
    """One prompt's runs (:func:`~pytest_infercheck.metrics.determinism.summarize_runs`,
    its divergences labelled at the check's ``tie_margin``), its failed runs' messages
    (``run <i>: <error>``) and, under ``fail_on: decisive``, each output involved in a
    near-tie divergence scored on the target (``rescored`` by the output's index in
    ``summary.outputs``, 0 the modal one)."""

    prompt_id: str
    target: str
    summary: DeterminismSummary
    messages: list[str]
    rescored: dict[int, Rescored] = field(default_factory=dict)
    no_logprobs: str | None = None
    """Why the target's generations carry no logprobs, when it says (a server's
    negotiation)."""
    bare_runs: list[int] = field(default_factory=list)
    """The successful runs that returned no logprobs at all."""
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        """``error_rate`` (failed runs / runs) and ``logprob_drift`` (see :mod:`.spec`)."""
        s = self.summary
        return {
            "error_rate": Reading(s.errors / s.runs, f"{s.errors}/{s.runs} runs failed")
            if s.runs
            else Unmeasured("no runs were made"),
            "logprob_drift": self._drift(),
        }

    def _drift(self) -> float | Unmeasured:
        """The drift, unmeasured when no two runs with identical tokens expose logprobs, or
        when a successful run exposes none (its drift from the others is then unknown: an
        engine that drops a run's logprobs is not drifting by 0)."""
        s = self.summary
        done = s.runs - s.errors
        if self.bare_runs and len(self.bare_runs) < done:
            runs = ", ".join(str(n) for n in self.bare_runs)
            return Unmeasured(
                f"run{'s' if len(self.bare_runs) > 1 else ''} {runs} of {done} successful "
                "runs returned no logprobs: the drift over them is unknown"
            )
        if s.max_logprob_drift is None:
            return Unmeasured(self._why_no_drift())
        return s.max_logprob_drift

    def _why_no_drift(self) -> str:
        s = self.summary
        if not any(o.count >= 2 for o in s.outputs):
            return (
                f"no two runs with identical tokens ({s.distinct} distinct outputs of "
                f"{s.runs - s.errors} successful runs)"
            )
        why = self.no_logprobs or f"{self.target} returned no logprobs with its runs"
        return why if why.startswith("no logprobs") else f"no logprobs: {why}"
