"""structured-parity: tool calls, finish reasons, the reasoning/content split, usage and
several choices must agree across the paths of one server and across servers.

``structured-parity: {targets: [tiny@llama, tiny@vllm], paths: [chat, chat-stream]}``: each
prompt (a suite line, with its ``tools``, ``tool_choice``, ``response_format`` and
conversation turns, tool calls and results included) becomes one
:class:`~pytest_infercheck.structured.records.StructuredRequest`
(:mod:`~pytest_infercheck.structured.request`), sent at temperature 0 through each ``path`` a
target offers (default: every one it offers of ``chat``, ``chat-stream``, ``chat-n2``,
``messages``, ``messages-stream``; a listed path it does not offer is recorded
``unsupported``). The backend must answer structured requests
(:class:`~pytest_infercheck.structured.records.StructuredChat`).

One item per prompt and target (``tu001[vllm]``, labelled by backend when the targets share
the model; a single target: one per prompt, ``tu001``), plus the aggregate. In an item:

- the target's ``chat`` (non-streamed) answer is its reference; every other path's answer is
  compared with it (the same prompt ids, so ``usage.prompt_tokens`` must be equal);
- a target after the first: its ``chat`` answer is compared with the first target's
  ``chat`` answer, ``usage`` only where the request's prompt ids are known on both and agree
  (otherwise the counts are noted, not judged). The ids: each target's backend renders the
  request's turns with its tools (:meth:`~pytest_infercheck.backends.base.Backend.
  render_messages`: llama-server ``/apply-template`` then ``/tokenize``, vLLM ``/tokenize``
  with the messages and tools, mlx-lm its tokenizer's template); a server that templates
  only when it generates (vllm-mlx, mlx_lm.server, an ``openai`` server) gives none, so
  its usage is not judged across targets;
- every answer of the target is checked for validity.

The fields compared and the validity rules are those of
:mod:`~pytest_infercheck.structured.judge`; each difference and fault names its field and
path (``tool_calls differ: chat-stream vs chat: ...``, ``finish_reason: chat-stream 'stop'
vs chat 'tool_calls'``). A request the server refuses (``UnsupportedRequest``: ``n: 2`` on
llama-server) is recorded ``unsupported`` with the server's message and does not fail; a
server error fails the item with its message (the other paths still run); a malformed
answer is a fault. ``allow`` (a threshold) lists fields whose differences pass (each is still
shown and counted); validity faults and errors always fail.

A conversation's ``generate`` turns are filled in with the first target's ``chat`` answer
to the turns before them (its content and parsed calls), so that every target and path
receives the same history.

The aggregate (:func:`summarize`, a pure function of the items' records and the
thresholds, which the live run and ``pytest-infercheck report`` over shards call alike)
judges each record again (:func:`item_violations`), counts differences by field, faults by
kind, answers by path and items per target, and fails when any item failed or errored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast, get_args

from pydantic import Field, field_validator

from ..backends import BackendError
from ..backends.base import Message
from ..records import OMIT_WHEN_EMPTY, load_record, plain_data
from ..render.markup import clip, esc, kv_table, num, rate, table
from ..render.table import check_table
from ..render.text import safe_text
from ..render.views import engines
from ..specs import KindSpec, KindThresholds, Loc, Side
from ..structured.judge import (
    FIELDS,
    INVALID_KINDS,
    ChoiceRecord,
    Comparison,
    FieldName,
    PathResult,
    compare_results,
    path_result,
)
from ..structured.records import ChatTurn, Path, StructuredChat, StructuredRequest
from ..structured.request import (
    UnfilledTurn,
    generate_indices,
    structured_request,
    with_n,
)
from ..tools import ToolCall, canonical_json
from .protocol import (
    Aggregates,
    CheckRun,
    ItemPlan,
    LegacyKind,
    MeasureSpec,
    Outcome,
    RecordedItem,
    Summary,
    memoised,
    target_label,
)
from .tokenization import side_label

if TYPE_CHECKING:
    from ..config import CheckSpec, LoadedMatrix
    from ..generation_cache import ResolvedTarget
    from ..suites import Prompt, Suite

PATHS: tuple[Path, ...] = get_args(Path)
"""Every path, in the order an item sends them (``chat``, the reference, first)."""
REFERENCE: Path = "chat"


class StructuredParitySpec(KindSpec):
    """``targets`` (one or several; the first is the cross-target reference) and ``paths``
    (default: all a target offers; ``chat`` is the reference and always sent)."""

    targets: list[str] = Field(min_length=1)
    paths: list[Path] | None = None

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
        model when it names none), the others as :func:`~.tokenization.side_label`."""
        return [side_label(ref, self.targets[0]) for ref in self.targets]


class StructuredParityThresholds(KindThresholds):
    """``allow``: fields whose differences pass (still shown on the item and counted);
    validity faults and errors are never allowed."""

    allow: list[FieldName] = Field(default_factory=list)


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestFacts:
    """What the item's request held (the same for every path and target)."""

    prompt: str
    """The last user turn."""
    turns: int
    tools: list[str]
    """The offered functions' names."""
    tool_choice: str | None
    """``auto``, ``none``, ``required``, or a named function's canonical JSON; None: unset."""
    response_format: str | None
    """The JSON schema's canonical JSON; None: unset."""
    max_tokens: int
    filled: list[int] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """``generate`` turns (1-based) filled in with the first target's ``chat`` answer."""


@dataclass(frozen=True)
class StructuredParityPrompt:
    """The record of an item (role ``prompt``): one prompt through one target's paths."""

    prompt_id: str
    target: str
    """The target's label (``tiny@vllm``)."""
    side: str
    """Its label in item ids and texts (``vllm``)."""
    reference_target: str
    """The first target's label (this target's for the first)."""
    request: RequestFacts
    results: list[PathResult]
    """This target's answer through each path, ``chat`` first."""
    comparisons: list[Comparison]
    """Each other path against ``chat``; for a target after the first, then its ``chat``
    against the first target's."""
    reference_chat: PathResult | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first target's ``chat`` answer (a target after the first)."""
    prompt_ids: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Across targets: whether the request's prompt ids agree (``same``, ``differ at
    position 12``, ``unknown: ...``)."""


@dataclass(frozen=True)
class TargetCounts:
    """One target's items in an aggregate."""

    items: int
    passed: int
    differences: int
    """Differences that fail (not allowed)."""
    invalid: int
    unsupported: int
    """Answers recorded ``unsupported``."""
    errors: int
    """Errored items and answers that failed (a server error, malformed)."""


@dataclass(frozen=True)
class PathCounts:
    """One path over the items of an aggregate (``cross-target``: the comparisons of a
    target's ``chat`` with the first target's)."""

    answered: int = 0
    unsupported: int = 0
    failed: int = 0
    """Server errors and malformed answers."""
    compared: int = 0
    """Comparisons with its reference that had both answers."""
    differing: int = 0
    """Compared ones with a difference that fails."""


@dataclass(frozen=True)
class StructuredParityAggregate:
    """The record of a structured-parity check x suite (role ``aggregate``)."""

    target: str
    """The first target's label."""
    targets: list[str]
    sides: list[str]
    """Each target's label in item ids, in order."""
    items: int
    passed: int
    failed: list[str]
    """The names of the failed items, sorted."""
    n_errors: int
    """Items without a record (the target is not a structured chat server, a
    ``generate`` turn could not be filled in)."""
    errors: dict[str, str]
    """By item name: why it produced no record."""
    failed_answers: int
    """Answers that failed: a server error or a malformed answer (each fails its item)."""
    differences: dict[str, int]
    """Differences found by field (allowed ones too), in :data:`FIELDS` order."""
    allowed: int
    """Differences that passed by ``allow``."""
    invalid: dict[str, int]
    """Validity faults by kind."""
    unsupported: dict[str, str]
    """By ``target path``: the server's message of its first refusal."""
    paths: dict[str, PathCounts]
    per_target: dict[str, TargetCounts]
    """By target label in item ids."""
    engines: dict[str, dict[str, Any]]


@dataclass
class StructuredParityContext:
    """What the aggregate needs besides its items' records (fields of
    :class:`StructuredParityAggregate`, so a merge reads it back from a shard's
    aggregate)."""

    target: str
    """The first target's label."""
    targets: list[str]
    sides: list[str]
    """Each target's label in item ids, in order."""
    engines: dict[str, dict[str, Any]]


# -- judgement (pure) -----------------------------------------------------------------------------


def item_violations(
    record: StructuredParityPrompt, thresholds: StructuredParityThresholds
) -> list[str]:
    """Why an item fails, from its record: its answers' validity faults and server errors,
    then the differences of its comparisons whose field ``allow`` does not list."""
    out: list[str] = []
    for result in record.results:
        out += [i.text for i in result.invalid]
        if result.status == "error":
            out.append(f"error: {result.path}: {result.message}")
    allowed = set(thresholds.allow)
    for comparison in record.comparisons:
        out += [d.text for d in comparison.differences if d.field not in allowed]
    return out


def differing_fields(record: StructuredParityPrompt) -> list[str]:
    """The fields that differ anywhere in the item, in :data:`FIELDS` order."""
    found = {d.field for c in record.comparisons for d in c.differences}
    return [f for f in FIELDS if f in found]


def summarize(
    items: Sequence[RecordedItem],
    thresholds: StructuredParityThresholds,
    context: StructuredParityContext,
) -> Summary:
    """The aggregate of the items' records (sorted by name: the same for a live run and for
    merged shards), each judged again by :func:`item_violations`."""
    ordered = sorted(items, key=lambda i: i.name)
    records: list[tuple[str, StructuredParityPrompt]] = [
        (i.name, i.record) for i in ordered if i.record is not None
    ]
    errors = {i.name: i.error or "error" for i in ordered if i.record is None}
    judged = {name: item_violations(r, thresholds) for name, r in records}
    failed = sorted([name for name, v in judged.items() if v] + list(errors))
    allowed = set(thresholds.allow)
    differences: dict[str, int] = {}
    invalid: dict[str, int] = {}
    unsupported: dict[str, str] = {}
    paths: dict[str, dict[str, int]] = {}
    for _, record in records:
        for result in record.results:
            counts = paths.setdefault(result.path, {})
            key = {"answered": "answered", "unsupported": "unsupported"}.get(
                result.status, "failed"
            )
            counts[key] = counts.get(key, 0) + 1
            for fault in result.invalid:
                invalid[fault.kind] = invalid.get(fault.kind, 0) + 1
            if result.status == "unsupported":
                unsupported.setdefault(f"{record.target} {result.path}", result.message or "")
        for comparison in record.comparisons:
            path = "cross-target" if comparison.reference != REFERENCE else comparison.side
            counts = paths.setdefault(path, {})
            if comparison.compared:
                counts["compared"] = counts.get("compared", 0) + 1
                fails = any(d.field not in allowed for d in comparison.differences)
                counts["differing"] = counts.get("differing", 0) + fails
            for d in comparison.differences:
                differences[d.field] = differences.get(d.field, 0) + 1
    order = [*PATHS, "cross-target"]
    data = StructuredParityAggregate(
        target=context.target,
        targets=list(context.targets),
        sides=list(context.sides),
        items=len(ordered),
        passed=len(ordered) - len(failed),
        failed=failed,
        n_errors=len(errors),
        errors=errors,
        differences={f: differences[f] for f in FIELDS if f in differences},
        failed_answers=sum(c.get("failed", 0) for c in paths.values()),
        allowed=sum(n for f, n in differences.items() if f in allowed),
        invalid={k: invalid[k] for k in INVALID_KINDS if k in invalid},
        unsupported=unsupported,
        paths={p: PathCounts(**paths[p]) for p in order if p in paths},
        per_target=per_target(ordered, judged, context.sides),
        engines=context.engines,
    )
    # Failed and errored items fail the aggregate by the framework's rule.
    return Summary(data, [], aggregate_text(data), aggregate_properties(data))


def per_target(
    items: Sequence[RecordedItem], judged: Mapping[str, list[str]], sides: Sequence[str]
) -> dict[str, TargetCounts]:
    """Each target's counts, by its label (an errored item's from its name: ``tu001[vllm]``,
    or the only target's)."""
    counts: dict[str, dict[str, int]] = {side: {} for side in sides}
    for item in items:
        record: StructuredParityPrompt | None = item.record
        if record is not None:
            side = record.side
        elif "[" in item.name:
            side = item.name.rpartition("[")[2].rstrip("]")
        else:
            side = sides[0] if sides else "?"
        c = counts.setdefault(side, {})
        c["items"] = c.get("items", 0) + 1
        c["passed"] = c.get("passed", 0) + (record is not None and not judged.get(item.name))
        if record is None:
            c["errors"] = c.get("errors", 0) + 1
            continue
        violations = set(judged.get(item.name, []))
        c["differences"] = c.get("differences", 0) + sum(
            d.text in violations for x in record.comparisons for d in x.differences
        )
        c["invalid"] = c.get("invalid", 0) + sum(len(r.invalid) for r in record.results)
        c["unsupported"] = c.get("unsupported", 0) + sum(
            r.status == "unsupported" for r in record.results
        )
        c["errors"] = c.get("errors", 0) + sum(
            r.status in ("error", "malformed") for r in record.results
        )
    keys = ("items", "passed", "differences", "invalid", "unsupported", "errors")
    return {
        side: TargetCounts(**{k: c.get(k, 0) for k in keys})
        for side, c in counts.items()
        if c.get("items")
    }


def aggregate_text(data: StructuredParityAggregate) -> str:
    """The aggregate in words: items passing, differences by field, faults, refusals."""
    fields = ", ".join(f"{f} {n}" for f, n in data.differences.items()) or "none"
    faults = ", ".join(f"{k} {n}" for k, n in data.invalid.items()) or "none"
    lines = [
        f"{', '.join(data.targets)}: {data.passed}/{data.items} items pass; differences: "
        f"{fields}{f' ({data.allowed} allowed)' if data.allowed else ''}; invalid: {faults}; "
        f"{len(data.unsupported)} unsupported path(s); {data.failed_answers} failed answers, "
        f"{data.n_errors} errored items"
    ]
    for path, c in data.paths.items():
        lines.append(
            f"  {path}: {c.answered} answered, {c.unsupported} unsupported, {c.failed} failed, "
            f"{c.differing}/{c.compared} differing"
        )
    lines += [
        f"  unsupported: {where}: {safe_text(msg)}" for where, msg in data.unsupported.items()
    ]
    return "\n".join(lines)


def aggregate_properties(data: StructuredParityAggregate) -> list[tuple[str, Any]]:
    """JUnit properties of the aggregate."""
    return [
        ("infercheck_items", data.items),
        ("infercheck_passed", data.passed),
        ("infercheck_errors", data.n_errors),
        ("infercheck_failed_answers", data.failed_answers),
        ("infercheck_unsupported", len(data.unsupported)),
        ("infercheck_invalid", sum(data.invalid.values())),
        ("infercheck_differences", sum(data.differences.values())),
        *(
            (f"infercheck_differences_{f.replace('.', '_')}", n)
            for f, n in data.differences.items()
        ),
    ]


# -- running ------------------------------------------------------------------------------------


def request_facts(
    prompt: Prompt, request: StructuredRequest, filled: Sequence[int]
) -> RequestFacts:
    choice = request.tool_choice
    return RequestFacts(
        prompt=prompt.text,
        turns=len(request.messages),
        tools=[t.name for t in request.tools],
        tool_choice=choice if isinstance(choice, str) or choice is None else canonical_json(choice),
        response_format=(
            None if request.response_format is None else canonical_json(request.response_format)
        ),
        max_tokens=request.max_tokens,
        filled=[i + 1 for i in filled],
    )


def first_ids_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


@dataclass
class StructuredParityRun(CheckRun[StructuredParitySpec, StructuredParityThresholds]):
    """Each prompt through every path of every target (see the module docstring)."""

    _answers: dict[tuple[str, str, Path], PathResult] = field(
        default_factory=dict, init=False, repr=False
    )
    """By (target label, prompt id, path): what it answered (the first target's ``chat``
    serves every target's item)."""
    _requests: dict[str, tuple[StructuredRequest, tuple[int, ...]]] = field(
        default_factory=dict, init=False, repr=False
    )
    """By prompt id: its request and the ``generate`` turns filled in."""
    _prompt_ids: dict[tuple[str, str], tuple[int, ...] | str] = field(
        default_factory=dict, init=False, repr=False
    )
    """By (target label, prompt id): the request's prompt ids, or why they are not known."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        labels = cast(StructuredParitySpec, check.spec).labels()
        several = len(labels) > 1
        return [
            ItemPlan(p.id, "prompt", p.id, param=label if several else None)
            for p in suite.prompts
            for label in labels
        ]

    @property
    def labels(self) -> list[str]:
        return self.spec.labels()

    def _target(self, label: str) -> ResolvedTarget:
        sides = [self.check.baseline_side(self.index), *self.check.test_sides(self.index)]
        return self.resolve(sides[self.labels.index(label)])

    def _backend(self, target: ResolvedTarget) -> StructuredChat:
        backend = target.backend
        if not isinstance(backend, StructuredChat):
            raise BackendError(
                f"structured-parity needs a server that answers structured chat requests: "
                f"{target.label} ({type(backend).__name__}) does not"
            )
        return backend

    def _paths(self, target: ResolvedTarget) -> list[tuple[Path, bool]]:
        """The paths sent to ``target``, ``chat`` first, each with whether it offers it."""
        offered = set(self._backend(target).structured_paths())
        wanted = self.spec.paths if self.spec.paths is not None else list(PATHS)
        return [
            (p, p in offered)
            for p in PATHS
            if p in wanted and (p in offered or self.spec.paths is not None or p == REFERENCE)
        ]

    def _request(self, prompt: Prompt) -> tuple[StructuredRequest, tuple[int, ...]]:
        """``prompt``'s request, its ``generate`` turns filled in by the first target's
        ``chat`` answers (memoised).

        Raises:
            BackendError: a turn could not be filled in.
        """

        def compute() -> tuple[StructuredRequest, tuple[int, ...]]:
            tokens = self.params(prompt).max_tokens
            seed = 0 if self.settings.seed is None else self.settings.seed
            filled: dict[int, ChatTurn] = {}
            indices = generate_indices(prompt)
            for index in indices:
                history = structured_request(prompt, tokens, seed=seed, filled=filled, upto=index)
                filled[index] = self._fill(history, index)
            try:
                return structured_request(prompt, tokens, seed=seed, filled=filled), indices
            except UnfilledTurn as exc:  # pragma: no cover (every generate turn was filled)
                raise BackendError(str(exc)) from exc

        return memoised(self._requests, prompt.id, compute)

    def _fill(self, history: StructuredRequest, index: int) -> ChatTurn:
        """Turn ``index``, generated by the first target's ``chat`` path from ``history``."""
        first = self._target(self.labels[0])
        try:
            answer = self.cache.call(first, self._backend(first).structured(history, REFERENCE))
        except BackendError as exc:
            raise BackendError(
                f"turn {index + 1} is 'generate' and {first.label} chat failed to fill it: {exc}"
            ) from exc
        if not answer.choices:
            raise BackendError(f"turn {index + 1}: {first.label} chat answered no choice")
        choice = answer.choices[0]
        calls: tuple[ToolCall, ...] = tuple(c.call for c in choice.calls if c.place == "tool_calls")
        return ChatTurn("assistant", choice.content, calls)

    def _answer(
        self, target: ResolvedTarget, prompt_id: str, request: StructuredRequest, path: Path
    ) -> PathResult:
        """``request`` through ``path`` of ``target`` as a record (memoised)."""

        def compute() -> PathResult:
            sent = with_n(request, 2) if path == "chat-n2" else request
            try:
                answer = self.cache.call(target, self._backend(target).structured(sent, path))
            except BackendError as exc:
                return path_result(target.label, path, exc, sent)
            return path_result(target.label, path, answer, sent)

        return memoised(self._answers, (target.label, prompt_id, path), compute)

    def _ids(
        self, target: ResolvedTarget, prompt_id: str, request: StructuredRequest
    ) -> tuple[int, ...] | str:
        """The request's prompt ids on ``target`` (its backend's render of the turns with the
        tools), or why they are not known (memoised)."""

        def compute() -> tuple[int, ...] | str:
            messages = [
                Message(t.role, t.content or "", tuple(t.tool_calls), t.name)
                for t in request.messages
            ]
            try:
                rendered = self.cache.render_messages(
                    target,
                    messages,
                    self.settings.thinking,
                    tools=request.tools,
                    tool_choice=request.tool_choice,
                )
            except BackendError as exc:
                return f"{target.label} cannot render the request: {exc}"
            if rendered.token_ids is None:
                return f"{target.label} templates on the server (no prompt ids)"
            return tuple(rendered.token_ids)

        return memoised(self._prompt_ids, (target.label, prompt_id), compute)

    def _same_prompt(
        self,
        first: ResolvedTarget,
        target: ResolvedTarget,
        prompt_id: str,
        request: StructuredRequest,
    ) -> tuple[bool | None, str]:
        """Whether both targets turn the request into the same prompt ids (None: unknown),
        and the item's words for it."""
        a, b = self._ids(first, prompt_id, request), self._ids(target, prompt_id, request)
        if isinstance(a, str) or isinstance(b, str):
            why = "; ".join(x for x in (a, b) if isinstance(x, str))
            return None, f"unknown: {why}"
        if a == b:
            return True, f"same ({len(a)} ids)"
        at = first_ids_difference(a, b)
        return False, f"differ at position {at} ({len(a)} vs {len(b)} ids)"

    def run_item(self, plan: ItemPlan) -> Outcome:
        label = plan.param or self.labels[0]
        target = self._target(label)
        self._backend(target)
        prompt = self.prompt(plan.key)
        request, filled = self._request(prompt)
        results = []
        for path, offered in self._paths(target):
            if offered:
                results.append(self._answer(target, prompt.id, request, path))
            else:
                offers = ", ".join(self._backend(target).structured_paths())
                results.append(
                    PathResult(
                        target.label,
                        path,
                        "unsupported",
                        f"{target.label} does not offer {path} (it offers: {offers})",
                    )
                )
        reference = results[0]
        comparisons = [
            compare_results(reference, r, REFERENCE, r.path, same_prompt=True) for r in results[1:]
        ]
        first_chat: PathResult | None = None
        ids_text: str | None = None
        if label != self.labels[0]:
            first = self._target(self.labels[0])
            self._backend(first)
            first_chat = self._answer(first, prompt.id, request, REFERENCE)
            same, ids_text = self._same_prompt(first, target, prompt.id, request)
            comparisons.append(
                compare_results(
                    first_chat,
                    reference,
                    f"{self.labels[0]} {REFERENCE}",
                    f"{label} {REFERENCE}",
                    same_prompt=same,
                    prompt_note=f"prompt ids {ids_text}",
                )
            )
        record = StructuredParityPrompt(
            prompt_id=prompt.id,
            target=target.label,
            side=label,
            reference_target=self._target(self.labels[0]).label,
            request=request_facts(prompt, request, filled),
            results=results,
            comparisons=comparisons,
            reference_chat=first_chat,
            prompt_ids=ids_text,
        )
        violations = item_violations(record, self.thresholds)
        return Outcome(violations, describe(record), record, item_properties(record, violations))

    def context(self) -> StructuredParityContext:
        targets = [self._target(label) for label in self.labels]
        return StructuredParityContext(
            targets[0].label,
            [t.label for t in targets],
            list(self.labels),
            {t.label: t.backend.identity() for t in targets},
        )


def item_properties(record: StructuredParityPrompt, violations: list[str]) -> list[tuple[str, Any]]:
    """JUnit properties of an item."""
    return [
        ("infercheck_paths_answered", sum(r.status == "answered" for r in record.results)),
        ("infercheck_unsupported", sum(r.status == "unsupported" for r in record.results)),
        ("infercheck_invalid", sum(len(r.invalid) for r in record.results)),
        ("infercheck_differences", sum(len(c.differences) for c in record.comparisons)),
        ("infercheck_differing_fields", ",".join(differing_fields(record))),
        ("infercheck_violations", len(violations)),
    ]


# -- presentation -------------------------------------------------------------------------------


def choice_text(choice: ChoiceRecord) -> str:
    """A choice in one line: finish reason, calls with their place, content, reasoning."""
    calls = ", ".join(
        c.shown() + ("" if c.place == "tool_calls" else " [in content]") for c in choice.calls
    )
    parts = [f"finish {choice.finish_reason!r}", f"calls [{calls}]"]
    if choice.content:
        parts.append(f"content {choice.content!r}")
    if choice.reasoning:
        parts.append(f"reasoning {choice.reasoning!r}")
    return ", ".join(parts)


def result_text(result: PathResult) -> str:
    """A path's answer in one or more lines (one per choice)."""
    if result.status != "answered":
        return f"{result.status}: {result.message}"
    usage = f"usage {result.prompt_tokens}/{result.completion_tokens}"
    if len(result.choices) == 1:
        return f"{choice_text(result.choices[0])}; {usage}"
    lines = [f"{len(result.choices)} choices; {usage}"]
    lines += [f"      {i + 1}: {choice_text(c)}" for i, c in enumerate(result.choices)]
    return "\n".join(lines)


def describe(record: StructuredParityPrompt) -> str:
    """The item's report: the request, each path's answer, each comparison's verdict."""
    facts = record.request
    lines = [
        f"prompt {record.prompt_id} on {record.target}: {safe_text(facts.prompt)}",
        f"  tools [{', '.join(facts.tools)}], tool_choice {facts.tool_choice}, "
        f"response_format {'yes' if facts.response_format else 'no'}, {facts.turns} turns"
        + (
            f" (turns {facts.filled} filled by {record.reference_target} chat)"
            if facts.filled
            else ""
        ),
    ]
    width = max(len(r.path) for r in record.results) if record.results else 4
    for result in record.results:
        lines.append(f"  {result.path:<{width}}: {safe_text(result_text(result), limit=2000)}")
        lines += [f"    note: {safe_text(n)}" for n in result.notes]
    if record.reference_chat is not None:
        lines.append(
            f"  {record.reference_target} chat: "
            f"{safe_text(result_text(record.reference_chat), limit=2000)}"
        )
    for c in record.comparisons:
        if not c.compared:
            verdict = f"not compared ({c.why_not})"
        elif c.differences:
            verdict = "differs: " + ", ".join(dict.fromkeys(d.field for d in c.differences))
        else:
            verdict = "identical"
        lines.append(f"  {c.side} vs {c.reference}: {safe_text(verdict)}")
        lines += [f"    {safe_text(n)}" for n in c.notes]
    return "\n".join(lines)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per structured-parity check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        try:
            record = load_record(StructuredParityAggregate, data)
        except ValueError:
            return ["?"] * 5
        fields = ", ".join(f"{f} {n}" for f, n in record.differences.items()) or "-"
        return [
            f"{record.passed}/{record.items}",
            fields,
            str(sum(record.invalid.values())),
            str(len(record.unsupported)),
            str(record.n_errors + record.failed_answers),
        ]

    columns = (
        ("passed", ">"),
        ("differences", "<"),
        ("invalid", ">"),
        ("unsupported", ">"),
        ("errors", ">"),
    )
    return check_table(aggregates, columns, cells)


def _cell(text: str | None, limit: int = 400) -> str:
    return "-" if not text else f"<code>{esc(clip(text, limit))}</code>"


def _result_rows(result: PathResult, title: str) -> list[list[str]]:
    if result.status != "answered":
        return [[esc(title), esc(result.status), "-", "-", _cell(result.message), "-", "-", "-"]]
    rows = []
    for i, choice in enumerate(result.choices):
        name = title if len(result.choices) == 1 else f"{title} choice {i + 1}"
        calls = "<br>".join(f"<code>{esc(c.shown())}</code> ({esc(c.place)})" for c in choice.calls)
        rows.append(
            [
                esc(name),
                esc(result.status),
                esc(choice.finish_reason if choice.finish_reason is not None else "-"),
                calls or "-",
                _cell(choice.content),
                _cell(choice.reasoning),
                esc(f"{result.prompt_tokens} / {result.completion_tokens}"),
                esc("; ".join(result.notes)) or "-",
            ]
        )
    return rows or [[esc(title), "no choices", "-", "-", "-", "-", "-", "-"]]


def structured_prompt(data: Mapping[str, Any]) -> str:
    """The request, each path's answer (calls, content, reasoning, usage), each comparison's
    differences and every validity fault; everything escaped (model output is untrusted)."""
    record = load_record(StructuredParityPrompt, data)
    parts = [
        kv_table(
            {
                "prompt_id": record.prompt_id,
                "target": record.target,
                "reference target": record.reference_target,
                **plain_data(record.request),
                **({"prompt ids": record.prompt_ids} if record.prompt_ids else {}),
            }
        )
    ]
    rows = [row for r in record.results for row in _result_rows(r, r.path)]
    if record.reference_chat is not None:
        rows += _result_rows(record.reference_chat, f"{record.reference_target} chat")
    headers = ["path", "status", "finish_reason", "calls", "content", "reasoning", "usage", "notes"]
    parts.append(table(headers, rows))
    rows = []
    for c in record.comparisons:
        if not c.compared:
            rows.append([esc(c.side), esc(c.reference), "not compared", esc(c.why_not)])
            continue
        if not c.differences:
            rows.append(
                [esc(c.side), esc(c.reference), "identical", esc("; ".join(c.notes)) or "-"]
            )
        for d in c.differences:
            rows.append([esc(d.side), esc(d.reference), f"<b>{esc(d.field)}</b>", esc(d.text)])
    parts.append("<h4>comparisons</h4>" + table(["side", "reference", "field", "detail"], rows))
    faults = [i for r in record.results for i in r.invalid]
    if faults:
        parts.append(
            "<h4>validity faults</h4>"
            + table(["kind", "fault"], [[esc(i.kind), esc(i.text)] for i in faults])
        )
    return "".join(parts)


def structured_aggregate(data: Mapping[str, Any]) -> str:
    """The counts by field, fault kind, path and target; refusals, errors and engines."""
    try:
        record = load_record(StructuredParityAggregate, data)
    except ValueError:
        return kv_table(data)
    parts = [
        kv_table(
            {
                "targets": ", ".join(record.targets),
                "items": record.items,
                "passed": record.passed,
                "errored items": record.n_errors,
                "failed answers": record.failed_answers,
                "allowed differences": record.allowed,
            }
        )
    ]
    if record.differences:
        rows = [[esc(f), esc(n)] for f, n in record.differences.items()]
        parts.append("<h4>differences by field</h4>" + table(["field", "differences"], rows))
    if record.invalid:
        rows = [[esc(k), esc(n)] for k, n in record.invalid.items()]
        parts.append("<h4>validity faults</h4>" + table(["kind", "faults"], rows))
    keys = ("answered", "unsupported", "failed", "compared", "differing")
    rows = [[esc(p), *(esc(getattr(c, k)) for k in keys)] for p, c in record.paths.items()]
    parts.append("<h4>paths</h4>" + table(["path", *keys], rows))
    tkeys = ("items", "passed", "differences", "invalid", "unsupported", "errors")
    rows = [[esc(t), *(esc(getattr(c, k)) for k in tkeys)] for t, c in record.per_target.items()]
    parts.append("<h4>targets</h4>" + table(["target", *tkeys], rows))
    if record.unsupported:
        parts.append("<h4>unsupported</h4>" + kv_table(record.unsupported))
    if record.errors:
        parts.append("<h4>errors</h4>" + kv_table(record.errors))
    return "".join(parts) + engines(record.engines)


def target_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per target in the HTML summary (its counts); the data itself for data that
    is not an aggregate record."""
    try:
        record = load_record(StructuredParityAggregate, data)
    except ValueError:
        return [(str(data.get("target", "?")), data)]
    return [(label, plain_data(counts)) for label, counts in record.per_target.items()] or [
        (record.target, data)
    ]


MEASURES: tuple[MeasureSpec, ...] = (
    ("items passing", ("passed", "items"), rate),
    ("differences (failing)", ("differences",), num),
    ("validity faults", ("invalid",), num),
    ("unsupported answers", ("unsupported",), num),
    ("errors", ("errors",), num),
)


def check_label(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """One target: :func:`~.protocol.target_label`; several: the first target's model
    (``structured-parity(tiny)``)."""
    if len(cast(StructuredParitySpec, check.spec).targets) == 1:
        return target_label(loaded, check, index)
    side = check.baseline_side(index)
    return loaded.target(side.ref, side.loc).model


STRUCTURED_PARITY = LegacyKind(
    name="structured-parity",
    spec=StructuredParitySpec,
    run=StructuredParityRun,
    label=check_label,
    thresholds=StructuredParityThresholds,
    context=StructuredParityContext,
    summarize=summarize,
    family="structured-parity",
    summary_lines=summary_lines,
    records={"prompt": StructuredParityPrompt, "aggregate": StructuredParityAggregate},
    views={"prompt": structured_prompt, "aggregate": structured_aggregate},
    measures=MEASURES,
    other_measures=False,
    columns=target_columns,
    headline="items passing",
)
