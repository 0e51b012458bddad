"""The spec facet of tokenization: its YAML options (the targets, the first the reference;
the tokenizer properties it allows), how its items are planned (one per prompt and other
target) and labelled (by the reference's model). The check has no thresholds and no gates:
an item fails for tokenizations that differ (unless by an allowed tokenizer property) or
for a failed request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

from pydantic import Field

from ...specs import KindSpec, Loc, Side
from ..framework.harness import HarnessProfile
from ..framework.plan import ItemPlan
from ..framework.target import side_label

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Suite

Allowed = Literal["normalization", "control-tokens"]
Source = Literal["render", "tokenize-endpoint", "usage", "none"]


class TokenizationSpec(KindSpec):
    """The prompts tokenized by each of ``targets`` (the first is the reference); ``allow``:
    tokenizer properties that pass (still named on the item)."""

    targets: list[str] = Field(min_length=2)
    """Two or more model@backend targets; the first is the reference."""
    allow: list[Allowed] = Field(default_factory=list)
    """Tokenizer properties whose differences pass (normalization, control-tokens), still named
    on the item."""

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.targets[0], (*loc, "targets", 0))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [
            Side(side_label(ref, self.targets[0]), ref, (*loc, "targets", j))
            for j, ref in enumerate(self.targets)
            if j > 0
        ]


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per prompt and other target: ``p01[llama]``."""
    sides = cast(TokenizationSpec, check.spec).test_sides(())
    return [
        ItemPlan(p.id, "prompt", p.id, param=side.label) for p in suite.prompts for side in sides
    ]


def reference_model(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``tokenization(adder)``: the reference target's model."""
    side = check.baseline_side(index)
    return loaded.target(side.ref, side.loc).model


HARNESS = HarnessProfile({"tokenization": {"targets": ["{reference}", "{target}"]}})
"""The verdict harness's check (``tests/harness``): the reference and the target under test
(the fake engine as ``llama-server``; its ``openai`` shape has no tokenizer). Blind to
nothing: a rendering the harness changes, empties or cuts must fail."""
