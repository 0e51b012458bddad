"""A check kind as a package of facets, on the model of syrupy's extension facets and
pytest-xdist's one protocol per concern.

- ``spec`` (:class:`SpecFacet`): the YAML options and thresholds models, the gates (each
  declaring the measure it reads), how items are planned and labelled, the records by role
  and the aggregate's context. The only facet config imports.
- ``gather`` (a :class:`Gatherer` class): all I/O, batched: typed evidence per item, each
  measure a value or :class:`~pytest_infercheck.verdict.measure.Unmeasured`, and how the
  gathering went (:class:`~pytest_infercheck.verdict.conduct.Conduct`).
- ``judge``: pure: an item's evidence and the thresholds to its record, the kind's own
  findings and its waivers (:class:`Judged`). The framework adds the gates and the rules
  (:mod:`.run`).
- ``summarize``: pure: the items' records to the aggregate (:mod:`.items`).
- ``present`` (:class:`PresentFacet`): text, views, tables and charts; the only facet the
  reports import.

A new kind is a small package (``checks/my_kind/``: ``spec.py``, ``gather.py``,
``judge.py``, ``summarize.py``, ``present.py``, and ``__init__.py`` assembling its
:class:`CheckKind`) and one line in :mod:`..registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ...verdict.conduct import Conduct
from ...verdict.gate import Gate, Violation
from ...verdict.measure import MeasureValue
from ...verdict.waiver import Waiver
from .harness import HarnessProfile
from .plan import ItemPlan
from .summary import RecordedItem, Summary

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ...matrix import CheckSpec, LoadedMatrix
    from ...metrics.degenerate import DegenerateScan
    from ...specs import KindThresholds
    from ...suites import Suite
    from .context import RunContext


# -- spec ------------------------------------------------------------------------------------
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


def one_per_prompt(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """The default plan: one item per prompt, named by its id."""
    return [ItemPlan(p.id, "prompt", p.id) for p in suite.prompts]


Unmeasurable = Callable[["LoadedMatrix", "CheckSpec", int], Mapping[str, str]]
"""``unmeasurable(loaded, check, index)``: gate key -> why its measure cannot be measured on
any item, known from the matrix alone (a KL gate on a backend without logprobs): a written
gate there is a collection error at its line."""


Refuse = Callable[["LoadedMatrix", "CheckSpec", int], Sequence[tuple[tuple[str | int, ...], str]]]
"""``refuse(loaded, check, index)``: ``(YAML location, why)`` of each option of the check that
the matrix alone shows its target cannot do (a request parameter its engine does not take,
:func:`~pytest_infercheck.request_params.refused_params`): a collection error at that line."""


@dataclass(frozen=True)
class SpecFacet:
    """What a kind's YAML entry is and what its items will be (see the module docstring)."""

    options: type[BaseModel]
    """The options under the kind's YAML key."""
    thresholds: type[KindThresholds]
    """The thresholds a check entry may write beside its kind key (any other is a
    configuration error at its line), with their defaults."""
    gates: tuple[Gate, ...]
    """Every gate of :attr:`thresholds`, each with the measure it reads; the framework
    judges them (items: the evidence's measures; suite: the summary's)."""
    label: Callable[[LoadedMatrix, CheckSpec, int], str]
    """The text inside ``kind(...)`` in node ids when the check has no ``name``."""
    context: type
    """A dataclass of what the aggregate needs besides its items' records (its fields are
    fields of the aggregate's record, so a merge reads it back from each shard's aggregate
    and unions their ``engines``)."""
    records: Mapping[str, type]
    """The dataclass of an item's record by role (``prompt``, ``aggregate``, ...)."""
    plan: Callable[[CheckSpec, Suite], list[ItemPlan]] = one_per_prompt
    """The items of a check x suite besides ``aggregate``."""
    rate_gates: Callable[[CheckSpec, Suite], list[RateGate]] | None = None
    """Gates on a Wilson upper bound, checked at collection (each must be passable)."""
    unmeasurable: Unmeasurable | None = None
    refuse: Refuse | None = None
    spread_over_workers: bool = False
    """Under xdist, every item is its own scope (the kind shares its work across workers
    through files), instead of one worker per check x suite."""
    harness: HarnessProfile | None = None
    """How the property-based verdict harness runs the kind (None: the harness fails the
    kind, saying to add one)."""


# -- gather ----------------------------------------------------------------------------------
class ItemEvidence(Protocol):
    """What a gather facet returns for one item: its measures (what the gates read) and how
    its gathering went. A kind's evidence is its own dataclass with these two fields."""

    @property
    def measures(self) -> Mapping[str, MeasureValue]: ...

    @property
    def conduct(self) -> Conduct: ...


class Gatherer(Protocol):
    """A kind's I/O for one check x suite: built once per check x suite and process from
    the run's context, asked once for the evidence of every item the process runs."""

    def __init__(self, run: RunContext) -> None: ...

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, Any]:
        """The evidence of each of ``plans`` by its full name (all their I/O at once,
        batched or concurrent); a ``BackendError`` for a plan whose target failed outright
        (it errors, and the aggregate names it)."""
        ...

    def context(self) -> Any:
        """What the aggregate needs besides its items' records (:attr:`SpecFacet.context`)."""
        ...


# -- judge -----------------------------------------------------------------------------------
@dataclass
class Judged:
    """What a kind's judge makes of one item's evidence: its record, the kind's own findings
    (faults, outputs that differ; the framework adds the gates), the waivers it offers, and
    the generations' degenerate findings."""

    record: Any
    violations: list[Violation] = field(default_factory=list)
    waivers: list[Waiver] = field(default_factory=list)
    degenerate: DegenerateScan | None = None
    role: str | None = None
    """The record's role when it is not the plan's."""
    golden_entries: list[Any] | None = None
    text: str | None = None
    """The item's report when the judge writes it (else :attr:`PresentFacet.describe`)."""
    gated: bool = True
    """Whether the kind's item gates judge this item: False for an item of another role than
    the gates are about (a sweep's ``self-check``, a golden recording), whose evidence has
    none of their measures."""


Judge = Callable[[ItemPlan, Any, Any], Judged]
"""``judge(plan, evidence, thresholds)``: pure."""


# -- present ---------------------------------------------------------------------------------
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
    level, its target), its verdict and the number that decided it."""

    column: str
    verdict: str
    """``pass``, ``fail`` or ``ungated`` (passed, but no gate was written)."""
    deciding: str
    """Plain text (escaped where shown): the first of :attr:`reasons` when it failed."""
    reasons: tuple[str, ...] = ()
    """Every reason it failed (each broken gate, its failed items), plain text; empty when
    it passed (or a kind gives only :attr:`deciding`)."""
    note: str = ""
    """A finding besides the verdict, plain text (a sweep's degradation cliff)."""


VerdictsOf = Callable[[Mapping[str, Any], bool, Sequence[str]], list[Verdict]]
"""``verdicts(aggregate data, passed, aggregate violations)``: a kind's cells."""
NotesOf = Callable[[Mapping[str, Any]], list[str]]
"""``notes(aggregate data)``: findings the report states under the verdict matrix (a sweep's
degradation cliff with its evidence), plain text."""


def empty_lines(aggregates: Aggregates) -> list[str]:
    return []


def no_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    return []


def no_notes(data: Mapping[str, Any]) -> list[str]:
    return []


def no_text(record: Any) -> str:
    return ""


def no_properties(record: Any) -> list[tuple[str, Any]]:
    return []


@dataclass(frozen=True)
class PresentFacet:
    """How a kind is shown: an item's failure text and JUnit properties, its HTML views, its
    terminal table, and the rows, columns and charts of its HTML summary."""

    family: str
    """Kinds of one family share their terminal table."""
    describe: Callable[[Any], str] = no_text
    """An item's report (above its violations) from its record."""
    properties: Callable[[Any], list[tuple[str, Any]]] = no_properties
    """An item's JUnit properties from its record."""
    summary_lines: Callable[[Aggregates], list[str]] = empty_lines
    views: Mapping[str, View] = field(default_factory=dict)
    """An item's HTML detail by role; a role without one shows its data as a table."""
    measures: Sequence[MeasureSpec] = ()
    other_measures: bool = True
    columns: Callable[[Mapping[str, Any]], list[tuple[str, Mapping[str, Any]]]] | None = None
    charts: Callable[[str, Mapping[str, Any]], list[str]] = no_charts
    bars: BarSeries | None = None
    distribution: Distribution | None = None
    verdicts: VerdictsOf | None = None
    headline: str | None = None
    notes: NotesOf = no_notes


# -- the kind --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckKind:
    """One kind of check (see the module docstring)."""

    name: str
    """The YAML key (``batch-invariance``) and the first word of the check's node id."""
    spec: SpecFacet
    gather: type[Gatherer]
    judge: Judge
    summarize: Callable[[Sequence[RecordedItem], Any, Any], Summary]
    """``summarize(items, thresholds, context)``: pure (see :mod:`.items`)."""
    present: PresentFacet
