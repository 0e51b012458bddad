"""cache-pollution's spec facet: its YAML options and its items (one per hostile request).

Options (under ``cache-pollution:``): ``target`` (a server) and ``hostile``, the hostile
requests to send, in order (:data:`HOSTILE_KINDS`). No thresholds: a dead server, a
changed reference output, a fault or a failed reference request fails an item whatever the
entry says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

from pydantic import Field

from ...specs import TargetCheck
from ...verdict.gate import Gate
from ..framework.plan import ItemPlan

if TYPE_CHECKING:
    from ...matrix import CheckSpec
    from ...suites import Suite

HostileKind = Literal[
    "context-overflow", "invalid-utf8", "special-tokens", "max-tokens-0", "disconnect"
]
HOSTILE_KINDS: tuple[HostileKind, ...] = (
    "context-overflow",
    "invalid-utf8",
    "special-tokens",
    "max-tokens-0",
    "disconnect",
)


class CachePollutionSpec(TargetCheck):
    """Reference prompts, then each hostile request, then the reference prompts again."""

    hostile: list[HostileKind] = Field(default_factory=lambda: list(HOSTILE_KINDS), min_length=1)


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per hostile kind, in the order written (role ``hostile``)."""
    hostile = cast(CachePollutionSpec, check.spec).hostile
    return [ItemPlan(kind, "hostile", kind) for kind in hostile]


GATES: tuple[Gate, ...] = ()
"""No thresholds: every finding is a rule of the judge."""
