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
        ``flip_rate_upper`` (its Wilson upper bound at ``confidence``), ``logprob_diff``
        (the largest ``|chosen logprob - its reference's|``, naming where; unmeasured when no
        output and its reference both carry logprobs); unmeasured for a level of no
        requests. With ``beside``, consistency and the logprob delta name each model whose
        outputs changed (:func:`side_changes`)."""
        d = self.level
        n = d.requests
        if not n:
            none = Unmeasured(f"c{d.level} sent no request")
            return dict.fromkeys(
                ("error_rate", "consistency", "flip_rate", "flip_rate_upper", "logprob_diff"),
                none,
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
                d.consistency,
                f"{d.consistent}/{n} outputs equal to their reference" + side_changes(d),
            ),
            "logprob_diff": logprob_reading(d),
            "flip_rate": Reading(d.flip_rate, f"{d.flips}/{n}; point estimate"),
            "flip_rate_upper": Reading(
                upper, f"{d.flips}/{n}; Wilson upper bound at {self.confidence:g}"
            ),
        }


def side_changes(d: StressLevel) -> str:
    """With ``beside``: ``; changed: tuned 3/4 (s01 at token 0), base 1/4 (s02 at token 2)``
    (each model with an output unequal to its reference: how many of its requests, and its
    first listed mismatch); empty otherwise or when none changed."""
    parts = []
    for side, count in d.sides.items():
        changed = count.requests - count.consistent
        if not changed:
            continue
        first = next((m for m in d.mismatches if m.side == side), None)
        where = ""
        if first is not None:
            at = "" if first.first_divergence is None else f" at {first.unit or 'token'} "
            where = f" ({first.prompt_id}{at}{first.first_divergence if at else ''})"
        parts.append(f"{side} {changed}/{count.requests}{where}")
    return f"; changed: {', '.join(parts)}" if parts else ""


def logprob_reading(d: StressLevel) -> MeasureValue:
    """``logprob_diff`` with where its largest is (``request 5 (tuned, s01) token 2``) and,
    with ``beside``, each model's largest; unmeasured without logprobs on both sides."""
    worst = d.logprob_worst
    if d.logprob_diff is None or worst is None:
        return Unmeasured(
            f"c{d.level}: no output and its reference both carry logprobs of their tokens"
        )
    who = f"{worst.side}, {worst.prompt_id}" if worst.side else worst.prompt_id
    said = f"largest at request {worst.request} ({who}) token {worst.token}"
    each = [
        f"{side} {count.logprob_diff:.3g}"
        for side, count in d.sides.items()
        if count.logprob_diff is not None
    ]
    if each:
        said += f"; by model: {', '.join(each)}"
    return Reading(d.logprob_diff, said)
