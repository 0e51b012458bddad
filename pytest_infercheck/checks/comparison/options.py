"""What a comparison check entry says: the options under its kind key (compare, sweep, diff)
and the thresholds beside it.

The thresholds of compare and sweep are :class:`~pytest_infercheck.specs.Thresholds` (re-
exported here); a diff's are :class:`DiffThresholds`, which adds ``expect``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ...specs import KindSpec, Loc, Side, Thresholds

__all__ = [
    "DEFAULT_CLIFF_ALPHA",
    "CompareSpec",
    "ComparisonSpec",
    "DiffSpec",
    "DiffThresholds",
    "SweepSpec",
    "Thresholds",
]

DEFAULT_CLIFF_ALPHA = 0.05
"""The default significance level of the degradation cliff's McNemar test."""


class ComparisonSpec(KindSpec):
    """The options of a comparison kind."""

    def runs_self_check(self) -> bool:
        """Whether the baseline is generated twice first and must reproduce itself."""
        return False


class CompareSpec(ComparisonSpec):
    """Two targets: ``compare: {baseline: bf16@local, test: q4@local}``."""

    golden_baseline: ClassVar[bool] = True

    baseline: str
    test: str

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.baseline, (*loc, "baseline"))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [Side(None, self.test, (*loc, "test"))]


class SweepSpec(ComparisonSpec):
    """Several models against one baseline, each labelled by its model in item ids, in the
    user's order. ``self_check``: generate the baseline twice first; it must reproduce
    itself. The aggregate names the degradation cliff: the first level whose failed items
    rise significantly over the previous level's (exact McNemar test at ``cliff_alpha``,
    default 0.05; the self-check is the level before the first), or whose mean KL crosses
    ``max_mean_kl`` while the previous level's does not."""

    baseline: str
    models: list[str] = Field(min_length=1)
    self_check: bool = True
    cliff_alpha: float = Field(default=DEFAULT_CLIFF_ALPHA, gt=0, lt=1)

    def runs_self_check(self) -> bool:
        return self.self_check

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.baseline, (*loc, "baseline"))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [
            Side(ref.partition("@")[0], ref, (*loc, "models", j))
            for j, ref in enumerate(self.models)
        ]


class DiffSpec(ComparisonSpec):
    """One model across backends; the first backend is the baseline."""

    model: str
    backends: list[str] = Field(min_length=2)

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, f"{self.model}@{self.backends[0]}", (*loc, "backends", 0))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [
            Side(backend, f"{self.model}@{backend}", (*loc, "backends", j))
            for j, backend in enumerate(self.backends)
            if j > 0
        ]


class DiffThresholds(Thresholds):
    """The thresholds of a ``diff`` (one model, two engines or configurations): those of a
    comparison, and ``expect``. ``identical`` (the default): an item fails when its outputs
    are not the same (token ids where both sides received one prompt's ids, else text: the
    sameness verdict of :func:`~pytest_infercheck.metrics.sameness.compare_outputs`), besides
    any threshold written; ``budget``: only the thresholds written apply (a diff with none is
    ``ungated``).

    ``require_engaged``: an item whose side's feature never engaged (speculative decoding
    that accepted no drafted token, a KV cache never quantized: ``unexercised``, see
    :mod:`~pytest_infercheck.features`) fails; without it, it passes with an
    :class:`~.gates.UnexercisedFeatureWarning`, since it proved nothing about the
    feature."""

    expect: Literal["identical", "budget"] = "identical"
    require_engaged: bool = False
