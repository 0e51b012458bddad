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
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, cast

from ..backends import BackendError, GenerationParams
from ..conversation import Conversation, has_generated
from ..records import load_record, plain_data
from ..render.views import target_aggregate
from ..specs import SERVER_KINDS, KindSpec, KindThresholds

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..backends import PromptInput
    from ..config import CheckSpec, LoadedMatrix, Settings
    from ..generation_cache import GenerationCache, ResolvedTarget
    from ..specs import Side
    from ..suites import Prompt, Suite


@dataclass(frozen=True)
class ItemPlan:
    """One item of a check x suite besides ``aggregate``, known at collection time.

    ``name`` is the item's name in the node id (``r017``, ``c8``, ``self-check``), ``param``
    an optional bracketed parameter (``r017[q4]``, ``e01[chat]``), ``role`` what the item is
    (``prompt``, ``level``, ``hostile``, ``self-check``), ``key`` what it is about (a prompt
    id, a level, a hostile kind): the key that ``-k``/``--lf`` selection is noted under.
    """

    name: str
    role: str
    key: str
    param: str | None = None

    @property
    def full_name(self) -> str:
        """``name[param]``, or ``name``."""
        return self.name if self.param is None else f"{self.name}[{self.param}]"


@dataclass
class Outcome:
    """What an item found; plain types only (it crosses xdist and goes into JSON)."""

    violations: list[str] = field(default_factory=list)
    text: str = ""
    """The human-readable report shown above the violations when the item fails."""
    data: Any = field(default_factory=dict)
    """Everything measured, for the HTML report and the JSON results: the kind's record (a
    dataclass registered in :attr:`CheckKind.records`), made plain by :mod:`..records`."""
    properties: list[tuple[str, Any]] = field(default_factory=list)
    """Scalar numbers for JUnit properties (``infercheck_*``)."""
    role: str | None = None
    """The record's role when it is not the plan's (``record`` under
    ``--infercheck-record``)."""
    golden_entries: list[Any] | None = None
    """Golden entries this item recorded (under ``--infercheck-record``), for the controller's
    golden writer."""
    gates_deferred_to: str | None = None
    """An aggregate under ``--infercheck-shard``: the shard (``1/2``) whose suite gates were
    deferred to the merge (:func:`defer_gates`)."""

    def failure_report(self) -> str:
        """What a failed item shows: what failed first (its first violation, and how many
        more: the line pytest's short summary, ``-rf``, shows), then :attr:`text`, then
        every violation."""
        first = self.violations[0] if self.violations else "failed"
        more = f" (+{len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
        head = f"{first}{more}\n\n" + (f"{self.text}\n" if self.text else "")
        return head + "violations:\n" + "\n".join(f"  - {v}" for v in self.violations)


DEFERRED = "suite gates deferred to `pytest-infercheck report` (shard {shard})"
"""What an aggregate of a shard says instead of judging its suite gates."""


def defer_gates(outcome: Outcome, shard: str) -> Outcome:
    """A shard's aggregate ``outcome`` with its suite gates deferred to the merge: its partial
    numbers kept, its violations dropped (they would judge a part of the suite), and the
    deferral said in its text, its record and a JUnit property."""
    note = DEFERRED.format(shard=shard)
    return Outcome(
        violations=[],
        text=f"{outcome.text}\n{note}" if outcome.text else note,
        data=outcome.data,
        properties=[*outcome.properties, ("infercheck_gates_deferred", shard)],
        gates_deferred_to=shard,
    )


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


@dataclass(frozen=True)
class RecordedItem:
    """One item of a check x suite as its aggregate sees it: its role, its name in the node
    id (``r017[q4]``) and its record (the kind's dataclass for that role,
    :attr:`CheckKind.records`), read back from its plain form, exactly as a results file
    holds it."""

    role: str
    name: str
    record: Any
    """None when the item errored (:attr:`error`)."""
    error: str | None = None
    """Why the item produced no record (an engine error), else None."""


BACKEND_ERROR = "backend error: "
"""How an item that an engine failed (``BackendError``) begins its report; a merge reads the
engine's message back from after it."""


def records_of(items: Sequence[RecordedItem], role: str) -> list[Any]:
    """The records of the items with ``role`` that produced one, in order."""
    return [item.record for item in items if item.role == role and item.record is not None]


def errored_items(items: Sequence[RecordedItem]) -> list[str]:
    """A suite violation naming the items that errored (none when none did): an item with
    no record is never left out of a verdict silently."""
    failed = [item for item in items if item.error is not None]
    if not failed:
        return []
    names = ", ".join(f"{item.name} ({item.error})" for item in failed[:5])
    more = f", ... {len(failed) - 5} more" if len(failed) > 5 else ""
    return [f"{len(failed)} of {len(items)} items errored: {names}{more}"]


@dataclass
class Summary:
    """What a kind's :attr:`CheckKind.summarize` makes of its items: the aggregate's record,
    the suite gates it breaks, its text and its JUnit properties."""

    record: Any
    violations: list[str]
    text: str = ""
    properties: list[tuple[str, Any]] = field(default_factory=list)

    def outcome(self) -> Outcome:
        return Outcome(self.violations, self.text, self.record, self.properties)


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
    _outcomes: dict[str, Outcome] = field(default_factory=dict, init=False, repr=False)
    """By the plan's full name: each item's outcome (see :meth:`outcome_of`)."""

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

    def outcome_of(self, plan: ItemPlan) -> Outcome:
        """``run_item(plan)``, memoised: the item and the aggregate share one outcome."""
        return memoised(self._outcomes, plan.full_name, lambda: self.run_item(plan))

    def prepare(self, plans: list[ItemPlan]) -> None:
        """Called before the aggregate asks for the outcomes of ``plans``: a kind that serves
        HTTP backends sends what they need all at once here (default: nothing)."""

    def context(self) -> Any:
        """What the aggregate needs besides its items' records (:attr:`CheckKind.context`)."""
        raise NotImplementedError

    def recorded_items(self) -> list[RecordedItem]:
        """The items the aggregate covers (every planned item, or under
        ``--infercheck-shard`` the shard's selected ones), each with its record read back
        from its plain form: what a results file holds of them. An item whose engine failed
        (``BackendError``) is there with its error and no record."""
        kind = self.check.check_kind
        plans = [p for p in self.plan(self.check, self.suite) if self.in_scope(p.key)]
        self.prepare(plans)
        items = []
        for plan in plans:
            try:
                outcome = self.outcome_of(plan)
            except BackendError as exc:
                items.append(RecordedItem(plan.role, plan.full_name, None, str(exc)))
                continue
            role = outcome.role or plan.role
            record: Any = load_record(kind.records[role], plain_data(outcome.data))
            items.append(RecordedItem(role, plan.full_name, record))
        return items

    def aggregate(self) -> Outcome:
        """The suite gates: :attr:`CheckKind.summarize` of :meth:`recorded_items`."""
        kind = self.check.check_kind
        return kind.summarize(self.recorded_items(), self.thresholds, self.context()).outcome()

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
class TargetContext:
    """The context of a single-target kind's aggregate (:attr:`CheckKind.context`): the
    target's label and its engine's identity by target label."""

    target: str
    engines: dict[str, dict[str, Any]]


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


def target_label(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """A single-target check's name in node ids: its model, with the backend when the matrix
    has several (``stress(q4.llama)``)."""
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    several = len(loaded.matrix.backends) > 1
    return f"{target.model}.{target.backend}" if several else target.model


Aggregates = list[tuple[str, bool, dict[str, Any]]]
"""``(aggregate node id, passed, aggregate data)`` of one kind (or family) of check."""
View = Callable[[Mapping[str, Any]], str]
"""An item's HTML detail from its record's data."""
MeasureSpec = tuple[str, tuple[str, ...], Callable[..., str]]
"""A row of a summary table: title, the data keys it reads, how it shows them."""


@dataclass(frozen=True)
class BarSeries:
    """A value with its interval that the summary charts as bars, one per column of every
    aggregate of the kind: ``value``, ``low`` and ``high`` are keys of a column's numbers."""

    title: str
    y_label: str
    value: str
    low: str
    high: str
    by_suite: bool = False
    """Label each bar ``suite/column`` rather than ``column``."""


@dataclass(frozen=True)
class Distribution:
    """A per-item value that the summary draws as a histogram, grouped per check x suite x
    ``group`` (a key of the item's data)."""

    role: str
    value: str
    group: str
    title: str
    x_label: str


class Verdict(NamedTuple):
    """One cell of the report's verdict matrix: a column of an aggregate (a test side, a
    level, its target), its verdict and the number that decided it (the first broken gate,
    value against threshold; the headline measure when it passed)."""

    column: str
    verdict: str
    """``pass``, ``fail`` or ``ungated`` (passed, but no gate was written)."""
    deciding: str
    """Plain text (escaped where shown)."""


VerdictsOf = Callable[[Mapping[str, Any], bool, Sequence[str]], list[Verdict]]
"""``verdicts(aggregate data, passed, aggregate violations)``: a kind's cells."""


def empty_lines(aggregates: Aggregates) -> list[str]:
    return []


def no_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    return []


@dataclass(frozen=True)
class CheckKind:
    """One kind of check (see the module docstring)."""

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
) -> CheckKind:
    """A single-target kind: labelled by its target (:func:`target_label`), a family of its
    own, its aggregate shown by the shared single-target view unless it brings its own;
    ``more`` are the other fields."""
    return CheckKind(
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


# -- gates that can pass ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RateGate:
    """A suite gate on the upper bound of a rate's Wilson interval (``flips.max_rate`` with
    ``gate: upper``). At zero events over ``n`` trials the bound is ``z^2 / (n + z^2)``; when
    that exceeds ``max_rate`` the gate cannot pass, which config reports at collection."""

    field: tuple[str, ...]
    """Where the limit is written under the check entry: ``("flips", "max_rate")``."""
    max_rate: float
    confidence: float
    n: int
    """Trials the rate is counted over in the whole selection (answered prompts, requests of
    the smallest level)."""
    trials: str
    """What ``n`` counts, in words: ``30 answered prompts``."""
    unit: str
    """What the minimum counts: ``answered prompts``, ``requests per level``."""
    events: str = "flips"
