"""cache-parity's evidence: what the gather facet collected for one prompt (its reference and
each scenario's generations, or why a request failed), how the gathering went
(:class:`~pytest_infercheck.verdict.conduct.Conduct`), and the measures the gates read.

Measures (:attr:`PromptEvidence.measures`):

- ``max_logprob_diff``: ``max_s d_s`` over the compared scenarios ``s`` whose ``d_s =
  max_t |lp_ref[t] - lp_s[t]|`` (positions before the first divergence where both sides
  reported a logprob) is defined, as a :class:`~pytest_infercheck.verdict.measure.Reading`
  naming the scenario it came from (NaN when any ``d_s`` is NaN); unmeasured when the
  reference failed, nothing was compared or no side returned logprobs;
- ``cache_hits``: whether every compared scenario that expects a hit (all but ``eviction``)
  was reported with cached tokens > 0 (a :class:`~pytest_infercheck.verdict.measure.Finding`
  naming those with 0); unmeasured when the engine reported no count on one of them, or none
  was compared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...backends.base import Generation
from ...metrics.ties import DEFAULT_TIE_MARGIN
from ...verdict.conduct import Conduct
from ...verdict.measure import Finding, MeasureValue, Reading, Unmeasured
from .compare import compare_scenario, failed_scenario, not_exercised
from .records import ScenarioResult
from .spec import EXPECTS_HIT


@dataclass
class ScenarioEvidence:
    """One scenario as gathered: its output (None when not exercised or failed), the
    failure that stopped it, what set it up, the other prompt it sent and its own reference
    (multi-turn's composed conversation)."""

    scenario: str
    exercised: bool = True
    """False: left out for a reason known before any request (:attr:`note`)."""
    note: str | None = None
    output: Generation | None = None
    error: str | None = None
    """A request of the scenario failed: which, and the server's message."""
    companion: str | None = None
    reference: Generation | None = None
    """The scenario's own reference (None: the prompt's)."""
    first_turn: tuple[Generation, Generation] | None = None
    """Multi-turn's composed conversation: its first turn uncached (the answer written into
    the conversation) and through the cache (the state the later turn reuses)."""

    def result(self, reference: Generation | None, tie_margin: float) -> ScenarioResult:
        """This scenario's record against the prompt's ``reference`` (None: it failed)."""
        if not self.exercised:
            return not_exercised(self.scenario, self.note or "")
        own = self.reference is not None
        if self.error is not None:
            return failed_scenario(
                self.scenario, self.error, note=self.note, companion=self.companion
            )
        against = self.reference if own else reference
        if against is None or self.output is None:
            return failed_scenario(
                self.scenario,
                "not compared: the reference request failed",
                note=self.note,
                companion=self.companion,
            )
        return compare_scenario(
            self.scenario,
            against,
            self.output,
            tie_margin=tie_margin,
            note=self.note,
            companion=self.companion,
            own_reference=own,
            first_turn=self.first_turn,
        )


@dataclass
class PromptEvidence:
    """Everything gathered for one prompt's item."""

    prompt_id: str
    target: str
    reference_kind: str
    """``uncached`` or ``first-request``."""
    reference: Generation | None
    """None: its request failed (:attr:`reference_error`)."""
    scenarios: list[ScenarioEvidence]
    conduct: Conduct = field(default_factory=Conduct)
    reference_error: str | None = None

    def results(self, tie_margin: float) -> list[ScenarioResult]:
        return [s.result(self.reference, tie_margin) for s in self.scenarios]

    @property
    def measures(self) -> dict[str, MeasureValue]:
        """The measures the gates read (see the module docstring)."""
        results = self.results(DEFAULT_TIE_MARGIN)
        return {
            "max_logprob_diff": max_logprob_diff(self.reference, results, self.scenarios),
            "cache_hits": cache_hits(results),
        }


def _compared(results: list[ScenarioResult]) -> list[ScenarioResult]:
    return [r for r in results if r.exercised and r.error is None]


def _without_logprobs(
    reference: Generation, gathered: Sequence[ScenarioEvidence], compared: set[str]
) -> list[str]:
    """The generations of the compared scenarios that returned no logprobs: ``the reference``,
    a scenario's output or own reference."""
    missing = [] if reference.chosen_logprobs is not None else ["the reference"]
    for s in gathered:
        if s.scenario not in compared:
            continue
        if s.reference is not None and s.reference.chosen_logprobs is None:
            missing.append(f"the {s.scenario} scenario's own reference")
        if s.output is not None and s.output.chosen_logprobs is None:
            missing.append(f"the {s.scenario} output")
        turns = s.first_turn or ()
        if any(g.chosen_logprobs is None for g in turns):
            missing.append(f"the {s.scenario} scenario's first turn")
    return missing


def max_logprob_diff(
    reference: Generation | None,
    results: list[ScenarioResult],
    gathered: Sequence[ScenarioEvidence] = (),
) -> MeasureValue:
    """``max_logprob_diff`` (see the module docstring); unmeasured, naming them, when a
    compared generation returned no logprobs (``gathered``: the scenarios as gathered)."""
    if reference is None:
        return Unmeasured("the reference request failed")
    compared = _compared(results)
    if not compared:
        return Unmeasured("no scenario was compared")
    missing = _without_logprobs(reference, gathered, {r.scenario for r in compared})
    if missing:
        return Unmeasured(f"the engine returned no logprobs on {', '.join(missing)}")
    diffs = [(r.scenario, r.max_logprob_diff) for r in compared if r.max_logprob_diff is not None]
    diffs += [
        (f"{r.scenario}'s first turn", r.first_turn_logprob_diff)
        for r in compared
        if r.first_turn_logprob_diff is not None
    ]
    if not diffs:
        return Unmeasured("no scenario's output has logprobs where its tokens agree")
    nan = [name for name, d in diffs if math.isnan(d)]
    if nan:
        return Reading(math.nan, nan[0])
    name, value = max(diffs, key=lambda pair: pair[1])
    return Reading(value, name)


def cache_hits(results: list[ScenarioResult]) -> MeasureValue:
    """``cache_hits`` (see the module docstring)."""
    expecting = [r for r in _compared(results) if r.scenario in EXPECTS_HIT]
    if not expecting:
        return Unmeasured("no scenario that expects a cache hit was compared")
    silent = [r.scenario for r in expecting if r.hit == "unreported"]
    if silent:
        return Unmeasured(f"the engine reports no cached tokens ({', '.join(silent)})")
    missed = [r.scenario for r in expecting if r.hit == "no-hit"]
    if missed:
        return Finding(False, "; ".join(f"{s}: no cache hit (0 cached tokens)" for s in missed))
    return Finding(True)
