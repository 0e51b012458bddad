"""The ``stress`` kind's YAML, items and gates: the suite at increasing concurrency.

Items: one per level (``c1``, ``c2``, ... role ``level``) plus ``aggregate``. With
``beside`` (the isolation scenario), each level also sends the same prompts to other models
served by the target's backend (a LoRA adapter on the same server, a second adapter),
interleaved with the target's own requests; each request's reference is its own model's
output alone on that server. Gates, per level (each reads a measure of
:class:`~.evidence.StressEvidence`):

- ``max_error_rate``: ``error_rate``, failed requests / requests;
- ``min_consistency``: ``consistency``, outputs equal to their reference / requests (an
  error counts as inconsistent); with ``fail_on: decisive`` the outputs that leave their
  reference at a near-tie and were judged past it count as consistent (:mod:`.judge`);
- ``logprob_tolerance``: ``logprob_diff``, the largest ``|chosen logprob - its reference's|``
  over every output's tokens before its first divergence. Written, a gate like any other
  (unmeasured without logprobs: it fails). Not written: with ``beside``, its default (1e-4)
  applies where logprobs were compared (:mod:`.judge`), not required of a backend that
  gives none; without ``beside``, logprobs are not gated (as before isolation);
- ``flips.max_rate``: the flip rate, on the upper bound of its Wilson interval at
  ``flips.confidence`` (``flip_rate_upper``) or the point estimate with ``gate: point``
  (``flip_rate``); a bound that cannot pass at the smallest level's size is a collection
  error (:func:`flip_rate_gates`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pydantic import Field, field_validator

from ...specs import (
    SERVER_KINDS,
    ErrorRate,
    FlipGates,
    FlipThresholds,
    Loc,
    LogprobTolerance,
    Side,
    TargetCheck,
    TieGates,
)
from ...verdict.gate import Gate
from ..framework.harness import BOTH_SHAPES, NO_LOGPROB_GATE, SELF_COMPARED, HarnessProfile
from ..framework.kind import RateGate
from ..framework.plan import ItemPlan
from ..framework.target import no_logprobs_reason
from .measure import jobs_for

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Suite


class StressSpec(TargetCheck):
    """The suite at each concurrency level; ``repeats`` copies of every prompt per level, so a
    prompt is also in flight with itself."""

    levels: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16],
        min_length=1,
        json_schema_extra={"uniqueItems": True, "items": {"type": "integer", "minimum": 1}},
    )
    """The concurrency levels, distinct integers >= 1 (default 1, 2, 4, 8, 16)."""
    repeats: int = Field(default=2, ge=1)
    """Copies of every prompt per level, so a prompt is in flight with itself (default 2)."""
    beside: list[str] = Field(
        default_factory=list, json_schema_extra={"uniqueItems": True, "items": {"type": "string"}}
    )
    """Isolation: other MODELS served by the target's backend (the same base with a LoRA
    adapter, a second adapter), whose requests each level interleaves with the target's; each
    request is compared with its own model's output alone on that server, and a change names
    its model (default: none)."""

    @field_validator("beside")
    @classmethod
    def _beside(cls, value: list[str]) -> list[str]:
        if any("@" in name for name in value):
            raise ValueError(
                "beside names models served by the target's backend (MODEL, not MODEL@BACKEND)"
            )
        if len(set(value)) != len(value):
            raise ValueError("beside names each model once")
        return value

    def beside_refs(self) -> list[str]:
        """Each ``beside`` model on the target's backend (``MODEL@BACKEND``, or ``MODEL`` when
        the target names no backend)."""
        _, at, backend = self.target.partition("@")
        return [f"{name}{at}{backend}" for name in self.beside]

    def test_sides(self, loc: Loc) -> list[Side]:
        """The ``beside`` models, each labelled by its name (resolved, started and checked
        for adapters like any side)."""
        return [
            Side(name, ref, (*loc, "beside", i))
            for i, (name, ref) in enumerate(zip(self.beside, self.beside_refs(), strict=True))
        ]

    @field_validator("levels")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        if any(level < 1 for level in value) or len(set(value)) != len(value):
            raise ValueError("levels must be distinct integers >= 1")
        return sorted(value)


class StressThresholds(ErrorRate, FlipGates, TieGates, LogprobTolerance):
    """Per level: ``min_consistency`` (the share of outputs equal to their reference; with
    ``fail_on: decisive`` an output that leaves it at a near-tie and was judged past it counts
    as consistent, :class:`~pytest_infercheck.specs.TieGates`, whose ``tie_margin`` labels a
    divergence), ``max_error_rate`` (the share of failed requests), ``flips.max_rate`` (the
    flip rate, on the upper bound of its Wilson interval at ``flips.confidence`` or the point
    estimate with ``gate: point``), ``logprob_tolerance`` (the largest |chosen logprob - its
    reference's| before the first divergence; not written, its default applies only with
    ``beside``). A level has no single answer, so ``flips.fail_item_on``
    other than its default is refused rather than ignored."""

    min_consistency: float = Field(default=1.0, ge=0, le=1)
    """Per level: the least share of outputs equal to their reference (default 1.0)."""

    @field_validator("flips")
    @classmethod
    def _rate_only(cls, value: FlipThresholds) -> FlipThresholds:
        if value.fail_item_on != FlipThresholds().fail_item_on:
            raise ValueError(
                "stress does not use flips.fail_item_on: it gates each level's flip rate "
                "(flips.max_rate)"
            )
        return value


def flip_measure(thresholds: Any) -> str:
    """The measure ``flips.max_rate`` reads: the Wilson upper bound, or the point estimate
    with ``gate: point``."""
    return "flip_rate_upper" if thresholds.flips.gate == "upper" else "flip_rate"


def tolerance_written(thresholds: Any) -> bool:
    """Whether the check entry writes ``logprob_tolerance`` (not only its default)."""
    return "logprob_tolerance" in thresholds.model_fields_set


GATES = (
    Gate("max_error_rate", "error_rate", "max", "error rate"),
    Gate("min_consistency", "consistency", "min", "consistency"),
    Gate(
        "logprob_tolerance",
        "logprob_diff",
        "max",
        "largest |logprob difference| from the reference",
        written=tolerance_written,
    ),
    Gate("flips.max_rate", flip_measure, "max", "flip rate"),
)


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per level, ``c<level>``."""
    levels = cast(StressSpec, check.spec).levels
    return [ItemPlan(f"c{level}", "level", str(level)) for level in levels]


def flip_rate_gates(check: CheckSpec, suite: Suite) -> list[RateGate]:
    """``flips.max_rate`` on the upper Wilson bound of each level's flip rate, counted over
    the level's requests: the smallest level sends the fewest."""
    gate = cast(StressThresholds, check.kind_thresholds()).flips
    if gate.max_rate is None or gate.gate != "upper":
        return []
    spec = cast(StressSpec, check.spec)
    level = min(spec.levels)
    n = len(jobs_for(suite.prompts, level, spec.repeats))
    copies = n // max(len(suite.prompts), 1)
    return [
        RateGate(
            field=("flips", "max_rate"),
            max_rate=gate.max_rate,
            confidence=gate.confidence,
            n=n,
            trials=f"{n} requests at c{level} ({len(suite.prompts)} prompts x {copies})",
            unit="requests per level (prompts x repeats)",
        )
    ]


def refuse(loaded: LoadedMatrix, check: CheckSpec, index: int) -> list[tuple[Loc, str]]:
    """``beside`` on a target that is not a server (in-process, every model is its own
    engine: nothing is shared), at its line."""
    spec = cast(StressSpec, check.spec)
    if not spec.beside:
        return []
    loc: Loc = ("checks", index, "stress", "beside")
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    kind = loaded.matrix.backends[target.backend].kind
    if kind not in SERVER_KINDS:
        return [
            (
                loc,
                f"beside needs a server backend ({', '.join(SERVER_KINDS)}), where one engine "
                f"serves every model: {target.label} runs in-process ({kind}), each model its "
                "own engine",
            )
        ]
    return []


def unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> dict[str, str]:
    """``logprob_tolerance`` on a target known from the matrix to return no logprobs."""
    reason = no_logprobs_reason(loaded, check, index)
    return {} if reason is None else {"logprob_tolerance": f"not measured on any item: {reason}"}


HARNESS = HarnessProfile(
    {
        "stress": {"target": "{target}", "levels": [2], "repeats": 1},
        "min_consistency": 1.0,
        "max_error_rate": 0.0,
    },
    blind=(*SELF_COMPARED, NO_LOGPROB_GATE),
    shapes=BOTH_SHAPES,
)
"""The verdict harness's check (``tests/harness``)."""
