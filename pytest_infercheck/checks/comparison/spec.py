"""The spec facet of the comparison kinds (compare, sweep, diff): what a check entry says
(the options under its kind key, the thresholds beside it), every gate with the measure it
reads, the items a check x suite plans, and what is known from the matrix alone.

The thresholds of compare and sweep are :class:`~pytest_infercheck.specs.Thresholds`
(re-exported here); a diff's are :class:`DiffThresholds`, which adds ``expect``.

Gates (:data:`GATES`, judged by the framework, :mod:`~pytest_infercheck.verdict.gate`):

- per item, on the evidence's measures: ``max_kl`` reads the prompt's mean ``KL_t``
  (``kl_mean``), ``max_kl_position`` its largest (``kl_max``), both a lower bound for the
  top-k methods and not measured for ``text`` (no logprobs to compare: the item fails naming
  the gate and why); ``min_similarity`` the text similarity; a diff's ``expect: identical``
  whether the two outputs are the same (``identical``);
- per suite and test side, on the aggregate's measures: ``max_mean_kl`` the pooled mean
  ``KL_t`` (not measured when a prompt of the side was compared by text only),
  ``min_same_top`` the argmax agreement rate (not measured when a prompt of the side was
  compared by a method without a teacher-forced argmax: ``top-k-lower-bound``, ``text``),
  ``flips.max_rate`` the flip rate's upper Wilson bound (``flips.gate: upper``) or its point
  estimate (``point``), not measured when no prompt has an answer kind.

Known from the matrix (:func:`unmeasurable`): a KL or same-top gate on a check one of whose
sides can return no logprobs at all (a ``vllm-mlx`` backend, or an ``openai`` backend with
``logprobs: false``) can never be measured: a collection error at the gate's line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from ...specs import KindSpec, Loc, Side, Thresholds
from ...verdict.gate import Gate
from ..framework.harness import (
    BOTH_SHAPES,
    NO_COLD_REFERENCE,
    RENDERED_ONCE,
    TEACHER_FORCED,
    HarnessProfile,
)
from ..framework.kind import RateGate
from ..framework.plan import ItemPlan

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix, Target
    from ...suites import Suite

__all__ = [
    "DEFAULT_CLIFF_ALPHA",
    "GATES",
    "SELF_CHECK",
    "CompareSpec",
    "ComparisonSpec",
    "DiffSpec",
    "DiffThresholds",
    "SweepSpec",
    "Thresholds",
]

DEFAULT_CLIFF_ALPHA = 0.05
"""The default significance level of the degradation cliff's McNemar test."""
SELF_CHECK = "self-check"
"""The sweep's first item (the baseline generated twice), and the cliff's level 0."""


class ComparisonSpec(KindSpec):
    """The options of a comparison kind."""

    def runs_self_check(self) -> bool:
        """Whether the baseline is generated twice first and must reproduce itself."""
        return False


class CompareSpec(ComparisonSpec):
    """Two targets: ``compare: {baseline: bf16@local, test: q4@local}``."""

    golden_baseline: ClassVar[bool] = True

    baseline: str
    """The reference: model@backend, or golden:NAME (a recorded golden file)."""
    test: str
    """The target compared with the baseline: model@backend."""

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
    """The reference: model@backend."""
    models: list[str] = Field(min_length=1)
    """The targets compared with the baseline, in order (each labels its items: r017[q4])."""
    self_check: bool = True
    """Generate the baseline twice first; it must reproduce itself (default true)."""
    cliff_alpha: float = Field(default=DEFAULT_CLIFF_ALPHA, gt=0, lt=1)
    """The significance level of the exact McNemar test that names the degradation cliff
    (default 0.05)."""

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
    """One model across backends; the first backend is the baseline. An entry
    ``MODEL@BACKEND`` runs another model there: the same weights in another form (a LoRA
    adapter's merged model on an engine that serves the adapter itself)."""

    model: str
    """The model run on every backend."""
    backends: list[str] = Field(min_length=2)
    """Two or more backends; the first is the baseline."""

    def _ref(self, entry: str) -> str:
        return entry if "@" in entry else f"{self.model}@{entry}"

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self._ref(self.backends[0]), (*loc, "backends", 0))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [
            Side(backend, self._ref(backend), (*loc, "backends", j))
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
    """identical (the default): an item fails when its outputs are not the same; budget: only
    the thresholds written apply."""
    require_engaged: bool = False
    """An item whose side's feature (speculative decoding, a quantized KV cache) never engaged
    fails; default: it passes with a warning."""


def expects_identical(thresholds: Any) -> bool:
    """Whether an item fails when its outputs are not the same: a diff's ``expect:
    identical``."""
    return isinstance(thresholds, DiffThresholds) and thresholds.expect == "identical"


def requires_engaged(thresholds: Any) -> bool:
    """Whether an item whose feature never engaged fails: a diff's ``require_engaged``."""
    return isinstance(thresholds, DiffThresholds) and thresholds.require_engaged


def _flip_measure(thresholds: Any) -> str:
    """What ``flips.max_rate`` reads: the upper Wilson bound, or the point estimate."""
    return "flip_rate" if thresholds.flips.gate == "point" else "flip_rate_high"


KL_MEAN, KL_MAX, SIMILARITY, IDENTICAL_OUTPUTS = "kl_mean", "kl_max", "similarity", "identical"
"""The measures of a prompt item's evidence (:mod:`.evidence`)."""
SAME_TOP_RATE = "same_top_rate"
"""A suite measure: the pooled argmax agreement rate (and ``kl_mean``, ``flip_rate``,
``flip_rate_high``)."""

GATES: tuple[Gate, ...] = (
    Gate("max_kl", KL_MEAN, "max", "mean KL"),
    Gate("max_kl_position", KL_MAX, "max", "max KL_t"),
    Gate("min_similarity", SIMILARITY, "min", "text similarity"),
    Gate("expect", IDENTICAL_OUTPUTS, "true", "outputs not identical", written=expects_identical),
    Gate("max_mean_kl", KL_MEAN, "max", "mean KL", scope="suite"),
    Gate("min_same_top", SAME_TOP_RATE, "min", "same-top rate", scope="suite"),
    Gate("flips.max_rate", _flip_measure, "max", "flip rate", scope="suite"),
)
"""Every gate of a comparison (see the module docstring)."""
WAIVABLE = frozenset({"expect", "min_similarity"})
"""The gates ``fail_on: decisive`` may waive at a near-tie: those that only say the outputs
differ (:mod:`.judge`)."""
KL_GATES = ("max_kl", "max_kl_position", "max_mean_kl")
SAME_TOP_GATES = ("min_same_top",)


# -- what the matrix alone says ---------------------------------------------------------------
NO_LOGPROBS_KINDS = {"vllm-mlx": "returns no logprobs at all (its logprob fields are ignored)"}
"""Backend kinds that never return logprobs in any form, and why (measured on vllm-mlx
0.6.0)."""
NO_SCORING_KINDS = frozenset({"openai", "ollama"})
"""Backend kinds that cannot score a given continuation: without their own logprobs
(``logprobs: false``) nothing of theirs can be compared but text."""


def side_without_logprobs(loaded: LoadedMatrix, target: Target) -> str | None:
    """Why ``target`` can give no logprobs at all, known from the matrix: ``backend 'vmlx'
    (vllm-mlx) returns no logprobs at all``, ``backend 'srv' has logprobs: false``; None
    when it may give some (a golden, which holds what it recorded, included)."""
    if target.golden is not None:
        return None
    spec = loaded.matrix.backends[target.backend]
    if spec.kind in NO_LOGPROBS_KINDS:
        return f"backend {target.backend!r} ({spec.kind}) {NO_LOGPROBS_KINDS[spec.kind]}"
    if spec.kind in NO_SCORING_KINDS and not spec.logprobs:
        return f"backend {target.backend!r} has logprobs: false"
    return None


def unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> dict[str, str]:
    """The written gates no item (or suite) of ``check`` can measure, known from the matrix
    (the framework's :attr:`~..framework.kind.SpecFacet.unmeasurable`): every KL and
    same-top gate when a side can give no logprobs (:func:`side_without_logprobs`): its
    comparisons can only be ``text``."""
    sides = [check.baseline_side(index), *check.test_sides(index)]
    why = next(
        (
            reason
            for side in sides
            if (reason := side_without_logprobs(loaded, loaded.target(side.ref, side.loc)))
        ),
        None,
    )
    if why is None:
        return {}
    thresholds = check.kind_thresholds()
    keys = [*KL_GATES, *SAME_TOP_GATES]
    return {
        key: f"not measured: method text, {why}"
        for key in keys
        if getattr(thresholds, key, None) is not None
    }


def is_ungated(thresholds: Any) -> bool:
    """Whether the check writes no gate at all: none of :data:`GATES` (``flips.fail_item_on``
    is not one: it judges only the extracted answers of the prompts that have an answer
    kind)."""
    return not any(gate.is_written(thresholds) for gate in GATES)


UNGATED_GATES = "max_kl, max_kl_position, min_similarity, max_mean_kl, min_same_top, flips.max_rate"
"""The thresholds that gate a comparison (besides a diff's ``expect: identical``)."""


def ungated_reason(thresholds: Any) -> str:
    """Why a check is ungated, in a sentence."""
    budget = ""
    if isinstance(thresholds, DiffThresholds):
        budget = " and it does not expect identical outputs (expect: budget)"
    return f"no gate written (none of {UNGATED_GATES}){budget}: it passes whatever the outputs"


# -- collection time ----------------------------------------------------------------------------
def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """``self-check`` (a sweep that asks for it), then each prompt x test side."""
    spec: ComparisonSpec = check.spec
    labels = [side.label for side in spec.test_sides(())]
    plans = [ItemPlan(SELF_CHECK, SELF_CHECK, SELF_CHECK)] if spec.runs_self_check() else []
    plans += [
        ItemPlan(p.id, "prompt", p.id, param=label) for p in suite.prompts for label in labels
    ]
    return plans


def flip_rate_gates(check: CheckSpec, suite: Suite) -> list[RateGate]:
    """``flips.max_rate`` on the upper Wilson bound, counted over the suite's prompts with an
    answer kind (the same for every test side): what collection refuses when it cannot pass
    (:func:`~pytest_infercheck.config.check_rate_gates`)."""
    thresholds = check.kind_thresholds()
    assert isinstance(thresholds, Thresholds)
    flips = thresholds.flips
    if flips.max_rate is None or flips.gate != "upper":
        return []
    n = sum(1 for prompt in suite.prompts if prompt.answer_kind is not None)
    return [
        RateGate(
            field=("flips", "max_rate"),
            max_rate=flips.max_rate,
            confidence=flips.confidence,
            n=n,
            trials=f"{n} answered prompts",
            unit="answered prompts",
        )
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


# -- the verdict harness's checks (tests/harness) ---------------------------------------------
_COMPARED = {
    "max_kl": 0.001,
    "max_kl_position": 0.01,
    "min_similarity": 1.0,
    "max_mean_kl": 0.001,
    "min_same_top": 1.0,
    "flips": {"fail_item_on": "any"},
}
"""Every comparison gate, as tight as an identical engine passes."""
_BLIND = (*RENDERED_ONCE, TEACHER_FORCED, NO_COLD_REFERENCE)
"""What a comparison of two targets cannot see: a fault in the one rendering both sides
share, in the teacher-forced pass, or in a prompt cache it never compares against cold."""
_TOP_K_ONLY = {
    "openai": {
        "min_same_top": (
            "an engine that returns text and top-k only cannot teacher-force: its comparisons "
            "are top-k lower bounds, with no argmax at every position (writing the gate fails "
            "every run: `min_same_top: not measured`)"
        )
    }
}

COMPARE_HARNESS = HarnessProfile(
    {"compare": {"baseline": "{reference}", "test": "{target}"}, **_COMPARED},
    blind=_BLIND,
    shapes=BOTH_SHAPES,
    unwritten=_TOP_K_ONLY,
)
SWEEP_HARNESS = HarnessProfile(
    {"sweep": {"baseline": "{reference}", "models": ["{target}"]}, **_COMPARED},
    blind=_BLIND,
    shapes=BOTH_SHAPES,
    unwritten=_TOP_K_ONLY,
)
DIFF_HARNESS = HarnessProfile(
    {
        "diff": {"model": "{model}", "backends": ["{reference_backend}", "{backend}"]},
        "expect": "identical",
        **_COMPARED,
    },
    blind=_BLIND,
    shapes=BOTH_SHAPES,
    unwritten=_TOP_K_ONLY,
)
