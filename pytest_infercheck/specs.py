"""The building blocks of the YAML matrix that check kinds share: strict models, a check's
sides, the thresholds of a check entry, and the base of every kind's options.

A kind's own options model lives in the kind's module and derives from :class:`KindSpec`;
:mod:`.config` assembles the check entry from the registry of kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from .backends.registry import SERVER_KINDS as SERVER_KINDS  # from the backend registry
from .metrics.ties import DEFAULT_TIE_MARGIN
from .strict import Strict as _Strict

Loc = tuple[str | int, ...]
"""Where a value is written in the YAML: ``("checks", 0, <kind key>, "test")``."""


@dataclass(frozen=True)
class Side:
    """One side of a check: its label in item ids (None for compare), ref and YAML loc."""

    label: str | None
    ref: str
    loc: Loc


class KindSpec(_Strict):
    """The options under a kind's YAML key; says which targets the check runs."""

    golden_baseline: ClassVar[bool] = False
    """Whether the baseline may be a golden file (``golden:NAME``)."""

    def baseline_side(self, loc: Loc) -> Side:
        """The baseline (a single-target check: its target); ``loc`` is the kind key's."""
        raise NotImplementedError

    def test_sides(self, loc: Loc) -> list[Side]:
        """The sides compared with the baseline, in the user's order (none for a
        single-target check)."""
        return []


class FlipThresholds(_Strict):
    """Answer-flip gates.

    ``fail_item_on``: which flip fails a prompt's item (``correct_to_wrong``, ``any`` flip, or
    ``never``). ``max_rate``: suite gate on the flip rate, compared with the upper bound of
    its Wilson interval at ``confidence`` (or the point estimate with ``gate: point``).
    """

    fail_item_on: Literal["correct_to_wrong", "any", "never"] = "correct_to_wrong"
    """Which answer flip fails a prompt's item: correct_to_wrong (the default), any flip, or
    never."""
    max_rate: float | None = Field(default=None, ge=0, le=1)
    """Suite gate: the largest flip rate allowed, compared with the upper bound of its Wilson
    interval at confidence (or the point estimate with gate: point). None: not gated."""
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """The confidence of the Wilson interval that max_rate is compared with (default 0.95)."""
    gate: Literal["upper", "point"] = "upper"
    """What max_rate is compared with: upper (the Wilson upper bound, the default) or point (the
    observed rate)."""


class KindThresholds(_Strict):
    """The base of a kind's thresholds: the keys of a check entry beside the kind key that
    hold the check to limits. Each kind declares its own model (``CheckKind.thresholds``)
    from the field groups below; a threshold the kind does not declare is a configuration
    error at its line, so no limit the user wrote is silently ignored."""


class SimilarityGate(KindThresholds):
    """``min_similarity``: per item, the text similarity (difflib ratio) of the two outputs."""

    min_similarity: float | None = Field(default=None, ge=0, le=1)
    """Per item: the least text similarity (difflib ratio, 0 to 1) of the two outputs. None: not
    gated."""


class FlipGates(KindThresholds):
    """``flips``: which answer flip fails an item and the suite gate on the flip rate."""

    flips: FlipThresholds = FlipThresholds()
    """Answer-flip gates: which flip fails an item (fail_item_on) and the suite gate on the flip
    rate (max_rate, confidence, gate)."""


class ErrorRate(KindThresholds):
    """``max_error_rate``: the share of failed requests allowed (0: none)."""

    max_error_rate: float = Field(default=0.0, ge=0, le=1)
    """The largest share of failed requests allowed (default 0: none)."""


class LogprobTolerance(KindThresholds):
    """``logprob_tolerance``: the largest |logprob difference| allowed where tokens are
    identical."""

    logprob_tolerance: float = Field(default=1e-4, ge=0)
    """The largest |logprob difference| allowed where the tokens are identical (default 1e-4)."""


class TieGates(KindThresholds):
    """How a first divergence is labelled and whether a near-tie fails
    (:mod:`~pytest_infercheck.metrics.ties`). ``tie_margin`` (nats, > 0): a divergence is a
    ``near-tie`` when both sides' margins are at most this (default 0.01: float16 KV and
    flash-attention reorderings were measured at up to ~1.4e-3; a bfloat16 engine may set
    more). ``fail_on``: ``any`` (the default, strict) fails a divergent item as its gates
    say; ``decisive`` lets an item whose only fault is a ``near-tie`` divergence pass."""

    tie_margin: float = Field(default=DEFAULT_TIE_MARGIN, gt=0)
    """Nats (> 0): a divergence is a near-tie when both sides' margins between their top two
    tokens are at most this (default 0.01)."""
    fail_on: Literal["any", "decisive"] = "any"
    """any (the default): a divergent item fails as its gates say; decisive: an item whose only
    fault is a near-tie divergence passes."""


class Thresholds(SimilarityGate, FlipGates, TieGates):
    """The thresholds of a comparison (compare, sweep, diff). Per item: ``max_kl``
    (teacher-forced mean KL of the prompt), ``max_kl_position`` (its largest KL_t),
    ``min_similarity`` (text), ``flips.fail_item_on``. Per suite: ``max_mean_kl`` (pooled mean
    KL), ``min_same_top`` (argmax agreement rate), ``flips.max_rate``. Besides:
    ``tie_margin`` and ``fail_on`` (:class:`TieGates`)."""

    max_kl: float | None = Field(default=None, ge=0)
    """Per item: the largest teacher-forced mean KL(baseline || test) over the prompt's
    positions, in nats. None: not gated."""
    max_kl_position: float | None = Field(default=None, ge=0)
    """Per item: the largest KL at any one position (max_t KL_t), in nats. None: not gated."""
    max_mean_kl: float | None = Field(default=None, ge=0)
    """Suite gate: the largest pooled mean KL over every position of every prompt, in nats.
    None: not gated."""
    min_same_top: float | None = Field(default=None, ge=0, le=1)
    """Suite gate: the least share of positions where both sides' most likely token agrees (0 to
    1). None: not gated."""


class TargetCheck(KindSpec):
    """A check of one ``model@backend``; ``determinism: q4@llama`` is short for
    ``determinism: {target: q4@llama}``."""

    target: str
    """The model@backend checked (MODEL alone when the matrix has one backend)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"target": value} if isinstance(value, str) else value

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.target, (*loc, "target"))
