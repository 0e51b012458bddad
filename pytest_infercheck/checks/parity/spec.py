"""The spec facet of stream-parity and endpoint-parity: their YAML options, thresholds and
gates, how their items are planned and labelled.

Gates (each reads one measure of an item's evidence, :mod:`.evidence`):

- stream-parity ``logprob_tolerance`` reads ``logprob_drift``: ``max |logprob_a -
  logprob_b|`` of the chosen tokens over the positions where both outputs have the same
  token after the same prefix (every position when they match, those before the first
  divergence otherwise). Written by the check (``logprob_tolerance: 1e-4`` in its entry),
  a drift that cannot be measured (a side returned no logprobs, the outputs part at their
  first token) fails the item naming why; not written, its default (1e-4) still judges a
  drift that was measured (:func:`default_gate`), and an unmeasured one is only said.
- endpoint-parity ``min_similarity`` reads ``similarity`` (difflib ratio of the two texts):
  written, as the gate says; not written, 1.0 (the same text) judges a measured similarity
  (:func:`default_gate`). ``flips.fail_item_on`` is the judge's (an answer flip of a kind the
  entry names fails the item; source ``flips.fail_item_on``).

Neither kind has suite gates: their aggregates fail for their failed and errored items (the
framework's rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field, field_validator

from ...specs import (
    FlipGates,
    FlipThresholds,
    LogprobTolerance,
    SimilarityGate,
    TargetCheck,
    TieGates,
)
from ...verdict.gate import Gate
from ..framework.harness import BOTH_SHAPES, NO_COLD_REFERENCE, RENDERED_ONCE, TIGHT, HarnessProfile
from ..framework.plan import ItemPlan
from ..framework.target import no_logprobs_reason

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Suite

Endpoint = Literal["completions", "chat", "messages"]
StreamMode = Literal["non-streamed", "streamed"]


class StreamParitySpec(TargetCheck):
    """The same request streamed (SSE) and not streamed."""


class EndpointParitySpec(TargetCheck):
    """The same templated prompt through each endpoint; the first is the reference."""

    endpoints: list[Endpoint] = Field(
        default_factory=lambda: list[Endpoint](["completions", "chat"]), min_length=2
    )
    """Two or more endpoints (completions, chat, messages); the first is the reference."""


class StreamParityThresholds(LogprobTolerance, TieGates):
    """``logprob_tolerance`` (:class:`~pytest_infercheck.specs.LogprobTolerance`);
    ``tie_margin`` labels an item's divergence, ``fail_on: decisive`` waives a difference that
    parts at a near-tie once what follows it was judged
    (:class:`~pytest_infercheck.specs.TieGates`, :mod:`.judge`)."""


class EndpointParityThresholds(SimilarityGate, FlipGates, TieGates):
    """Per item: ``min_similarity`` (None: 1.0, the same text) and ``flips.fail_item_on``;
    ``tie_margin`` and ``fail_on`` (:class:`~pytest_infercheck.specs.TieGates`).
    The aggregate has no flip-rate gate, so ``flips.max_rate`` (and its ``confidence`` and
    ``gate``) are refused rather than ignored."""

    @field_validator("flips")
    @classmethod
    def _item_flips_only(cls, value: FlipThresholds) -> FlipThresholds:
        default = FlipThresholds()
        unused = [
            f"flips.{key}"
            for key in ("max_rate", "confidence", "gate")
            if getattr(value, key) != getattr(default, key)
        ]
        if unused:
            raise ValueError(
                f"endpoint-parity does not use {', '.join(unused)}: it judges each item's "
                "answer flip (flips.fail_item_on) and has no flip-rate gate"
            )
        return value


def _written(key: str) -> Any:
    """Whether the check entry writes ``key`` (a default is not written)."""
    return lambda thresholds: key in thresholds.model_fields_set


LOGPROB_TOLERANCE = Gate(
    "logprob_tolerance",
    "logprob_drift",
    "max",
    "logprob drift with identical tokens",
    written=_written("logprob_tolerance"),
)
MIN_SIMILARITY = Gate(
    "min_similarity",
    "similarity",
    "min",
    "similarity",
    written=lambda thresholds: thresholds.min_similarity is not None,
)
STREAM_GATES: tuple[Gate, ...] = (LOGPROB_TOLERANCE,)
ENDPOINT_GATES: tuple[Gate, ...] = (MIN_SIMILARITY,)
DEFAULT_MIN_SIMILARITY = 1.0
"""``min_similarity`` when the entry does not write it: the same text."""


def default_gate(gate: Gate, thresholds: Any) -> tuple[Gate, Any] | None:
    """The gate that judges a *measured* value when ``gate`` is not written, with the
    thresholds it reads (``logprob_tolerance``: its default 1e-4; ``min_similarity``: 1.0);
    None when ``gate`` is written (the framework judges it)."""
    if gate.is_written(thresholds):
        return None
    always = dataclasses.replace(gate, written=lambda t: True)
    if gate.key == "min_similarity":
        return always, thresholds.model_copy(update={"min_similarity": DEFAULT_MIN_SIMILARITY})
    return always, thresholds


def endpoint_plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per prompt and endpoint after the first (the reference): ``s01[chat]``."""
    endpoints = cast(EndpointParitySpec, check.spec).endpoints
    return [
        ItemPlan(p.id, "prompt", p.id, param=endpoint)
        for p in suite.prompts
        for endpoint in endpoints[1:]
    ]


def stream_unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> Mapping[str, str]:
    """``logprob_tolerance`` written on a target known from the matrix to return no logprobs
    can never be measured: a collection error at its line."""
    reason = no_logprobs_reason(loaded, check, index)
    if reason is None:
        return {}
    return {"logprob_tolerance": f"not measured on any item: {reason}"}


STREAM_HARNESS = HarnessProfile(
    {"stream-parity": {"target": "{target}"}, "logprob_tolerance": TIGHT},
    blind=(*RENDERED_ONCE, NO_COLD_REFERENCE),
    shapes=BOTH_SHAPES,
)
"""stream-parity's check in the verdict harness (``tests/harness``)."""
ENDPOINT_HARNESS = HarnessProfile(
    {
        "endpoint-parity": {
            "target": "{target}",
            "endpoints": ["completions", "chat", "messages"],
        },
        "min_similarity": 1.0,
        "flips": {"fail_item_on": "any"},
    },
    blind=(NO_COLD_REFERENCE,),
    shapes=BOTH_SHAPES,
)
"""endpoint-parity's check in the verdict harness (``tests/harness``)."""
