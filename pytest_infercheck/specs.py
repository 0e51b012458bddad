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
    max_rate: float | None = Field(default=None, ge=0, le=1)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    gate: Literal["upper", "point"] = "upper"


class KindThresholds(_Strict):
    """The base of a kind's thresholds: the keys of a check entry beside the kind key that
    hold the check to limits. Each kind declares its own model (``CheckKind.thresholds``)
    from the field groups below; a threshold the kind does not declare is a configuration
    error at its line, so no limit the user wrote is silently ignored."""


class SimilarityGate(KindThresholds):
    """``min_similarity``: per item, the text similarity (difflib ratio) of the two outputs."""

    min_similarity: float | None = Field(default=None, ge=0, le=1)


class FlipGates(KindThresholds):
    """``flips``: which answer flip fails an item and the suite gate on the flip rate."""

    flips: FlipThresholds = FlipThresholds()


class ErrorRate(KindThresholds):
    """``max_error_rate``: the share of failed requests allowed (0: none)."""

    max_error_rate: float = Field(default=0.0, ge=0, le=1)


class LogprobTolerance(KindThresholds):
    """``logprob_tolerance``: the largest |logprob difference| allowed where tokens are
    identical."""

    logprob_tolerance: float = Field(default=1e-4, ge=0)


class TieGates(KindThresholds):
    """How a first divergence is labelled and whether a near-tie fails
    (:mod:`~pytest_infercheck.metrics.ties`). ``tie_margin`` (nats, > 0): a divergence is a
    ``near-tie`` when both sides' margins are at most this (default 0.01: float16 KV and
    flash-attention reorderings were measured at up to ~1.4e-3; a bfloat16 engine may set
    more). ``fail_on``: ``any`` (the default, strict) fails a divergent item as its gates
    say; ``decisive`` lets an item whose only fault is a ``near-tie`` divergence pass."""

    tie_margin: float = Field(default=DEFAULT_TIE_MARGIN, gt=0)
    fail_on: Literal["any", "decisive"] = "any"


class Thresholds(SimilarityGate, FlipGates, TieGates):
    """The thresholds of a comparison (compare, sweep, diff). Per item: ``max_kl``
    (teacher-forced mean KL of the prompt), ``max_kl_position`` (its largest KL_t),
    ``min_similarity`` (text), ``flips.fail_item_on``. Per suite: ``max_mean_kl`` (pooled mean
    KL), ``min_same_top`` (argmax agreement rate), ``flips.max_rate``. Besides:
    ``tie_margin`` and ``fail_on`` (:class:`TieGates`)."""

    max_kl: float | None = Field(default=None, ge=0)
    max_kl_position: float | None = Field(default=None, ge=0)
    max_mean_kl: float | None = Field(default=None, ge=0)
    min_same_top: float | None = Field(default=None, ge=0, le=1)


class TargetCheck(KindSpec):
    """A check of one ``model@backend``; ``determinism: q4@llama`` is short for
    ``determinism: {target: q4@llama}``."""

    target: str

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"target": value} if isinstance(value, str) else value

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.target, (*loc, "target"))
