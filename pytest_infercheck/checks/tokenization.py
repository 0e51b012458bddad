"""tokenization: the same prompts, rendered and tokenized by each backend of a target list,
must give the same token ids.

``tokenization: {targets: [adder@local, adder@llama, adder@vllm], allow: [normalization]}``:
the first target is the reference; each other target is an item ``<prompt>[<label>]``
(labelled by its backend when the targets share the model, as in ``diff``), and the check is
named after the reference's model (``tokenization(adder)``).

Each side's ids are the ones its engine processes for the prompt, rendered by the backend's
own ``render`` (chat template applied or not, BOS included where that engine adds it), so a
template rendered differently shows:

- mlx-lm: its tokenizer's ids of the rendered prompt; llama-server: the rendered prompt's ids
  by its ``/tokenize``;
- an OpenAI-compatible server: its vLLM-style ``POST /tokenize`` (probed once; whether it
  exists is recorded in the engine's identity, ``observed.tokenize``), else only the prompt
  token count (``usage.prompt_tokens`` of a ``max_tokens: 1`` request: vllm-mlx,
  mlx_lm.server). Then equal counts pass as ``count-only`` and say so; different counts fail.

The verdict and its cause, in order (rendered text / template, BOS and special tokens, ids;
:mod:`~pytest_infercheck.metrics.tokenization`): an item that differs names the first
differing position, both ids and their texts, and the cause. Differences that are properties
of the tokenizers (``normalization``: one side normalizes the text to NFC;
``control-tokens``: text spelling a token one engine treats as a control token) fail too,
unless the check lists them in ``allow``; an allowed difference passes and its item still
says it. An empty tokenization always fails. The aggregate (:func:`summarize`, a pure
function of the items' records, which the live run and ``pytest-infercheck report`` over
shards call alike) judges each item's record again (:func:`item_violations`), counts the
prompts identical, count-only and differing (by cause) and fails when any item failed or
errored. The check has no thresholds.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field

from ..backends import Backend
from ..metrics.text import first_divergence
from ..metrics.tokenization import (
    LEADING,
    TOKENIZER_PROPERTIES,
    WINDOW,
    Status,
    TokenSide,
    TokenVerdict,
    body_text,
    compare_tokenizations,
    leading_specials,
    needs_nfc_probe,
)
from ..records import OMIT_WHEN_EMPTY, load_record, plain_data
from ..render.markup import esc, kv_table, num, rate, table
from ..render.table import check_table
from ..render.text import safe_text
from ..render.views import engines, side_by_side
from ..specs import KindSpec, KindThresholds, Loc, Side
from .protocol import (
    Aggregates,
    CheckRun,
    ItemPlan,
    LegacyKind,
    MeasureSpec,
    Outcome,
    RecordedItem,
    Summary,
    TargetContext,
    memoised,
)

if TYPE_CHECKING:
    from ..config import CheckSpec, LoadedMatrix
    from ..generation_cache import ResolvedTarget
    from ..suites import Prompt, Suite

Allowed = Literal["normalization", "control-tokens"]
Source = Literal["render", "tokenize-endpoint", "usage", "none"]


class TokenizationSpec(KindSpec):
    """The prompts tokenized by each of ``targets`` (the first is the reference); ``allow``:
    tokenizer properties that pass (still named on the item)."""

    targets: list[str] = Field(min_length=2)
    allow: list[Allowed] = Field(default_factory=list)

    def baseline_side(self, loc: Loc) -> Side:
        return Side(None, self.targets[0], (*loc, "targets", 0))

    def test_sides(self, loc: Loc) -> list[Side]:
        return [
            Side(side_label(ref, self.targets[0]), ref, (*loc, "targets", j))
            for j, ref in enumerate(self.targets)
            if j > 0
        ]


def side_label(ref: str, reference: str) -> str:
    """An other side's label in item ids: its backend when it has the reference's model,
    its model when it has the reference's backend, else ``model.backend``."""
    model, _, backend = ref.partition("@")
    ref_model, _, ref_backend = reference.partition("@")
    if model == ref_model and backend:
        return backend
    if backend == ref_backend or not backend:
        return model
    return f"{model}.{backend}"


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenSideRecord:
    """One side's tokenization of the prompt."""

    target: str
    """The target's label (``adder@llama``)."""
    source: Source
    """Where the ids come from: the backend's ``render`` (mlx-lm's tokenizer, llama-server's
    ``/tokenize``), the server's ``/tokenize`` endpoint, only a count from ``usage``, or
    ``none`` (no count either)."""
    text: str | None
    """The rendered text (None where the server renders it unseen)."""
    ids: list[int] | None
    """The prompt's token ids (None: count only)."""
    count: int | None
    """The number of prompt tokens (``len(ids)``, or the server's count)."""
    leading_special: int = 0
    """Leading special tokens (BOS ...) found when the ids differ (0 when not asked)."""


@dataclass(frozen=True)
class WindowRow:
    """A token position from the first difference on, on both sides (None past an end)."""

    position: int
    reference_id: int | None
    reference_piece: str | None
    other_id: int | None
    other_piece: str | None


@dataclass(frozen=True)
class TokenizationPrompt:
    """The record of a tokenization item (role ``prompt``): one prompt, the reference and one
    other target."""

    prompt_id: str
    reference: TokenSideRecord
    other: TokenSideRecord
    status: str
    """``identical``, ``count-only`` (equal counts, ids not compared) or ``differs``."""
    cause: str | None
    """Why it differs (a :class:`~..metrics.tokenization.Cause` value), None otherwise."""
    allowed: bool
    """The difference is a tokenizer property the check allows (the item passes)."""
    first_difference: int | None
    """The first differing token position (None: identical, or counts only)."""
    text_difference: int | None
    """The first differing character of the rendered texts (``template`` only)."""
    explanation: str
    """The verdict in words."""
    window: list[WindowRow] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """The tokens from the first difference on, both sides (absent when identical)."""


@dataclass(frozen=True)
class SideCounts:
    """One other target's items in an aggregate."""

    items: int
    identical: int
    count_only: int
    differing: int
    errors: int


@dataclass(frozen=True)
class TokenizationAggregate:
    """The record of a tokenization check x suite's aggregate (role ``aggregate``)."""

    target: str
    """The reference target's label."""
    items: int
    """Items aggregated (prompt x other target)."""
    identical: int
    count_only: int
    """Items where only prompt token counts were compared, and were equal."""
    differing: int
    """Items whose tokenizations differ (allowed ones included)."""
    allowed: int
    """Differing items whose cause is an allowed tokenizer property (they pass)."""
    by_cause: dict[str, int]
    """Differing items by cause."""
    n_errors: int
    errors: dict[str, str]
    """By item name: its error message."""
    failed: list[str]
    """The names of the failed items, sorted."""
    sides: dict[str, SideCounts]
    """By other target's label in item ids: its counts."""
    engines: dict[str, dict[str, Any]]
    """By target label: the engine's identity (``observed.tokenize`` says whether an
    OpenAI-compatible server has ``/tokenize``)."""


# -- running -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One target's tokenization of one prompt (before any comparison)."""

    side: TokenSideRecord
    rendered_ids: bool
    """Whether the ids are the backend's render's (its tokenizer's special tokens, pieces
    and tokenize are then available for the comparison)."""


async def measure(backend: Backend, label: str, prompt: Any) -> Measured:
    """``prompt`` (a rendered ``PromptInput``) as ``backend`` processes it: its ids, else
    its count (see the module docstring)."""
    ids = await backend.prompt_ids(prompt)
    text = prompt.text if prompt.token_ids is not None else None
    if ids is not None:
        source: Source = "render" if prompt.token_ids is not None else "tokenize-endpoint"
        return Measured(TokenSideRecord(label, source, text, ids, len(ids)), True)
    count = await backend.prompt_token_count(prompt)
    source = "usage" if count is not None else "none"
    return Measured(TokenSideRecord(label, source, text, None, count), False)


async def details(backend: Backend, ids: Sequence[int], positions: Sequence[int]) -> TokenSide:
    """A :class:`TokenSide` with the special tokens among ``ids`` at ``positions`` and
    their texts (the rendered text and NFC probe are added by the caller)."""
    at = [p for p in positions if p < len(ids)]
    chosen = [ids[p] for p in at]
    special = await backend.special_tokens(chosen) if chosen else set()
    pieces = await backend.token_pieces(chosen) if chosen else []
    return TokenSide(
        text=None,
        ids=ids,
        pieces=dict(zip(at, pieces or [], strict=False)),
        special=frozenset(special or ()),
    )


@dataclass(frozen=True)
class TokenItem:
    """An item's record and its violations (:func:`item_violations`)."""

    record: TokenizationPrompt
    outcome: Outcome


def item_violations(record: TokenizationPrompt) -> list[str]:
    """Why an item fails, from its record: tokenizations that differ, unless by an allowed
    tokenizer property."""
    if record.status == Status.DIFFERS.value and not record.allowed:
        return [f"{record.other.target} vs {record.reference.target}: {record.explanation}"]
    return []


@dataclass
class TokenizationRun(CheckRun[TokenizationSpec, KindThresholds]):
    """Each prompt tokenized by every target; one item per prompt and other target."""

    _measured: dict[tuple[str, str], Measured] = field(default_factory=dict, init=False)
    """By (target label, prompt id): its tokenization."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        sides = cast(TokenizationSpec, check.spec).test_sides(())
        return [
            ItemPlan(p.id, "prompt", p.id, param=side.label)
            for p in suite.prompts
            for side in sides
        ]

    @property
    def _allowed(self) -> frozenset[str]:
        return frozenset(self.spec.allow)

    def _side(self, label: str | None) -> ResolvedTarget:
        if label is None:
            return self.resolve(self.check.baseline_side(self.index))
        side = next(s for s in self.check.test_sides(self.index) if s.label == label)
        return self.resolve(side)

    def _measure(self, target: ResolvedTarget, prompt: Prompt) -> Measured:
        def compute() -> Measured:
            rendered = self.cache.render(target, prompt, self.settings.thinking)
            return self.cache.call(target, measure(target.backend, target.label, rendered))

        return memoised(self._measured, (target.label, prompt.id), compute)

    def _token_side(
        self, target: ResolvedTarget, measured: Measured, positions: Sequence[int]
    ) -> TokenSide:
        side = measured.side
        if side.ids is None or not measured.rendered_ids:
            return TokenSide(text=side.text, ids=side.ids, count=side.count)
        if not positions:
            return TokenSide(text=side.text, ids=side.ids, count=side.count)
        found = self.cache.call(target, details(target.backend, side.ids, positions))
        return TokenSide(side.text, side.ids, side.count, found.pieces, found.special)

    def _compare(
        self, ref: tuple[ResolvedTarget, Measured], other: tuple[ResolvedTarget, Measured]
    ) -> tuple[TokenVerdict, TokenSide, TokenSide]:
        """The verdict, with the sides' special tokens, texts and NFC probe asked for only
        when both have ids that differ."""
        (ref_target, ref_m), (other_target, other_m) = ref, other
        a, b = ref_m.side.ids, other_m.side.ids
        position = first_divergence(a, b) if a is not None and b is not None else None
        if position is None:
            # identical ids, or counts only: the leading special tokens of a side with ids
            # name a BOS that a count lacks
            counts_differ = ref_m.side.count != other_m.side.count
            leading = range(LEADING) if counts_differ else range(0)
            sides = (
                self._token_side(ref_target, ref_m, leading),
                self._token_side(other_target, other_m, leading),
            )
            return compare_tokenizations(*sides, _names(ref, other)), *sides
        positions = sorted({*range(LEADING), *range(position, position + WINDOW)})
        ref_side = self._token_side(ref_target, ref_m, positions)
        other_side = self._token_side(other_target, other_m, positions)
        if needs_nfc_probe(ref_side, other_side):
            ref_side = self._nfc_probe(ref_target, ref_side)
            other_side = self._nfc_probe(other_target, other_side)
        verdict = compare_tokenizations(ref_side, other_side, _names(ref, other))
        return verdict, ref_side, other_side

    def _nfc_probe(self, target: ResolvedTarget, side: TokenSide) -> TokenSide:
        text = body_text(side)
        if text is None:
            return side
        nfc = unicodedata.normalize("NFC", text)
        ids = self.cache.call(target, target.backend.tokenize(nfc))
        return TokenSide(side.text, side.ids, side.count, side.pieces, side.special, ids)

    def run_item(self, plan: ItemPlan) -> Outcome:
        prompt = self.prompt(plan.key)
        label = plan.param or ""
        ref_target, other_target = self._side(None), self._side(label)
        ref = (ref_target, self._measure(ref_target, prompt))
        other = (other_target, self._measure(other_target, prompt))
        verdict, ref_side, other_side = self._compare(ref, other)
        allowed = (
            verdict.cause in TOKENIZER_PROPERTIES
            and verdict.cause is not None
            and verdict.cause.value in self._allowed
        )
        record = TokenizationPrompt(
            prompt_id=prompt.id,
            reference=_with_lead(ref[1].side, ref_side),
            other=_with_lead(other[1].side, other_side),
            status=verdict.status.value,
            cause=verdict.cause.value if verdict.cause else None,
            allowed=allowed,
            first_difference=verdict.first_difference,
            text_difference=verdict.text_difference,
            explanation=verdict.explanation,
            window=window(ref_side, other_side, verdict.first_difference),
        )
        return Outcome(
            item_violations(record),
            item_text(prompt, record),
            record,
            [
                ("infercheck_status", record.status),
                ("infercheck_cause", str(record.cause)),
                ("infercheck_first_difference", str(record.first_difference)),
            ],
        )

    def context(self) -> TargetContext:
        """The reference target and every target's engine."""
        targets = [self._side(None), *(self.resolve(s) for s in self.check.test_sides(self.index))]
        return TargetContext(targets[0].label, {t.label: t.backend.identity() for t in targets})


def summarize(
    items: Sequence[RecordedItem], thresholds: KindThresholds, context: TargetContext
) -> Summary:
    """The aggregate of the items' records (sorted by name: the same order for a live run
    and for merged shards), each judged again by :func:`item_violations`; failing when any
    item failed or errored."""
    judged: dict[str, TokenItem | str] = {}
    for item in sorted(items, key=lambda i: i.name):
        if item.record is None:
            judged[item.name] = item.error or "error"
        else:
            judged[item.name] = TokenItem(item.record, Outcome(item_violations(item.record)))
    return aggregate_summary(count_items(context.target, context.engines, judged))


def _names(
    ref: tuple[ResolvedTarget, Measured], other: tuple[ResolvedTarget, Measured]
) -> tuple[str, str]:
    return ref[0].label, other[0].label


def _with_lead(record: TokenSideRecord, side: TokenSide) -> TokenSideRecord:
    return TokenSideRecord(
        record.target, record.source, record.text, record.ids, record.count, leading_specials(side)
    )


def window(ref: TokenSide, other: TokenSide, start: int | None) -> list[WindowRow]:
    """Both sides' ids and texts at :data:`WINDOW` positions from ``start`` (none when
    ``start`` is None or no side has ids there)."""
    if start is None or ref.ids is None or other.ids is None:
        return []
    rows = []
    for p in range(start, start + WINDOW):
        if p >= len(ref.ids) and p >= len(other.ids):
            break
        rows.append(
            WindowRow(
                p,
                ref.ids[p] if p < len(ref.ids) else None,
                ref.pieces.get(p),
                other.ids[p] if p < len(other.ids) else None,
                other.pieces.get(p),
            )
        )
    return rows


def item_text(prompt: Prompt, record: TokenizationPrompt) -> str:
    """The item's report: the prompt, each side's source and size, the verdict and the
    window of tokens from the first difference."""
    lines = [f"prompt {prompt.id}: {safe_text(prompt.text)}"]
    for side in (record.reference, record.other):
        lines.append(f"  {side.target}: {side.count} tokens ({side.source})")
    allowed = " (allowed tokenizer property)" if record.allowed else ""
    lines.append(f"  {safe_text(record.explanation, limit=2000)}{allowed}")
    if record.window:
        width = max(len(record.reference.target), 12)
        lines.append(f"  {'pos':>5}  {record.reference.target:<{width}}  {record.other.target}")
        for row in record.window:
            lines.append(
                f"  {row.position:>5}  {_cell(row.reference_id, row.reference_piece):<{width}}"
                f"  {_cell(row.other_id, row.other_piece)}"
            )
    return "\n".join(lines)


def _cell(token: int | None, piece: str | None) -> str:
    if token is None:
        return "-"
    return f"{token} {safe_text(repr(piece)) if piece is not None else '?'}"


def count_items(
    target: str, identities: dict[str, dict[str, Any]], items: Mapping[str, TokenItem | str]
) -> TokenizationAggregate:
    """The aggregate of ``items`` by name (a string is an item's error)."""
    done = {k: i.record for k, i in items.items() if isinstance(i, TokenItem)}
    errors = {k: i for k, i in items.items() if isinstance(i, str)}
    failed = sorted(k for k, i in items.items() if isinstance(i, str) or i.outcome.violations)
    by_cause: dict[str, int] = {}
    for record in done.values():
        if record.cause is not None:
            by_cause[record.cause] = by_cause.get(record.cause, 0) + 1
    sides: dict[str, list[str]] = {}
    for name in items:
        sides.setdefault(name.rpartition("[")[2].rstrip("]"), []).append(name)
    return TokenizationAggregate(
        target=target,
        items=len(items),
        identical=_count(done.values(), Status.IDENTICAL),
        count_only=_count(done.values(), Status.COUNT_ONLY),
        differing=_count(done.values(), Status.DIFFERS),
        allowed=sum(1 for r in done.values() if r.allowed),
        by_cause=dict(sorted(by_cause.items())),
        n_errors=len(errors),
        errors=errors,
        failed=failed,
        sides={
            label: SideCounts(
                items=len(names),
                identical=_count((done[n] for n in names if n in done), Status.IDENTICAL),
                count_only=_count((done[n] for n in names if n in done), Status.COUNT_ONLY),
                differing=_count((done[n] for n in names if n in done), Status.DIFFERS),
                errors=sum(1 for n in names if n in errors),
            )
            for label, names in sides.items()
        },
        engines=identities,
    )


def _count(records: Any, status: Status) -> int:
    return sum(1 for r in records if r.status == status.value)


def aggregate_summary(record: TokenizationAggregate) -> Summary:
    """Failing when any item failed or errored; the text counts the items."""
    violations: list[str] = []  # failed items: the framework's rule (checks/framework/items.py)
    causes = ", ".join(f"{c} {n}" for c, n in record.by_cause.items())
    text = (
        f"{record.target}: {record.identical}/{record.items} identical, {record.count_only} "
        f"count-only, {record.differing} differing{f' ({causes})' if causes else ''}"
        f"{f', {record.allowed} allowed' if record.allowed else ''}, {record.n_errors} errors"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_items", record.items),
        ("infercheck_identical", record.identical),
        ("infercheck_count_only", record.count_only),
        ("infercheck_differing", record.differing),
        ("infercheck_errors", record.n_errors),
    ]
    return Summary(record, violations, text, properties)


# -- presentation ----------------------------------------------------------------------------------


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per tokenization check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        try:
            record = load_record(TokenizationAggregate, data)
        except ValueError:
            return ["?"] * 5
        causes = ", ".join(f"{c} {n}" for c, n in record.by_cause.items()) or "-"
        return [
            f"{record.identical}/{record.items}",
            str(record.count_only),
            str(record.differing),
            causes,
            str(record.n_errors),
        ]

    columns = (
        ("identical", ">"),
        ("count-only", ">"),
        ("differing", ">"),
        ("causes", "<"),
        ("errors", ">"),
    )
    return check_table(aggregates, columns, cells)


def tokenization_prompt(data: Mapping[str, Any]) -> str:
    """The verdict, the tokens from the first difference on both sides, and the rendered
    texts side by side; every text escaped."""
    record = load_record(TokenizationPrompt, data)
    facts = {
        "prompt_id": record.prompt_id,
        "status": record.status,
        "cause": record.cause,
        "allowed": record.allowed,
        "first_difference": record.first_difference,
        "explanation": record.explanation,
    }
    for name, side in (("reference", record.reference), ("other", record.other)):
        facts[name] = f"{side.target}: {side.count} tokens ({side.source})"
    parts = [kv_table(facts)]
    if record.window:
        rows = [
            [
                esc(row.position),
                esc("-" if row.reference_id is None else row.reference_id),
                f"<code>{esc(row.reference_piece)}</code>",
                esc("-" if row.other_id is None else row.other_id),
                f"<code>{esc(row.other_piece)}</code>",
            ]
            for row in record.window
        ]
        ref, other = esc(record.reference.target), esc(record.other.target)
        parts.append(
            table(["position", f"{ref} id", f"{ref} text", f"{other} id", f"{other} text"], rows)
        )
    if record.reference.text is not None and record.other.text is not None:
        parts.append(
            side_by_side(
                record.reference.target,
                record.reference.text,
                record.other.target,
                record.other.text,
                record.first_difference,
            )
        )
    return "".join(parts)


def tokenization_aggregate(data: Mapping[str, Any]) -> str:
    """The counts (by cause and by other target), errors and engines."""
    shown = {k: v for k, v in data.items() if k not in ("engines", "errors", "sides")}
    parts = [kv_table(shown)]
    sides = data.get("sides")
    if isinstance(sides, Mapping) and sides:
        keys = ["items", "identical", "count_only", "differing", "errors"]
        rows = [
            [esc(label), *(esc(c.get(k)) if isinstance(c, Mapping) else "-" for k in keys)]
            for label, c in sides.items()
        ]
        titles = ["items", "identical", "count-only (counts equal)", "differing", "errors"]
        parts.append(table(["target tested", *titles], rows))
    errors = data.get("errors")
    if isinstance(errors, Mapping) and errors:
        parts.append("<h4>errors</h4>" + kv_table(errors))
    return "".join(parts) + engines(data.get("engines"))


def tested_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per target tested against the reference in the HTML summary (its counts and
    the reference's label); the reference alone for data that is not an aggregate record."""
    try:
        record = load_record(TokenizationAggregate, data)
    except ValueError:
        return [(str(data.get("target", "?")), data)]
    return [
        (label, {**plain_data(counts), "reference": record.target})
        for label, counts in record.sides.items()
    ] or [(record.target, data)]


MEASURES: tuple[MeasureSpec, ...] = (
    ("against reference", ("reference",), lambda ref: esc("-" if ref is None else ref)),
    ("identical", ("identical", "items"), rate),
    ("count-only (counts equal)", ("count_only", "items"), rate),
    ("differing", ("differing", "items"), rate),
    ("errors", ("errors",), num),
)
"""The rows of a tokenization check's summary table (a column per target tested)."""


def reference_model(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """``tokenization(adder)``: the reference target's model."""
    side = check.baseline_side(index)
    return loaded.target(side.ref, side.loc).model


TOKENIZATION = LegacyKind(
    name="tokenization",
    spec=TokenizationSpec,
    run=TokenizationRun,
    label=reference_model,
    thresholds=KindThresholds,
    context=TargetContext,
    summarize=summarize,
    family="tokenization",
    summary_lines=summary_lines,
    records={"prompt": TokenizationPrompt, "aggregate": TokenizationAggregate},
    views={"prompt": tokenization_prompt, "aggregate": tokenization_aggregate},
    measures=MEASURES,
    other_measures=False,
    columns=tested_columns,
    headline="identical",
)
