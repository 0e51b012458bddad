"""The check protocol: what a check kind is, what its items are and what they return.

A check kind (``compare``, ``determinism``, ...) is one :class:`CheckKind` value, declared in
its own module (the comparison family shares the package :mod:`.comparison`) and listed once
in :mod:`.registry`. Everything else asks the registry and never names a kind:

- config: the kind's YAML key and its options model (``spec``), and the thresholds it honours;
- collection: ``run.plan(check, suite)`` names the items of one check x suite at collection
  time (no generation cache, no model), and ``label`` names the check in node ids;
- running: ``run.run_item(plan)`` and ``run.aggregate()`` return one :class:`Outcome` each,
  which becomes the item's verdict, its JUnit properties and its record in every report;
- xdist and sharding: ``spread_over_workers`` (every item its own scope);
- reports: ``summary_lines`` (terminal), ``views`` (an item's HTML detail by role),
  ``measures``/``columns``/``charts`` (the HTML summary), ``merge`` (an aggregate recomputed
  from the union of the shards' item records, its suite gates judged there);
- config: ``rate_gates`` (gates on a Wilson upper bound, checked at collection time: a gate
  that fails even with zero events at the whole selection's size is a configuration error).

Under ``--infercheck-shard`` the aggregate of a kind that can merge covers its shard's items
and defers its suite gates to the merge (:func:`defer_gates`); per-item thresholds still fail
their items in the shard.

Two item classes serve every kind (:mod:`..collect`): an item per :class:`ItemPlan` and one
``aggregate`` item per check x suite.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..backends import BackendError, GenerationParams
from ..records import ItemRecord, load_record, plain_data
from ..render.views import target_aggregate
from ..specs import SERVER_KINDS, TARGET_THRESHOLDS, TargetThresholds, Thresholds

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
        """What a failed item shows: :attr:`text`, then every violation."""
        head = f"{self.text}\n" if self.text else ""
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


@dataclass
class CheckRun:
    """The work of one check x suite, shared by its items; each kind subclasses it.

    One instance per check x suite and process (its suite collector keeps it), shared by the
    suite's items and its aggregate. Each kind memoises its results on its run, in typed
    fields (``field(default_factory=dict, init=False)``), so the aggregate item reuses what
    the other items computed (and computes what ``-k`` or another worker left out).
    Generations and scores themselves are cached one level down, across checks, by
    :attr:`cache`."""

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

    # -- collection time ---------------------------------------------------------------------
    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        """The items of this check x suite besides ``aggregate``; default: one per prompt."""
        return [ItemPlan(p.id, "prompt", p.id) for p in suite.prompts]

    # -- run time ----------------------------------------------------------------------------
    def run_item(self, plan: ItemPlan) -> Outcome:
        raise NotImplementedError

    def aggregate(self) -> Outcome:
        raise NotImplementedError

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

    def scope_prompts(self) -> list[Prompt]:
        """The prompts an aggregate covers: the whole suite, or under ``--infercheck-shard``
        the shard's selected ones (the other shards cover the rest)."""
        return [p for p in self.suite.prompts if self.in_scope(p.id)]

    def in_scope(self, key: str) -> bool:
        """Whether the aggregate covers the item planned under ``key``: every item, or under
        ``--infercheck-shard`` the shard's selected ones."""
        return not self.only_selected or key in self.selected


@dataclass
class TargetRun(CheckRun):
    """A check of one ``model@backend`` on its own (determinism, stress, ...)."""

    @property
    def target(self) -> ResolvedTarget:
        return self.resolve(self.check.baseline_side(self.index))

    def render(self, prompt: Prompt) -> PromptInput:
        return self.cache.render(self.target, prompt, self.settings.thinking)

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
    run: type[CheckRun]
    label: Callable[[LoadedMatrix, CheckSpec, int], str]
    """The text inside ``kind(...)`` in node ids when the check has no ``name``."""
    thresholds: frozenset[str]
    """The thresholds of the check entry this kind is held to (shown in reports)."""
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
    merge: Callable[..., dict[str, Any] | None] | None = None
    """``merge(nodeid, shards, items)``: the aggregate item ``nodeid`` recomputed from the
    union of the shards' item records with the check's thresholds, its suite gates judged on
    it (:func:`merged_aggregate`); None when a record cannot be read. ``shards`` are
    ``(shard index, that shard's aggregate item)``, ``items`` every other item of the merged
    run (as in the results file). A kind without one keeps each shard's aggregate side by
    side, and its shards judge their own partial aggregates (nothing is deferred)."""
    rate_gates: Callable[[CheckSpec, Suite], list[RateGate]] | None = None
    """The check's gates on a Wilson upper bound over one suite, as collected (the whole
    selection, before sharding): each must be passable with zero events (see
    :class:`RateGate`)."""
    spread_over_workers: bool = False
    """Under xdist, every item of the check is its own scope (the kind shares its work across
    workers through files), instead of one worker per check x suite."""


def target_kind(
    name: str,
    spec: type[BaseModel],
    run: type[CheckRun],
    *,
    records: Mapping[str, type],
    views: Mapping[str, View],
    **more: Any,
) -> CheckKind:
    """A single-target kind: labelled by its target (:func:`target_label`), held to the
    single-target thresholds, a family of its own, its aggregate shown by the shared
    single-target view unless it brings its own; ``more`` are the other fields."""
    return CheckKind(
        name=name,
        spec=spec,
        run=run,
        label=target_label,
        thresholds=TARGET_THRESHOLDS,
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


# -- merging the shards of a run ----------------------------------------------------------------
class CheckThresholds(Thresholds, TargetThresholds):
    """The thresholds an item recorded (any kind's: the record keeps those its kind honours),
    read back for a merge."""


class ShardItem(ItemRecord):
    """An item of a shard's results file, as a merge reads it: its record and its outcome."""

    nodeid: str
    outcome: str
    duration_s: float
    worker: str | None
    longrepr: str | None

    @property
    def suite_id(self) -> str:
        """The node id of its check x suite."""
        return self.nodeid.rsplit("::", 1)[0]


Shards = Sequence[tuple[int, Mapping[str, Any]]]
"""``(shard index, the shard's aggregate item)`` of one aggregate node id."""


def shard_aggregates(shards: Shards) -> list[ShardItem]:
    """Each shard's aggregate item, typed."""
    return [ShardItem.model_validate(item) for _, item in shards]


def shard_records(shards: Shards, record_type: type[R]) -> list[R]:
    """Each shard's aggregate record; ``ValueError`` when one cannot be read (it errored)."""
    return [load_record(record_type, item.data) for item in shard_aggregates(shards)]


def suite_items(nodeid: str, items: Sequence[Mapping[str, Any]], role: str) -> list[ShardItem]:
    """The items of the aggregate ``nodeid``'s check x suite with ``role`` that ran (an item
    that errored or was skipped recorded no data), typed."""
    suite = nodeid.rsplit("::", 1)[0]
    typed = (ShardItem.model_validate(item) for item in items if item.get("role") == role)
    return [item for item in typed if item.suite_id == suite and item.data]


def errored_items(nodeid: str, items: Sequence[Mapping[str, Any]]) -> list[ShardItem]:
    """The items of the aggregate ``nodeid``'s check x suite that errored."""
    suite = nodeid.rsplit("::", 1)[0]
    typed = (ShardItem.model_validate(item) for item in items if item.get("outcome") == "error")
    return [item for item in typed if item.suite_id == suite]


def recorded_thresholds(shards: Shards) -> CheckThresholds:
    """The thresholds the check held its aggregate to (the same in every shard)."""
    return CheckThresholds.model_validate(shard_aggregates(shards)[0].thresholds)


def merged_engines(engines: Sequence[Mapping[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The union of the shards' engine identities, by target label."""
    out: dict[str, dict[str, Any]] = {}
    for each in engines:
        out.update(each)
    return out


def merged_aggregate(shards: Shards, violations: list[str], data: Any) -> dict[str, Any]:
    """The merged aggregate item: the first shard's identity, ``data`` (a kind's record) and
    the suite gates ``violations`` judged on the union; ``error`` when a shard's aggregate
    errored, else ``failed`` when a gate is broken, else ``passed``; nothing deferred."""
    typed = shard_aggregates(shards)
    errored = [item for item in typed if item.outcome == "error"]
    outcome = "error" if errored else "failed" if violations else "passed"
    longrepr = "\n".join(violations) or None
    if errored:
        longrepr = "\n".join(str(item.longrepr) for item in errored)
    identity = {k: v for k, v in shards[0][1].items() if k != "gates_deferred_to"}
    return {
        **identity,
        "outcome": outcome,
        "duration_s": sum(item.duration_s for item in typed),
        "worker": None,
        "longrepr": longrepr,
        "violations": violations,
        "data": plain_data(data),
    }
