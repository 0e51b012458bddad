"""What the ``stress`` gather facet returns for one level, and publishes to the other
processes of the run as JSON: the level's record as measured, its near-tie outputs (scored
on the target under ``fail_on: decisive``), the requests that failed it outright, and its
measures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...metrics.past_tie import Rescored
from ...metrics.stats import wilson_interval
from ...verdict.conduct import Conduct, RequestFailure
from ...verdict.measure import MeasureValue, Reading, Unmeasured
from .records import StressLevel


@dataclass
class NearTie:
    """An output of the level that leaves its reference at a near-tie: its request's index,
    its prompt, the token where it parts, its slot in the level's listed ``mismatches``
    (None: beyond them), and (``fail_on: decisive``) both outputs scored on the target."""

    request: int
    prompt_id: str
    token: int
    slot: int | None = None
    output: Rescored | None = None
    reference: Rescored | None = None


@dataclass
class StressEvidence:
    """One level (see the module docstring). ``confidence``: the ``flips.confidence`` its
    flip rate's upper bound is read at."""

    level: StressLevel
    near_ties: list[NearTie] = field(default_factory=list)
    failures: list[RequestFailure] = field(default_factory=list)
    confidence: float = 0.95
    first_error: str | None = None
    """The first failed request's error in the server's words (``HTTP 503: busy``), which
    the error rate's violation names."""

    @property
    def conduct(self) -> Conduct:
        return Conduct(failures=list(self.failures))

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        """``error_rate`` (failed requests / requests), ``consistency`` (outputs equal to
        their reference / requests), ``flip_rate`` (flips / requests) and
        ``flip_rate_upper`` (its Wilson upper bound at ``confidence``); unmeasured for a
        level of no requests."""
        d = self.level
        n = d.requests
        if not n:
            none = Unmeasured(f"c{d.level} sent no request")
            return dict.fromkeys(
                ("error_rate", "consistency", "flip_rate", "flip_rate_upper"), none
            )
        failed = sum(d.errors.values())
        kinds = ", ".join(f"{k} x{v}" for k, v in d.errors.items())
        first = f"; first: {self.first_error}" if self.first_error else ""
        upper = wilson_interval(d.flips, n, self.confidence)[1]
        return {
            "error_rate": Reading(
                d.error_rate, f"{failed}/{n}" + (f": {kinds}{first}" if kinds else "")
            ),
            "consistency": Reading(
                d.consistency, f"{d.consistent}/{n} outputs equal to their reference"
            ),
            "flip_rate": Reading(d.flip_rate, f"{d.flips}/{n}; point estimate"),
            "flip_rate_upper": Reading(
                upper, f"{d.flips}/{n}; Wilson upper bound at {self.confidence:g}"
            ),
        }
