"""stream-parity and endpoint-parity: one server, the same request two ways, same answer.

**stream-parity**: each prompt generated with the backend's own request, once as usual and
once streamed (SSE; Ollama: NDJSON), assembled from its chunks. The two must be identical:
token ids where the server returns them (llama-server), else text; where both carry logprobs
and the tokens are identical, ``max |logprob_a - logprob_b|`` over the positions must stay
within ``logprob_tolerance`` (failing closed:
:func:`~pytest_infercheck.metrics.determinism.logprob_diff`; a NaN drift never passes). A
dropped, duplicated or reordered chunk fails the item.

**endpoint-parity**: each prompt's messages through each of ``endpoints``; the first is the
reference, every other one is an item ``<prompt>[<endpoint>]``. ``completions`` gets the text
of the chat template rendered once (llama-server: its ``/apply-template``; OpenAI-compatible
servers: the served model folder's own template, in-process), ``chat``
(``/v1/chat/completions``) and ``messages`` (Anthropic-style ``/v1/messages``) get the
messages and apply the same template on the server, so the three receive the same input.
Compared on text: similarity (difflib ratio) at least ``min_similarity`` (default 1.0: the
same text) and answers by the prompt's answer kind (``flips.fail_item_on``). Differences that
remain by design of the endpoints, and can show up as real divergences: the servers strip
special tokens from chat output but may keep them in completions text; BOS handling (a
completions prompt is tokenized with the server's add-BOS rule, while a template may spell
out the BOS; llama-server strips a leading BOS from its template output and adds it back);
a reasoning block returned apart by the chat endpoints; Anthropic ``max_tokens`` is
mandatory and ``stop_reason`` is mapped to ``stop``/``length``; no token ids or logprobs are
compared (the chat endpoints of these servers return none comparable).

Both: each side's own faults (:mod:`~pytest_infercheck.metrics.consistency`) are violations
of the item whatever the thresholds, named after the side: ``non-finite logprob in the
streamed output at positions 2, 5 (NaN)`` (a ``-inf`` logprob is fine; a position the server
did not report is not compared), ``logprob does not match its token in ...``, ``empty
generation: the streamed output generated no tokens while the non-streamed output generated
3``, ``non-finite similarity of chat vs completions (NaN)``, and ``non-finite logprob drift
of streamed vs non-streamed (+inf)`` (a ``-inf`` logprob on one side where the other has a
finite one, which no other fault names). The aggregate (:func:`summarize_stream`,
:func:`summarize_endpoints`: pure functions of the items' records and the thresholds, which
the live run and ``pytest-infercheck report`` over shards call alike) judges each item's
record again, counts the items, fails when any item failed or errored, and names the items
with faults. A record keeps no non-finite number (its JSON has ``null`` there), so every
non-finite value an item is judged on is also one of its faults.

Both label a token-level divergence (two outputs with token ids that part at a token)
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``
(:mod:`~pytest_infercheck.metrics.ties`: the reference and other side's margins from their
own top-k), counted per item and in the aggregate; with ``fail_on: decisive`` an item that
differs only at a near-tie does not fail for differing (its other gates still apply). A
text-only divergence (no token ids: the chat endpoints) has no label.

Both need a server backend; an in-process (mlx-lm) target fails its items with that message.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from pydantic import Field, field_validator

from ..backends import Generation, PromptInput
from ..metrics.answers import FlipKind, fails_item, judge_answers
from ..metrics.consistency import (
    NON_FINITE_LOGPROB,
    Fault,
    aggregate_faults,
    empty_fault,
    output_text,
    read_generation,
    reported_logprobs,
    similarity_fault,
)
from ..metrics.degenerate import DegenerateScan
from ..metrics.determinism import logprob_diff, side_tokens
from ..metrics.finite import check_scalar
from ..metrics.sameness import DivergenceUnit, same_generation
from ..metrics.text import similarity
from ..metrics.ties import (
    DEFAULT_TIE_MARGIN,
    TieDivergence,
    count_labels,
    describe_tie,
    tie_divergence,
)
from ..records import OMIT_WHEN_EMPTY, load_record
from ..render.markup import esc, kv_table, table
from ..render.table import check_table
from ..render.text import mark_divergence, safe_text
from ..render.views import flip_cell, side_by_side
from ..specs import (
    FlipGates,
    FlipThresholds,
    KindSpec,
    LogprobTolerance,
    SimilarityGate,
    TargetCheck,
    TieGates,
)
from .protocol import (
    Aggregates,
    ItemPlan,
    Outcome,
    RecordedItem,
    Summary,
    TargetContext,
    TargetRun,
    target_kind,
)

if TYPE_CHECKING:
    from ..config import CheckSpec
    from ..suites import Prompt, Suite


Endpoint = Literal["completions", "chat", "messages"]
StreamMode = Literal["non-streamed", "streamed"]
R = TypeVar("R")
S = TypeVar("S", bound=KindSpec)
TT = TypeVar("TT", bound=TieGates)

NON_FINITE_DRIFT = "non-finite logprob drift"
"""The fault of a logprob drift that is not finite while no other fault of the item says why
(a ``-inf`` logprob on one side beside a finite one on the other)."""


class StreamParitySpec(TargetCheck):
    """The same request streamed (SSE) and not streamed."""


class EndpointParitySpec(TargetCheck):
    """The same templated prompt through each endpoint; the first is the reference."""

    endpoints: list[Endpoint] = Field(
        default_factory=lambda: list[Endpoint](["completions", "chat"]), min_length=2
    )


class StreamParityThresholds(LogprobTolerance, TieGates):
    """``logprob_tolerance`` (:class:`~pytest_infercheck.specs.LogprobTolerance`);
    ``tie_margin`` labels an item's divergence, ``fail_on: decisive`` passes an item that
    differs only at a near-tie (:class:`~pytest_infercheck.specs.TieGates`)."""


class EndpointParityThresholds(SimilarityGate, FlipGates, TieGates):
    """Per item: ``min_similarity`` (None: 1.0, the same text) and ``flips.fail_item_on``;
    ``tie_margin`` and ``fail_on`` (:class:`~pytest_infercheck.specs.TieGates`: with
    ``fail_on: decisive`` a similarity below ``min_similarity`` passes when the outputs part
    at a near-tie token).
    The aggregate has no flip-rate gate, so ``flips.max_rate`` (and its ``confidence`` and
    ``gate``) are refused rather than ignored."""

    @field_validator("flips")
    @classmethod
    def _item_flips_only(cls, value: FlipThresholds) -> FlipThresholds:
        default = FlipThresholds()
        unused = [
            f"flips.{key}"
            for key in ("max_rate", "confidence", "gate")
            if getattr(value, key) != getattr(default, key)
        ]
        if unused:
            raise ValueError(
                f"endpoint-parity does not use {', '.join(unused)}: it judges each item's "
                "answer flip (flips.fail_item_on) and has no flip-rate gate"
            )
        return value


# -- records: what an item's ``data`` holds, field by field -------------------------------------


@dataclass(frozen=True)
class ParitySide:
    """One side of a parity item: what one mode (stream-parity) or one endpoint
    (endpoint-parity) generated. Its label is the key ``mode`` (:class:`StreamSide`) or
    ``endpoint`` (:class:`EndpointSide`)."""

    text: str
    """The generated text."""
    token_ids: list[int] | None
    """Its token ids where the server returns them (llama-server), else None."""
    finish_reason: str
    """Why generation stopped (``stop``, ``length``, ...)."""

    @property
    def label(self) -> str:
        """The mode or endpoint this side was generated through."""
        raise NotImplementedError


@dataclass(frozen=True)
class StreamSide(ParitySide):
    """A side of a stream-parity item."""

    mode: StreamMode
    """``non-streamed`` (the reference) or ``streamed`` (assembled from its chunks)."""

    @property
    def label(self) -> str:
        return self.mode


@dataclass(frozen=True)
class EndpointSide(ParitySide):
    """A side of an endpoint-parity item."""

    endpoint: Endpoint
    """The endpoint the prompt's messages went through."""
    prompt_text: str | None = None
    """The templated text sent (``completions`` only; the chat endpoints template on the
    server)."""

    @property
    def label(self) -> str:
        return self.endpoint


@dataclass(frozen=True)
class ParityPrompt:
    """The record of a parity item (role ``prompt``): one prompt generated two ways (a mode
    or endpoint against the reference one) and compared."""

    prompt_id: str
    target: str
    """The target's label (``adder@llama``)."""
    reference: StreamSide | EndpointSide
    """The reference side: non-streamed, or the first of the check's ``endpoints``."""
    other: StreamSide | EndpointSide
    """The side compared with it: streamed, or the item's endpoint."""
    match: bool
    """Whether the two outputs are the same (token ids where both have them, and text)."""
    first_divergence: int | None
    """Where they first differ (None: nowhere), in :attr:`divergence_unit`."""
    divergence_unit: DivergenceUnit | None
    """``token`` (over token ids) or ``char`` (over text); None when they match."""
    similarity: float | None
    """difflib ratio of the two texts, 1.0 for the same text; None in a record read back when
    it was not finite (a fault of the item says so)."""
    answers: list[str | None]
    """The extracted answers ``[reference, other]`` (None: none found, or no answer kind)."""
    flip: str | None
    """How the answers relate (a :class:`~..metrics.answers.FlipKind` value); None when the
    prompt has no answer kind."""
    logprob_drift: float | None
    """max |logprob difference| of the chosen tokens when the outputs match and both sides
    have logprobs, else None (also in a record read back when it was not finite: a fault of
    the item says so)."""
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of either side's own output, an empty generation against the other side, a
    non-finite similarity or logprob drift (each a violation); absent from the JSON when
    none."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first divergent token, labelled (:mod:`~pytest_infercheck.metrics.ties`: margins
    of the reference side, then the other); absent when the outputs do not diverge at a
    token (a match, a text-only difference)."""


@dataclass(frozen=True)
class ParityAggregate:
    """The record of a parity check x suite's aggregate (role ``aggregate``)."""

    target: str
    items: int
    """Items aggregated (selected ones under ``-k`` or ``--infercheck-shard``)."""
    n_match: int
    """Items whose two outputs are the same."""
    n_mismatch: int
    """Items that ran and whose outputs differ."""
    n_failed: int
    """Items that broke a threshold or errored."""
    n_flips: int
    """Items whose answers flipped (:attr:`~..metrics.answers.FlipKind.is_flip`:
    ``wrong_to_wrong`` and ``unchanged`` are not flips)."""
    n_errors: int
    """Items that could not run (a backend error)."""
    errors: dict[str, str]
    """By item name: its error message."""
    failed: list[str]
    """The names of the failed items, sorted."""
    engines: dict[str, dict[str, Any]]
    """By target label: the engine's identity (build, model path, ...)."""
    divergence_labels: dict[str, int] = field(
        default_factory=dict, metadata=OMIT_WHEN_EMPTY, kw_only=True
    )
    """The items' divergence labels counted (:attr:`ParityPrompt.tie`; absent in records
    made before labels)."""


@dataclass(frozen=True)
class EndpointCounts:
    """One endpoint's items in an endpoint-parity aggregate."""

    items: int
    match: int
    """Items whose output is the same as the reference endpoint's."""
    failed: int
    """Items that broke a threshold or errored."""


@dataclass(frozen=True)
class EndpointParityAggregate(ParityAggregate):
    """The record of an endpoint-parity aggregate: :class:`ParityAggregate` and the counts
    per endpoint."""

    reference: Endpoint
    """The reference endpoint (the first of ``endpoints``)."""
    endpoints: dict[str, EndpointCounts]
    """By other endpoint: its counts."""


A = TypeVar("A", bound=ParityAggregate)


# -- running ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SideComparison:
    """Two generations of one prompt compared (see :func:`compare_generations`)."""

    match: bool
    first_divergence: int | None
    divergence_unit: DivergenceUnit | None
    similarity: float
    answers: list[str | None]
    flip: str | None
    logprob_drift: float | None
    faults: list[Fault] = field(default_factory=list)
    tie: TieDivergence | None = None
    degenerate: DegenerateScan = field(default_factory=DegenerateScan)
    """Both sides' degenerate findings (:mod:`~pytest_infercheck.metrics.degenerate`)."""


def compare_generations(
    prompt: Prompt,
    ref: Generation,
    other: Generation,
    labels: tuple[str, str] = ("reference", "other"),
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> SideComparison:
    """``match``, ``first_divergence`` and ``divergence_unit``: the sameness verdict
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`). ``logprob_drift``: max
    |difference| of the chosen tokens' logprobs when the outputs match and both have them
    (:func:`~pytest_infercheck.metrics.determinism.logprob_diff`: NaN when a compared logprob
    is NaN; positions a side did not report are left out). ``flip``:
    :func:`~pytest_infercheck.metrics.answers.judge_answers` when the prompt has an answer
    kind. ``faults``: each side's own (named ``the <label> output``), an empty generation on
    one side only, a non-finite similarity, a non-finite drift that no other fault explains
    (:data:`NON_FINITE_DRIFT`). ``tie``: the first divergent token labelled at
    ``tie_margin`` (:func:`~pytest_infercheck.metrics.ties.tie_divergence`) when the outputs
    part at a token."""
    verdict = same_generation(ref, other)
    match = verdict.same
    drift = None
    if match and ref.chosen_logprobs and other.chosen_logprobs:
        drift = logprob_diff(
            reported_logprobs(ref.chosen_logprobs, ref.top_logprobs),
            reported_logprobs(other.chosen_logprobs, other.top_logprobs),
            None,
        )
    names = (f"the {labels[0]} output", f"the {labels[1]} output")
    readings = [read_generation(names[0], ref), read_generation(names[1], other)]
    faults = [f for reading in readings for f in reading.faults]
    empty = empty_fault(
        (output_text(other.text, other.tool_calls), other.token_ids, other.finish_reason),
        (output_text(ref.text, ref.tool_calls), ref.token_ids, ref.finish_reason),
        a_name=names[1],
        b_name=names[0],
    )
    if empty is not None:
        faults.append(empty)
    ratio = similarity(ref.text, other.text)
    odd = similarity_fault(f"{labels[1]} vs {labels[0]}", ratio)
    if odd is not None:
        faults.append(odd)
    if drift is not None and not any(f.fault == NON_FINITE_LOGPROB for f in faults):
        bad = check_scalar(f"logprob drift of {labels[1]} vs {labels[0]}", drift)
        if bad is not None:
            faults.append(Fault(NON_FINITE_DRIFT, f"{labels[1]} vs {labels[0]}", bad.describe()))
    answers: list[str | None] = [None, None]
    flip = None
    if prompt.answer_kind is not None:
        judged = judge_answers(
            prompt.answer_kind,
            prompt.answer,
            ref.text,
            other.text,
            base_calls=ref.tool_calls,
            test_calls=other.tool_calls,
        )
        answers = [a.raw if a else None for a in (judged.base, judged.test)]
        flip = judged.flip.value
    return SideComparison(
        match=match,
        first_divergence=verdict.first_divergence,
        divergence_unit=verdict.divergence_unit,
        similarity=ratio,
        answers=answers,
        flip=flip,
        logprob_drift=drift,
        faults=faults,
        tie=None
        if verdict.divergence_unit != "token" or verdict.first_divergence is None
        else tie_divergence(
            side_tokens(ref), side_tokens(other), verdict.first_divergence, tie_margin
        ),
        degenerate=DegenerateScan.of([reading.degenerate for reading in readings]),
    )


def stream_side(mode: StreamMode, generation: Generation) -> StreamSide:
    """``generation`` as a side of a stream-parity item."""
    return StreamSide(generation.text, generation.token_ids, generation.finish_reason, mode)


def endpoint_side(endpoint: Endpoint, generation: Generation) -> EndpointSide:
    """``generation`` as a side of an endpoint-parity item (with the templated text sent to
    ``completions``)."""
    return EndpointSide(
        generation.text,
        generation.token_ids,
        generation.finish_reason,
        endpoint,
        generation.prompt_text,
    )


@dataclass(frozen=True)
class ParityItem:
    """An item's record and its outcome (what the aggregate counts): its violations, judged
    from the record (:func:`stream_violations`, :func:`endpoint_violations`)."""

    record: ParityPrompt
    outcome: Outcome


def count_items(
    target: str, engines: dict[str, dict[str, Any]], items: Mapping[str, ParityItem | str]
) -> ParityAggregate:
    """The aggregate of ``items`` by name (a string is an item's error)."""
    failed = sorted(k for k, i in items.items() if isinstance(i, str) or i.outcome.violations)
    errors = {k: i for k, i in items.items() if isinstance(i, str)}
    done = [i.record for i in items.values() if isinstance(i, ParityItem)]
    n_match = sum(1 for r in done if r.match)
    n_flips = sum(1 for r in done if r.flip is not None and FlipKind(r.flip).is_flip)
    return ParityAggregate(
        target=target,
        items=len(items),
        n_match=n_match,
        n_mismatch=len(done) - n_match,
        n_failed=len(failed),
        n_flips=n_flips,
        n_errors=len(errors),
        errors=errors,
        failed=failed,
        engines=engines,
        divergence_labels=count_labels([r.tie.divergence_label for r in done if r.tie is not None]),
    )


def endpoint_counts(items: Mapping[str, ParityItem | str]) -> dict[str, EndpointCounts]:
    """Per endpoint (the ``[param]`` of each item name): its items, matches and failures."""
    rows: dict[str, list[ParityItem | str]] = {}
    for name, item in items.items():
        rows.setdefault(name.rpartition("[")[2].rstrip("]"), []).append(item)
    return {
        endpoint: EndpointCounts(
            items=len(row),
            match=sum(1 for i in row if isinstance(i, ParityItem) and i.record.match),
            failed=sum(1 for i in row if isinstance(i, str) or i.outcome.violations),
        )
        for endpoint, row in rows.items()
    }


def item_faults(items: Mapping[str, ParityItem | str]) -> list[str]:
    """The aggregate's lines naming the items with faults (``non-finite logprob in 2 of 20
    items: ...``)."""
    faulty = [
        (name, item.record.faults)
        for name, item in items.items()
        if isinstance(item, ParityItem) and item.record.faults
    ]
    return aggregate_faults(faulty, n_items=len(items), item_unit="items")


def aggregate_summary(record: ParityAggregate, faults: Sequence[str] = ()) -> Summary:
    """The aggregate: failing when any item failed or errored, with a line per kind of fault
    (``faults``, :func:`item_faults`)."""
    violations = list(faults)  # failed items: the framework's rule (checks/framework/items.py)
    text = (
        f"{record.target}: {record.n_match}/{record.items} identical, {record.n_flips} answer "
        f"flips, {record.n_errors} errors; divergences {record.divergence_labels}"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_items", record.items),
        ("infercheck_match", record.n_match),
        ("infercheck_failed", record.n_failed),
        ("infercheck_flips", record.n_flips),
        ("infercheck_errors", record.n_errors),
        *(
            (f"infercheck_divergences_{label.replace('-', '_')}", n)
            for label, n in record.divergence_labels.items()
        ),
    ]
    return Summary(record, violations, text, properties)


def judged_items(
    items: Sequence[RecordedItem], judge: Callable[[ParityPrompt], list[str]]
) -> dict[str, ParityItem | str]:
    """The items by name, sorted (the same order for a live run and for merged shards): each
    record with the violations ``judge`` finds in it, or the item's error message."""
    out: dict[str, ParityItem | str] = {}
    for item in sorted(items, key=lambda i: i.name):
        if item.record is None:
            out[item.name] = item.error or "error"
        else:
            out[item.name] = ParityItem(item.record, Outcome(judge(item.record)))
    return out


def _labels(record: ParityPrompt) -> tuple[str, str]:
    return record.reference.label, record.other.label


def near_tie_passes(record: ParityPrompt, thresholds: TieGates) -> bool:
    """Whether ``fail_on: decisive`` lets the item's difference pass: its outputs part at a
    ``near-tie`` token."""
    return (
        thresholds.fail_on == "decisive"
        and record.tie is not None
        and record.tie.divergence_label == "near-tie"
    )


def stream_violations(record: ParityPrompt, thresholds: StreamParityThresholds) -> list[str]:
    """Why a stream-parity item fails: its faults, outputs that differ (not under ``fail_on:
    decisive`` when they part at a ``near-tie``), a logprob drift beyond
    ``logprob_tolerance`` (or not finite)."""
    labels = _labels(record)
    out = [f.text for f in record.faults]
    if not record.match and not near_tie_passes(record, thresholds):
        out.append(
            f"the {labels[1]} output differs from the {labels[0]} one (first divergence "
            f"at {record.divergence_unit} {record.first_divergence})"
        )
    tolerance = thresholds.logprob_tolerance
    drift = record.logprob_drift
    if drift is not None and not drift <= tolerance:
        out.append(
            f"logprob drift {drift:.3g} with identical tokens "
            f"{'> ' if math.isfinite(drift) else 'is not finite: fails '}"
            f"logprob_tolerance {tolerance}"
        )
    return out


def endpoint_violations(record: ParityPrompt, thresholds: EndpointParityThresholds) -> list[str]:
    """Why an endpoint-parity item fails: its faults, a similarity below ``min_similarity``
    (1.0 when unset; a similarity that is not finite never passes; not under ``fail_on:
    decisive`` when the outputs part at a ``near-tie`` token), an answer flip that
    ``flips.fail_item_on`` fails."""
    labels = _labels(record)
    out = [f.text for f in record.faults]
    minimum = 1.0 if thresholds.min_similarity is None else thresholds.min_similarity
    ratio = record.similarity
    if (ratio is None or not ratio >= minimum) and not (
        ratio is not None and near_tie_passes(record, thresholds)
    ):
        shown = "not finite" if ratio is None else f"{ratio:.4f}"
        out.append(
            f"{labels[1]} vs {labels[0]}: similarity {shown} < "
            f"min_similarity {minimum} (first divergence at {record.divergence_unit} "
            f"{record.first_divergence})"
        )
    fail_on = thresholds.flips.fail_item_on
    if fails_item(record.flip, fail_on):
        out.append(f"answer flip {record.flip} (fail_item_on: {fail_on})")
    return out


@dataclass
class _ParityRun(TargetRun[S, TT]):
    """What the two parity kinds share: items are pairs of generations of one prompt, each
    judged from its record (:meth:`judge`)."""

    def _item(
        self,
        prompt: Prompt,
        generations: tuple[Generation, Generation],
        sides: tuple[StreamSide, StreamSide] | tuple[EndpointSide, EndpointSide],
    ) -> Outcome:
        """The item comparing ``generations`` (reference, other), recorded as ``sides``."""
        ref, other = generations
        labels = (sides[0].label, sides[1].label)
        result = compare_generations(prompt, ref, other, labels, self.thresholds.tie_margin)
        record = ParityPrompt(
            prompt_id=prompt.id,
            target=self.target.label,
            reference=sides[0],
            other=sides[1],
            match=result.match,
            first_divergence=result.first_divergence,
            divergence_unit=result.divergence_unit,
            similarity=result.similarity,
            answers=result.answers,
            flip=result.flip,
            logprob_drift=result.logprob_drift,
            faults=result.faults,
            tie=result.tie,
        )
        width = max(len(label) for label in labels)
        text = "\n".join(
            [
                f"prompt {prompt.id}: {safe_text(prompt.text)}",
                f"  {labels[0]:<{width}}: {mark_divergence(ref.text, other.text)}",
                f"  {labels[1]:<{width}}: {mark_divergence(other.text, ref.text)}",
                f"  first divergence: {result.first_divergence} ({result.divergence_unit}), "
                f"similarity {result.similarity:.4f}, answers {result.answers}",
                *([] if result.tie is None else [f"  {describe_tie(result.tie, labels)}"]),
            ]
        )
        properties: list[tuple[str, Any]] = [
            ("infercheck_match", result.match),
            ("infercheck_similarity", result.similarity),
            ("infercheck_first_divergence", str(result.first_divergence)),
            ("infercheck_flip", str(result.flip)),
        ]
        return Outcome(self.judge(record), text, record, properties, degenerate=result.degenerate)

    def judge(self, record: ParityPrompt) -> list[str]:
        """The item's violations, from its record and the check's thresholds."""
        raise NotImplementedError

    def prepare(self, plans: list[ItemPlan]) -> None:
        """An in-process target fails the aggregate too, with the items' message."""
        self.served_target()


@dataclass
class StreamParityRun(_ParityRun[StreamParitySpec, StreamParityThresholds]):
    """Streamed vs not streamed, one item per prompt (see the module docstring)."""

    def run_item(self, plan: ItemPlan) -> Outcome:
        target = self.served_target()
        prompt = self.prompt(plan.key)
        rendered, params = self.render(prompt), self.params(prompt)
        ref = self.cache.generate(target, rendered, params)
        streamed = self.cache.call(target, target.backend.generate_stream(rendered, params))
        sides = (stream_side("non-streamed", ref), stream_side("streamed", streamed))
        return self._item(prompt, (ref, streamed), sides)

    def judge(self, record: ParityPrompt) -> list[str]:
        return stream_violations(record, self.thresholds)


@dataclass
class EndpointParityContext:
    """What an endpoint-parity aggregate takes besides its items' records (fields of
    :class:`EndpointParityAggregate`)."""

    target: str
    reference: Endpoint
    """The reference endpoint (the first of ``endpoints``)."""
    engines: dict[str, dict[str, Any]]


@dataclass
class EndpointParityRun(_ParityRun[EndpointParitySpec, EndpointParityThresholds]):
    """Endpoints against the first one, one item per prompt and other endpoint."""

    _generations: dict[tuple[str, str], Generation] = field(
        default_factory=dict, init=False, repr=False
    )
    """By (prompt id, endpoint): the prompt through the endpoint (the reference endpoint's
    generation serves every item of the prompt)."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        endpoints = cast(EndpointParitySpec, check.spec).endpoints
        return [
            ItemPlan(p.id, "prompt", p.id, param=endpoint)
            for p in suite.prompts
            for endpoint in endpoints[1:]
        ]

    @property
    def endpoints(self) -> list[Endpoint]:
        return list(self.spec.endpoints)

    def _generate(self, prompt: Prompt, endpoint: Endpoint) -> Generation:
        """``prompt`` through ``endpoint`` (memoised: the reference serves every item)."""
        key = (prompt.id, endpoint)
        if key not in self._generations:
            target = self.served_target()
            messages = PromptInput(
                prompt.text,
                None,
                templated=True,
                system=prompt.system,
                thinking=self.settings.thinking,
            )
            self._generations[key] = self.cache.call(
                target, target.backend.generate_via(endpoint, messages, self.params(prompt))
            )
        return self._generations[key]

    def run_item(self, plan: ItemPlan) -> Outcome:
        endpoint = next(e for e in self.endpoints if e == plan.param)
        prompt = self.prompt(plan.key)
        reference = self.endpoints[0]
        ref, other = self._generate(prompt, reference), self._generate(prompt, endpoint)
        sides = (endpoint_side(reference, ref), endpoint_side(endpoint, other))
        return self._item(prompt, (ref, other), sides)

    def judge(self, record: ParityPrompt) -> list[str]:
        return endpoint_violations(record, self.thresholds)

    def context(self) -> EndpointParityContext:
        target = self.target
        return EndpointParityContext(
            target.label, self.endpoints[0], {target.label: target.backend.identity()}
        )


def summarize_stream(
    items: Sequence[RecordedItem], thresholds: StreamParityThresholds, context: TargetContext
) -> Summary:
    """The stream-parity aggregate of the items' records (see the module docstring)."""
    judged = judged_items(items, lambda record: stream_violations(record, thresholds))
    counted = count_items(context.target, context.engines, judged)
    return aggregate_summary(counted, item_faults(judged))


def summarize_endpoints(
    items: Sequence[RecordedItem],
    thresholds: EndpointParityThresholds,
    context: EndpointParityContext,
) -> Summary:
    """The endpoint-parity aggregate of the items' records, with the counts per endpoint."""
    judged = judged_items(items, lambda record: endpoint_violations(record, thresholds))
    record = EndpointParityAggregate(
        **vars(count_items(context.target, context.engines, judged)),
        reference=context.reference,
        endpoints=endpoint_counts(judged),
    )
    return aggregate_summary(record, item_faults(judged))


# -- presentation -------------------------------------------------------------------------------


def _loaded(record_type: type[R], data: Mapping[str, Any]) -> R | None:
    """``data`` read as ``record_type``, or None when it is not one (an older results file)."""
    try:
        return load_record(record_type, data)
    except ValueError:
        return None


def _summary(aggregates: Aggregates, record_type: type[A], detail: Callable[[A], str]) -> list[str]:
    """The terminal table of parity aggregates of ``record_type`` (``?`` for a record that
    is not one); ``detail`` says what was compared."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = _loaded(record_type, data)
        if record is None:
            return ["?"] * 4
        counts = (f"{record.n_match}/{record.items}", str(record.n_flips))
        return [detail(record), *counts, str(record.n_errors)]

    columns = (("compared", "<"), ("identical", ">"), ("flips", ">"), ("errors", ">"))
    return check_table(aggregates, columns, cells)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per stream-parity check x suite for the terminal summary."""
    return _summary(aggregates, ParityAggregate, lambda record: "streamed vs not")


def endpoint_summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per endpoint-parity check x suite for the terminal summary."""

    def detail(record: EndpointParityAggregate) -> str:
        return ", ".join(f"{e} {c.match}/{c.items}" for e, c in record.endpoints.items())

    return _summary(aggregates, EndpointParityAggregate, detail)


def parity_prompt(data: Mapping[str, Any]) -> str:
    """The two modes or endpoints side by side, their answers and whether they flipped."""
    record = load_record(ParityPrompt, data)
    ref, other = record.reference, record.other
    facts = {
        "prompt_id": record.prompt_id,
        "target": record.target,
        "match": record.match,
        "first_divergence": record.first_divergence,
        "divergence_unit": record.divergence_unit,
        "similarity": record.similarity,
        "flip": record.flip,
        "logprob_drift": record.logprob_drift,
    }
    parts = [
        kv_table(facts),
        side_by_side(ref.label, ref.text, other.label, other.text, record.first_divergence),
    ]
    if record.tie is not None:
        parts.append(f"<p>{esc(describe_tie(record.tie, (ref.label, other.label)))}</p>")
    if record.answers:
        cells = [esc(a) for a in record.answers[:2]] + [flip_cell(record.flip)]
        parts.append(table(["reference answer", "other answer", "flip"], [cells]))
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    return "".join(parts)


STREAM_PARITY = target_kind(
    "stream-parity",
    StreamParitySpec,
    StreamParityRun,
    thresholds=StreamParityThresholds,
    context=TargetContext,
    summarize=summarize_stream,
    summary_lines=summary_lines,
    records={"prompt": ParityPrompt, "aggregate": ParityAggregate},
    views={"prompt": parity_prompt},
)
ENDPOINT_PARITY = dataclasses.replace(
    STREAM_PARITY,
    name="endpoint-parity",
    spec=EndpointParitySpec,
    run=EndpointParityRun,
    thresholds=EndpointParityThresholds,
    context=EndpointParityContext,
    summarize=summarize_endpoints,
    family="endpoint-parity",
    summary_lines=endpoint_summary_lines,
    records={"prompt": ParityPrompt, "aggregate": EndpointParityAggregate},
)
