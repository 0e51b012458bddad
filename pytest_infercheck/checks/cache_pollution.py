"""cache-pollution: one bad request must not change anyone else's answers.

The suite's prompts are generated once, one at a time, as the reference ("before"). Each
item then sends one hostile request (see :mod:`..backends.hostile`: context overflow,
invalid UTF-8, special tokens in the prompt, ``max_tokens: 0``, a client that disconnects
mid-stream), checks that the server is alive (its health endpoint), and generates the
reference prompts again, one at a time. What the server answered to the hostile request
(4xx, 5xx, a closed connection, a completion) is recorded, not judged; an item fails when
the server is dead afterwards or any reference output changed: token ids where the server
returns them, else text. Items run in order, so later items also see earlier hostile
requests. This is the class of bug where one request corrupts a shared KV or prompt cache,
a slot or a batch for every request after it.

Faults (:mod:`~pytest_infercheck.metrics.consistency`) fail an item whatever else: a
reference output whose own logprobs are broken, before or after the hostile request
(``non-finite logprob in the output of s01 after the invalid-utf8 request at position 2
(NaN)``, ``logprob does not match its token in ...``), and a reference output that became
empty, or stopped being empty (``empty generation: s01 after the invalid-utf8 request
generated no tokens while s01 before it generated 3``; it is also a changed output). The
aggregate fails naming the hostile requests whose items found faults.

The aggregate (:func:`summarize`, a pure function of the hostile items' records, which the
live run and ``pytest-infercheck report`` over shards call alike) judges each item's record
again (:func:`hostile_violations`) and fails naming the hostile requests after which the
server died, a reference output changed, faults were found or the reference prompts failed,
and the items that errored; hostile kinds in the order of :data:`HOSTILE_KINDS`.

Needs a server backend; an in-process (mlx-lm) target fails its items with that message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field

from ..backends import BackendError, Generation
from ..metrics.consistency import Fault, Reading, aggregate_faults, empty_fault, read_generation
from ..metrics.degenerate import Degenerate, DegenerateScan
from ..metrics.sameness import DivergenceUnit, same_generation
from ..records import OMIT_WHEN_EMPTY, load_record
from ..render.markup import esc, kv_table, table
from ..render.table import check_table
from ..render.text import mark_divergence
from ..render.views import side_by_side
from ..specs import KindThresholds, TargetCheck
from .protocol import (
    Aggregates,
    ItemPlan,
    Outcome,
    RecordedItem,
    Summary,
    TargetRun,
    records_of,
    target_kind,
)

if TYPE_CHECKING:
    from ..config import CheckSpec
    from ..suites import Suite


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


# -- records: what an item's ``data`` holds, field by field -------------------------------------


@dataclass(frozen=True)
class ChangedOutput:
    """A reference prompt whose output changed after a hostile request."""

    prompt_id: str
    before: str
    """Its text before any hostile request."""
    after: str
    """Its text after this one."""
    first_divergence: int | None
    """Where the two first differ, in :attr:`divergence_unit`."""
    divergence_unit: DivergenceUnit | None = None
    """``token`` (over token ids) or ``char`` (over text); absent in version 1 results."""


@dataclass(frozen=True)
class HostileRecord:
    """The record of a cache-pollution item (role ``hostile``): one hostile request, and
    the reference prompts generated again after it."""

    target: str
    """The target's label (``adder@llama``)."""
    hostile: HostileKind
    response: str
    """What the server answered to the hostile request, in a few words (recorded, not
    judged): ``HTTP 400 ...``, ``HTTP 200, closed after the first event``, ..."""
    alive: bool
    """Whether the server's health endpoint answered after it."""
    changed: list[ChangedOutput]
    """The reference prompts whose output changed (empty: none, or the server is dead)."""
    prompts: int
    """How many reference prompts there are."""
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of the reference outputs, before any hostile request and after this one, and
    outputs that became empty (each a violation); absent from the JSON when none."""
    failure: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Why the reference prompts could not be generated again after the request (the server
    was alive but a request failed: a violation); None, and absent from the JSON, when they
    were."""


@dataclass(frozen=True)
class CachePollutionAggregate:
    """The record of a cache-pollution check x suite's aggregate (role ``aggregate``)."""

    target: str
    n_hostile: int
    """Hostile requests sent (the selected items)."""
    n_dead: int
    """After how many of them the server was not alive."""
    n_polluted: int
    """After how many of them a reference output changed."""
    n_failed: int
    """Items that failed (dead, polluted, or the reference prompts failed)."""
    prompts: int
    """How many reference prompts the suite has."""
    responses: dict[str, str]
    """By hostile kind: what the server answered."""
    engines: dict[str, dict[str, Any]]
    """By target label: the engine's identity (build, model path, ...)."""


# -- running ------------------------------------------------------------------------------------


def changed_outputs(
    before: list[tuple[str, Generation]], after: list[tuple[str, Generation]]
) -> list[ChangedOutput]:
    """Each prompt whose output is not the same
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`: ids and text)."""
    changed = []
    for (prompt_id, old), (_, new) in zip(before, after, strict=True):
        verdict = same_generation(old, new)
        if not verdict.same:
            changed.append(
                ChangedOutput(
                    prompt_id=prompt_id,
                    before=old.text,
                    after=new.text,
                    first_divergence=verdict.first_divergence,
                    divergence_unit=verdict.divergence_unit,
                )
            )
    return changed


def before_readings(before: list[tuple[str, Generation]]) -> list[Reading]:
    """The reference outputs before any hostile request, each read on its own (its faults
    and degenerate finding, :func:`read_generation`)."""
    return [
        read_generation(f"the output of {prompt_id} before any hostile request", g)
        for prompt_id, g in before
    ]


def pollution_faults(
    kind: str, before: list[tuple[str, Generation]], after: list[tuple[str, Generation]]
) -> tuple[list[Fault], list[Degenerate | None]]:
    """The faults after the ``kind`` request: each reference output's own
    (:func:`read_generation`), and an output that is empty on one side of the request only
    (:func:`empty_fault`); and the outputs' degenerate findings."""
    faults = []
    findings = []
    for (prompt_id, old), (_, new) in zip(before, after, strict=True):
        reading = read_generation(f"the output of {prompt_id} after the {kind} request", new)
        faults += reading.faults
        findings.append(reading.degenerate)
        empty = empty_fault(
            (new.text, new.token_ids, new.finish_reason),
            (old.text, old.token_ids, old.finish_reason),
            a_name=f"{prompt_id} after the {kind} request",
            b_name=f"{prompt_id} before it",
        )
        if empty is not None:
            faults.append(empty)
    return faults, findings


def hostile_violations(record: HostileRecord) -> list[str]:
    """Why a hostile item fails, from its record: its faults, the server dead after the
    request, the reference prompts failing after it, reference outputs that changed."""
    violations = [f.text for f in record.faults]
    if not record.alive:
        violations.append(f"the server is not alive after the {record.hostile} request")
    if record.failure is not None:
        violations.append(
            f"the reference prompts failed after the {record.hostile} request: {record.failure}"
        )
    if record.changed:
        violations.append(
            f"{len(record.changed)} of {record.prompts} reference outputs changed after the "
            f"{record.hostile} request: {', '.join(c.prompt_id for c in record.changed)}"
        )
    return violations


@dataclass
class CachePollutionContext:
    """What the aggregate takes besides the hostile items' records (fields of
    :class:`CachePollutionAggregate`)."""

    target: str
    prompts: int
    """How many reference prompts the suite has."""
    engines: dict[str, dict[str, Any]]


@dataclass
class CachePollutionRun(TargetRun[CachePollutionSpec, KindThresholds]):
    """One item per hostile kind, then the aggregate (see the module docstring). The reference
    outputs are memoised on the run and each item's outcome by the protocol (shared by the
    suite's items and its aggregate): each hostile request is sent once."""

    _before: list[tuple[str, Generation]] | None = field(default=None, init=False, repr=False)
    """The reference outputs before any hostile request: (prompt id, output), in suite order."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        hostile = cast(CachePollutionSpec, check.spec).hostile
        return [ItemPlan(kind, "hostile", kind) for kind in hostile]

    def _references(self) -> list[tuple[str, Generation]]:
        """The suite's prompts generated now, sequentially, bypassing every cache."""
        target = self.served_target()
        out = []
        for prompt in self.suite.prompts:
            rendered, params = self.render(prompt), self.params(prompt)
            out.append(
                (prompt.id, self.cache.call(target, target.backend.generate(rendered, params)))
            )
        return out

    def before(self) -> list[tuple[str, Generation]]:
        """The reference outputs before any hostile request (computed once)."""
        if self._before is None:
            self._before = self._references()
        return self._before

    def run_item(self, plan: ItemPlan) -> Outcome:
        kind = next(k for k in HOSTILE_KINDS if k == plan.key)
        target = self.served_target()
        before = self.before()
        response = self.cache.run(target.backend.send_hostile(kind))
        alive = self.cache.run(target.backend.alive())
        changed: list[ChangedOutput] = []
        readings = before_readings(before)
        faults = [f for reading in readings for f in reading.faults]
        findings = [reading.degenerate for reading in readings]
        failure = None
        if alive:
            try:
                after = self._references()
            except BackendError as exc:
                failure = str(exc)
            else:
                changed = changed_outputs(before, after)
                after_faults, after_findings = pollution_faults(kind, before, after)
                faults += after_faults
                findings += after_findings
        lines = [f"hostile request {kind}: {response}", f"server alive: {alive}"]
        lines += [
            f"  {c.prompt_id}: before {mark_divergence(c.before, c.after)}"
            f" | after {mark_divergence(c.after, c.before)}"
            for c in changed
        ]
        record = HostileRecord(
            target=target.label,
            hostile=kind,
            response=response,
            alive=alive,
            changed=changed,
            prompts=len(before),
            faults=faults,
            failure=failure,
        )
        properties: list[tuple[str, Any]] = [
            ("infercheck_alive", alive),
            ("infercheck_changed", len(changed)),
            ("infercheck_prompts", len(before)),
        ]
        return Outcome(
            hostile_violations(record),
            "\n".join(lines),
            record,
            properties,
            degenerate=DegenerateScan.of(findings),
        )

    def prepare(self, plans: list[ItemPlan]) -> None:
        """An in-process target fails the aggregate too, with the items' message."""
        self.served_target()

    def context(self) -> CachePollutionContext:
        target = self.target
        return CachePollutionContext(
            target.label, len(self.suite.prompts), {target.label: target.backend.identity()}
        )


def summarize(
    items: Sequence[RecordedItem], thresholds: KindThresholds, context: CachePollutionContext
) -> Summary:
    """The aggregate of the hostile items' records, in the order of :data:`HOSTILE_KINDS`:
    each judged again (:func:`hostile_violations`); violations: the kinds after which the
    server died, a reference output changed, the outputs carried faults, or the item failed
    otherwise (:func:`pollution_violations`), and the items that errored."""
    records = sorted(records_of(items, "hostile"), key=lambda r: HOSTILE_KINDS.index(r.hostile))
    errored = [item.name for item in items if item.record is None]
    dead = [r.hostile for r in records if not r.alive]
    polluted = [r.hostile for r in records if r.changed]
    failed = [r.hostile for r in records if hostile_violations(r)]
    record = CachePollutionAggregate(
        target=context.target,
        n_hostile=len(records) + len(errored),
        n_dead=len(dead),
        n_polluted=len(polluted),
        n_failed=len(failed) + len(errored),
        prompts=context.prompts,
        responses={r.hostile: r.response for r in records},
        engines=context.engines,
    )
    faulty = [(r.hostile, r.faults) for r in records if r.faults]
    violations = pollution_violations(dead, polluted, failed, faulty, len(items))
    text = "\n".join(f"  {r.hostile}: {r.response}" for r in records)
    properties: list[tuple[str, Any]] = [
        ("infercheck_hostile", record.n_hostile),
        ("infercheck_dead", len(dead)),
        ("infercheck_polluted", len(polluted)),
    ]
    return Summary(record, violations, f"{context.target}: hostile requests\n{text}", properties)


# -- presentation -------------------------------------------------------------------------------


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per cache-pollution check x suite for the terminal summary (``?`` for a
    record that is not a :class:`CachePollutionAggregate`)."""

    def cells(data: dict[str, Any]) -> list[str]:
        try:
            record = load_record(CachePollutionAggregate, data)
        except ValueError:
            return ["?"] * 4
        return [
            str(n) for n in (record.n_hostile, record.prompts, record.n_dead, record.n_polluted)
        ]

    columns = (("hostile", ">"), ("prompts", ">"), ("died", ">"), ("changed", ">"))
    return check_table(aggregates, columns, cells)


def cache_pollution_hostile(data: Mapping[str, Any]) -> str:
    """The hostile request's fate and every prompt whose output changed after it."""
    record = load_record(HostileRecord, data)
    facts = {
        "target": record.target,
        "hostile": record.hostile,
        "response": record.response,
        "alive": record.alive,
        "prompts": record.prompts,
    }
    parts = [kv_table(facts)]
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    for c in record.changed[:20]:
        parts.append(
            side_by_side(
                f"before ({c.prompt_id})",
                c.before,
                "after the hostile request",
                c.after,
                c.first_divergence,
            )
        )
    return "".join(parts)


def pollution_violations(
    dead: Sequence[str],
    polluted: Sequence[str],
    failed: Sequence[str],
    faulty: Sequence[tuple[str, Sequence[Fault]]],
    n_items: int,
) -> list[str]:
    """The aggregate's verdict from the hostile kinds after which the server was dead, a
    reference output changed, its outputs carried faults (non-finite or mismatched logprobs,
    empty generations), or the item failed otherwise."""
    violations = []
    if dead:
        violations.append(f"the server died after: {', '.join(dead)}")
    if polluted:
        violations.append(f"reference outputs changed after: {', '.join(polluted)}")
    violations += aggregate_faults(faulty, n_items=n_items, item_unit="hostile requests")
    with_faults = {k for k, _ in faulty}
    other = [k for k in failed if k not in dead and k not in polluted and k not in with_faults]
    if other:
        violations.append(f"reference prompts failed after: {', '.join(other)}")
    return violations


CACHE_POLLUTION = target_kind(
    "cache-pollution",
    CachePollutionSpec,
    CachePollutionRun,
    thresholds=KindThresholds,
    context=CachePollutionContext,
    summarize=summarize,
    summary_lines=summary_lines,
    records={"hostile": HostileRecord, "aggregate": CachePollutionAggregate},
    views={"hostile": cache_pollution_hostile},
)
