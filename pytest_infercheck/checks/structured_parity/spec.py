"""structured-parity's spec facet: the YAML options (``targets``, ``paths``), the thresholds
(``allow``), the gates, how a check x suite is planned into items and labelled.

``structured-parity`` has no numeric threshold: its findings are the differences and
validity faults its judge names (:mod:`.judge`), ``allow`` listing the fields whose
differences pass. :data:`GATES` is therefore empty, and nothing is unmeasurable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast, get_args

from pydantic import Field, field_validator

from ...specs import KindSpec, KindThresholds, Loc, Side
from ...structured.records import Path
from ...structured.results import FieldName
from ...verdict.gate import Gate
from ..framework.plan import ItemPlan
from ..framework.target import side_label, target_label

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Suite

PATHS: tuple[Path, ...] = get_args(Path)
"""Every path, in the order an item sends them (``chat``, the reference, first)."""
REFERENCE: Path = "chat"


class StructuredParitySpec(KindSpec):
    """``targets`` (one or several; the first is the cross-target reference) and ``paths``
    (default: every path the target's backend can send, those its probe found lacking
    recorded ``unsupported``; ``chat`` is the reference and always sent)."""

    targets: list[str] = Field(min_length=1)
    """One or more model@backend targets; the first is the cross-target reference."""
    paths: list[Path] | None = None
    """The request paths sent (default: every path the backend can send); chat is the reference
    and must be listed."""

    @field_validator("targets")
    @classmethod
    def _distinct_targets(cls, value: list[str]) -> list[str]:
        twice = sorted({t for t in value if value.count(t) > 1})
        if twice:
            raise ValueError(f"a target is listed twice: {', '.join(twice)}")
        return value

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[Path] | None) -> list[Path] | None:
        if value is None:
            return value
        if REFERENCE not in value:
            raise ValueError("'chat' is the reference of every other path: list it")
        twice = sorted({p for p in value if value.count(p) > 1})
        if twice:
            raise ValueError(f"a path is listed twice: {', '.join(twice)}")
        return [p for p in PATHS if p in value]

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.targets[0], (*loc, "targets", 0))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [
            Side(side_label(ref, self.targets[0]), ref, (*loc, "targets", j))
            for j, ref in enumerate(self.targets)
            if j > 0
        ]

    def labels(self) -> list[str]:
        """Each target's label in item ids and texts, in order: the first its backend (its
        model when it names none), the others as :func:`~..framework.target.side_label`."""
        return [side_label(ref, self.targets[0]) for ref in self.targets]


class StructuredParityThresholds(KindThresholds):
    """``allow``: fields whose differences pass (still shown on the item and counted);
    validity faults and failed requests are never allowed."""

    allow: list[FieldName] = Field(default_factory=list)
    """Fields whose differences pass (still shown and counted); validity faults and failed
    requests are never allowed."""


GATES: tuple[Gate, ...] = ()
"""No threshold of this kind reads a measure (``allow`` qualifies the judge's findings)."""


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per prompt and target (``tu001[vllm]``); a single target: one per prompt
    (``tu001``)."""
    labels = cast(StructuredParitySpec, check.spec).labels()
    several = len(labels) > 1
    return [
        ItemPlan(p.id, "prompt", p.id, param=label if several else None)
        for p in suite.prompts
        for label in labels
    ]


def check_label(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """One target: :func:`~..framework.target.target_label`; several: the first target's model
    (``structured-parity(tiny)``)."""
    if len(cast(StructuredParitySpec, check.spec).targets) == 1:
        return target_label(loaded, check, index)
    side = check.baseline_side(index)
    return loaded.target(side.ref, side.loc).model
