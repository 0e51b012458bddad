"""The check protocol: what a check kind is, what its items are and what they return.

A check kind (``compare``, ``determinism``, ...) is one :class:`CheckKind` value, declared in
its own module (the comparison family shares the package :mod:`.comparison`) and listed once
in :mod:`.registry`. Everything else asks the registry and never names a kind:

- config: the kind's YAML key and its options model (``spec``), and the thresholds it honours;
- collection: ``run.plan(check, suite)`` names the items of one check x suite at collection
  time (no generation cache, no model), and ``label`` names the check in node ids;
- running: ``run.run_item(plan)`` returns one :class:`Outcome` per item (its verdict, JUnit
  properties and typed record); the aggregate is ``summarize(items, thresholds, context)``, a
  pure function of the items' records (:class:`RecordedItem`), the kind's thresholds model
  and its ``context``: the live run and ``pytest-infercheck report`` (the union of a sharded
  run's records) call the same function;
- xdist and sharding: ``spread_over_workers`` (every item its own scope);
- degenerate output (:mod:`..metrics.degenerate`), for every kind alike: an item's
  :attr:`Outcome.degenerate` (what its generations showed, read by
  :func:`..metrics.consistency.read_generation`) goes into its record, a JUnit property and,
  under ``fail_on_degenerate: true``, its violations (:meth:`CheckRun.outcome_of`); the
  aggregate counts the items' findings (:func:`summarize_items`, which the live run and a
  merge both call);
- reports: ``summary_lines`` (terminal), ``views`` (an item's HTML detail by role),
  ``measures``/``columns``/``charts`` (the HTML summary);
- config: ``thresholds`` (the only threshold keys the kind's entry may hold) and
  ``rate_gates`` (gates on a Wilson upper bound, checked at collection time: a gate that
  fails even with zero events at the whole selection's size is a configuration error).

Under ``--infercheck-shard`` an aggregate covers its shard's items and defers its suite
gates to the merge (:func:`defer_gates`); per-item thresholds still fail their items in the
shard.

Two item classes serve every kind (:mod:`..collect`): an item per :class:`ItemPlan` and one
``aggregate`` item per check x suite.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from ..backends import BackendError, GenerationParams
from ..conversation import Conversation, has_generated
from ..render.views import target_aggregate
from ..specs import SERVER_KINDS, KindSpec, KindThresholds
from .framework.items import RecordedItem, Summary, errored_items, records_of
from .framework.kind import (
    Aggregates,
    BarSeries,
    Distribution,
    MeasureSpec,
    RateGate,
    Verdict,
    VerdictsOf,
    View,
    empty_lines,
    no_charts,
)
from .framework.outcome import BACKEND_ERROR, DEFERRED, Outcome, defer_gates, with_degenerate
from .framework.plan import ItemPlan
from .framework.target import TargetContext, target_label

__all__ = [
    "BACKEND_ERROR",
    "DEFERRED",
    "Aggregates",
    "BarSeries",
    "CheckRun",
    "Distribution",
    "ItemPlan",
    "LegacyKind",
    "MeasureSpec",
    "Outcome",
    "RateGate",
    "RecordedItem",
    "Summary",
    "TargetContext",
    "TargetRun",
    "Verdict",
    "VerdictsOf",
    "View",
    "defer_gates",
    "errored_items",
    "memoised",
    "records_of",
    "target_kind",
    "target_label",
    "with_degenerate",
]

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..backends import PromptInput
    from ..config import CheckSpec, LoadedMatrix, Settings
    from ..generation_cache import GenerationCache, ResolvedTarget
    from ..specs import Side
    from ..suites import Prompt, Suite


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")


def memoised(results: dict[K, V], key: K, compute: Callable[[], V]) -> V:
    """``results[key]``, computed by ``compute()`` on first use."""
    if key not in results:
        results[key] = compute()
    return results[key]


S = TypeVar("S", bound=KindSpec)
T = TypeVar("T", bound=KindThresholds)


@dataclass
class CheckRun(Generic[S, T]):
    """The work of one check x suite, shared by its items; each kind subclasses it, typed by
    its options model ``S`` (:attr:`spec`) and its thresholds model ``T``
    (:attr:`thresholds`).

    One instance per check x suite and process (its suite collector keeps it), shared by the
    suite's items and its aggregate. Each item's outcome is memoised on the run
    (:meth:`outcome_of`), and each kind memoises its heavier results in typed fields
    (``field(default_factory=dict, init=False)``). The aggregate is
    :attr:`CheckKind.summarize` of the records of the items it covers (:meth:`aggregate`):
    the same function that ``pytest-infercheck report`` applies to the union of a sharded
    run's records. Generations and scores themselves are cached one level down, across
    checks, by :attr:`cache`."""

    cache: GenerationCache
    """The process's generation cache (backends, renders, generations, scores)."""
    loaded: LoadedMatrix
    check: CheckSpec
    index: int
    suite: Suite
    settings: Settings
    selected: frozenset[str] = frozenset()
    """Plan keys whose items survived selection (-k, --lf); empty means all."""
    only_selected: bool = False
    """Aggregate only the selected prompts (under ``--infercheck-shard``: other shards run the
    rest, and ``pytest-infercheck report`` aggregates the union)."""

    @property
    def spec(self) -> S:
        """The options under the kind key (the kind's own model)."""
        return cast(S, self.check.spec)

    @property
    def thresholds(self) -> T:
        """The thresholds this check is held to (the kind's own model)."""
        return cast(T, self.check.kind_thresholds())

    # -- collection time ---------------------------------------------------------------------
    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        """The items of this check x suite besides ``aggregate``; default: one per prompt."""
        return [ItemPlan(p.id, "prompt", p.id) for p in suite.prompts]

    # -- run time ----------------------------------------------------------------------------
    def run_item(self, plan: ItemPlan) -> Outcome:
        raise NotImplementedError

    def prepare(self, plans: list[ItemPlan]) -> None:
        """Called before the items of ``plans`` are asked for: a kind that serves HTTP
        backends sends what they need all at once here (default: nothing)."""

    def context(self) -> Any:
        """What the aggregate needs besides its items' records (``CheckKind.context``)."""
        raise NotImplementedError

    framework_aggregate: Callable[[], Outcome] | None = field(default=None, init=False, repr=False)
    """The framework's aggregate of this check x suite (set by :func:`.framework.legacy.adapt`)."""

    def aggregate(self) -> Outcome:
        """The aggregate: the framework's (see :mod:`.framework.items`); a kind may add to it."""
        assert self.framework_aggregate is not None
        return self.framework_aggregate()

    # -- helpers -------------------------------------------------------------------------------
    def resolve(self, side: Side) -> ResolvedTarget:
        """The live target of one side of the check."""
        return self.cache.resolve(self.loaded, self.loaded.target(side.ref, side.loc))

    def prompt(self, prompt_id: str) -> Prompt:
        return next(p for p in self.suite.prompts if p.id == prompt_id)

    def params(self, prompt: Prompt) -> GenerationParams:
        """Greedy params of ``prompt`` under the run's settings: an explicit ``max_tokens``
        setting replaces the prompt's own."""
        s = self.settings
        tokens = s.max_tokens if s.max_tokens is not None else prompt.max_tokens
        tokens = tokens or s.default_max_tokens
        return GenerationParams(max_tokens=tokens, temperature=0.0, seed=s.seed)

    def in_scope(self, key: str) -> bool:
        """Whether the aggregate covers the item planned under ``key``: every item, or under
        ``--infercheck-shard`` the shard's selected ones."""
        return not self.only_selected or key in self.selected


@dataclass
class TargetRun(CheckRun[S, T]):
    """A check of one ``model@backend`` on its own (determinism, stress, ...)."""

    def context(self) -> Any:
        """The target and its engine (:class:`TargetContext`)."""
        target = self.target
        return TargetContext(target.label, {target.label: target.backend.identity()})

    @property
    def target(self) -> ResolvedTarget:
        return self.resolve(self.check.baseline_side(self.index))

    def render(self, prompt: Prompt) -> PromptInput:
        """``prompt`` as the target receives it; a conversation with ``generate`` turns
        filled in by the target itself (its final turn's input)."""
        if has_generated(prompt):
            return self.conversation(prompt).final
        return self.cache.render(self.target, prompt, self.settings.thinking)

    def conversation(self, prompt: Prompt) -> Conversation:
        """``prompt`` filled in by the target under the item's params (see
        :meth:`~.generation_cache.GenerationCache.conversation`)."""
        return self.cache.conversation(
            self.target, prompt, self.settings.thinking, self.params(prompt)
        )

    def served_target(self) -> ResolvedTarget:
        """The run's target, which must be served over HTTP (checked before anything loads)."""
        side = self.check.baseline_side(self.index)
        target = self.loaded.target(side.ref, side.loc)
        kind = self.loaded.matrix.backends[target.backend].kind
        if kind not in SERVER_KINDS:
            raise BackendError(
                f"{self.check.kind} needs a server backend ({', '.join(SERVER_KINDS)}): "
                f"{target.label} runs in-process ({kind})"
            )
        return self.target


@dataclass(frozen=True)
class LegacyKind:
    """One kind of check not yet split into facets (see the module docstring); served
    through :func:`.framework.legacy.adapt`."""

    name: str
    """The YAML key (``batch-invariance``) and the first word of the check's node id."""
    spec: type[BaseModel]
    """The options under the YAML key."""
    run: type[CheckRun[Any, Any]]
    label: Callable[[LoadedMatrix, CheckSpec, int], str]
    """The text inside ``kind(...)`` in node ids when the check has no ``name``."""
    thresholds: type[KindThresholds]
    """The thresholds a check entry of this kind may write beside its kind key (any other is
    a configuration error at its line), with their defaults; records and reports list these
    only."""
    context: type
    """A dataclass of what the aggregate needs besides its items' records (target labels,
    options, ``engines``: the engines' identities by target label). Its fields are fields of
    the aggregate's record, so a merge reads it back from each shard's aggregate and unions
    their ``engines``; a live run gives :meth:`CheckRun.context`."""
    summarize: Callable[[Sequence[RecordedItem], Any, Any], Summary]
    """``summarize(items, thresholds, context)``: the aggregate of a check x suite, a pure
    function of its items' records (:class:`RecordedItem`), the check's thresholds (an
    instance of :attr:`thresholds`) and :attr:`context`: its record, the suite gates it
    breaks, its text and properties. The live run and ``pytest-infercheck report`` (the
    union of a sharded run's records) call the same function."""
    family: str
    """Kinds of one family share their terminal table."""
    summary_lines: Callable[[Aggregates], list[str]] = empty_lines
    """The terminal summary of the family's aggregates."""
    records: Mapping[str, type] = field(default_factory=dict)
    """The dataclass of an item's ``data`` by role (``prompt``, ``aggregate``, ...): what the
    kind records, field by field (see :mod:`..records`)."""
    views: Mapping[str, View] = field(default_factory=dict)
    """An item's HTML detail by role; a role without one shows its data as a table."""
    measures: Sequence[MeasureSpec] = ()
    """The rows of the kind's HTML summary table."""
    other_measures: bool = True
    """Show every other scalar of a column after :attr:`measures` (for kinds whose data
    grows new numbers)."""
    columns: Callable[[Mapping[str, Any]], list[tuple[str, Mapping[str, Any]]]] | None = None
    """``(column title, numbers)`` of an aggregate's data in the HTML summary table."""
    charts: Callable[[str, Mapping[str, Any]], list[str]] = no_charts
    """Charts of one aggregate (``name`` is ``check · suite``)."""
    bars: BarSeries | None = None
    distribution: Distribution | None = None
    rate_gates: Callable[[CheckSpec, Suite], list[RateGate]] | None = None
    """The check's gates on a Wilson upper bound over one suite, as collected (the whole
    selection, before sharding): each must be passable with zero events (see
    :class:`RateGate`)."""
    verdicts: VerdictsOf | None = None
    """The aggregate's cells of the verdict matrix (a comparison's per test side); None:
    one per column of :attr:`columns` (judged by its ``violations`` when it has them), else
    one for the target, judged by the aggregate."""
    headline: str | None = None
    """The title of the measure a passing cell shows (default: the first of
    :attr:`measures`)."""
    spread_over_workers: bool = False
    """Under xdist, every item of the check is its own scope (the kind shares its work across
    workers through files), instead of one worker per check x suite."""


def target_kind(
    name: str,
    spec: type[BaseModel],
    run: type[CheckRun[Any, Any]],
    *,
    thresholds: type[KindThresholds],
    context: type,
    summarize: Callable[[Sequence[RecordedItem], Any, Any], Summary],
    records: Mapping[str, type],
    views: Mapping[str, View],
    **more: Any,
) -> LegacyKind:
    """A single-target kind: labelled by its target (:func:`target_label`), a family of its
    own, its aggregate shown by the shared single-target view unless it brings its own;
    ``more`` are the other fields."""
    return LegacyKind(
        name=name,
        spec=spec,
        run=run,
        label=target_label,
        thresholds=thresholds,
        context=context,
        summarize=summarize,
        family=name,
        records=records,
        views={"aggregate": target_aggregate, **views},
        **more,
    )
