"""The comparison kinds: a test side against a baseline, prompt by prompt.

- ``compare``: two targets (``compare(bf16-vs-q4)``); the baseline may be a golden file;
- ``sweep``: several models against one baseline (``sweep(bf16)``, items ``r017[q4]``), the
  baseline generated twice first (``self-check``), the degradation cliff named across levels;
- ``diff``: one model across backends, the first the baseline (``diff(bf16)``, items
  ``r017[llama]``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from ...golden.record import GoldenRecording
from ...specs import COMPARISON_THRESHOLDS, KindSpec, Loc, Side
from ..protocol import CheckKind
from .aggregate import DEFAULT_CLIFF_ALPHA, ComparisonAggregateRecord, SweepAggregateRecord
from .present import (
    FLIP_BARS,
    KL_DISTRIBUTION,
    MEASURES,
    comparison_aggregate,
    comparison_prompt,
    flip_rate_gates,
    level_charts,
    merge_aggregate,
    self_check,
    side_columns,
    summary_lines,
)
from .prompt import PromptComparison
from .run import SELF_CHECK, ComparisonRun, SelfCheckRecord

if TYPE_CHECKING:
    from ...config import CheckSpec, LoadedMatrix, Target


class ComparisonSpec(KindSpec):
    """The options of a comparison kind."""

    sides_are_levels: ClassVar[bool] = False
    """The test sides are levels of one model (a sweep): name the degradation cliff."""

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

    sides_are_levels: ClassVar[bool] = True

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


def baseline_model(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``sweep(bf16)``, ``diff(bf16)``: the baseline's model."""
    side = check.baseline_side(index)
    return loaded.target(side.ref, side.loc).model


def both_sides(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``compare(bf16-vs-q4)``; backends appear only where they tell the sides apart."""
    baseline = check.baseline_side(index)
    base = loaded.target(baseline.ref, baseline.loc)
    (side,) = check.test_sides(index)
    test = loaded.target(side.ref, side.loc)
    return f"{_side(base, test)}-vs-{_side(test, base)}"


def _side(target: Target, other: Target) -> str:
    if target.backend == other.backend:
        return target.model
    return target.model if target.model != other.model else f"{target.model}.{target.backend}"


_VIEWS = {"prompt": comparison_prompt, "aggregate": comparison_aggregate}
_RECORDS = {"prompt": PromptComparison, "aggregate": ComparisonAggregateRecord}
"""What each item records, by role; a compare also records a golden (``record``), a sweep
checks its baseline first (``self-check``) and names its cliff."""

COMPARE = CheckKind(
    name="compare",
    spec=CompareSpec,
    run=ComparisonRun,
    label=both_sides,
    thresholds=COMPARISON_THRESHOLDS,
    family="comparison",
    summary_lines=summary_lines,
    records={**_RECORDS, "record": GoldenRecording},
    views=_VIEWS,
    measures=MEASURES,
    other_measures=False,
    columns=side_columns,
    bars=FLIP_BARS,
    distribution=KL_DISTRIBUTION,
    merge=merge_aggregate,
    rate_gates=flip_rate_gates,
)
SWEEP = dataclasses.replace(
    COMPARE,
    name="sweep",
    spec=SweepSpec,
    label=baseline_model,
    charts=level_charts,
    records={**_RECORDS, "aggregate": SweepAggregateRecord, SELF_CHECK: SelfCheckRecord},
    views={**_VIEWS, SELF_CHECK: self_check},
)
DIFF = dataclasses.replace(
    COMPARE, name="diff", spec=DiffSpec, label=baseline_model, records=_RECORDS
)
