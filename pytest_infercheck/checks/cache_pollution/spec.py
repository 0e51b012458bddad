"""cache-pollution's spec facet: its YAML options and its items (one per hostile request).

Options (under ``cache-pollution:``): ``target`` (a server) and ``hostile``, the hostile
requests to send, in order (:data:`HOSTILE_KINDS`). No thresholds: a dead server, a
changed reference output, a fault or a failed reference request fails an item whatever the
entry says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast, get_args

from pydantic import Field

from ...specs import TargetCheck
from ...verdict.gate import Gate
from ..framework.harness import Blind, HarnessProfile
from ..framework.plan import ItemPlan

if TYPE_CHECKING:
    from ...matrix import CheckSpec
    from ...suites import Suite

HostileKind = Literal[
    "context-overflow", "invalid-utf8", "special-tokens", "max-tokens-0", "disconnect"
]
HOSTILE_KINDS: tuple[HostileKind, ...] = get_args(HostileKind)


class CachePollutionSpec(TargetCheck):
    """Reference prompts, then each hostile request, then the reference prompts again."""

    hostile: list[HostileKind] = Field(default_factory=lambda: list(HOSTILE_KINDS), min_length=1)
    """The hostile requests sent between the reference prompts (default: every kind)."""


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per hostile kind, in the order written (role ``hostile``)."""
    hostile = cast(CachePollutionSpec, check.spec).hostile
    return [ItemPlan(kind, "hostile", kind) for kind in hostile]


GATES: tuple[Gate, ...] = ()
"""No thresholds: every finding is a rule of the judge."""


HARNESS = HarnessProfile(
    {"cache-pollution": {"target": "{target}", "hostile": ["special-tokens", "invalid-utf8"]}},
    blind=(
        *(
            Blind(
                "a prompt is rendered once and every request receives that rendering: a wrong "
                "rendering changes the prompt, not whether the outputs agree on it "
                "(tokenization checks renderings)",
                fault=fault,
                path="render",
            )
            for fault in ("changed-token", "empty", "truncated")
        ),
        Blind(
            "the kind has no reference that must be cold: it compares outputs whatever the "
            "cache served",
            fault="warm-reference",
        ),
        Blind(
            "a fault that changes every generation of the target alike is invisible to a kind "
            "that compares the target with itself",
            fault="changed-token",
            every=True,
        ),
        Blind(
            "no gate of the kind reads logprobs (it compares tokens and checks each output's "
            "own logprobs for faults): an output without logprobs has no fault to show",
            fault="no-logprobs",
        ),
    ),
    shapes=("llama-server", "openai"),
)
"""The verdict harness's check (``tests/harness``): two hostile requests on both shapes."""
