"""stress: the suite at increasing concurrency, every output compared with its reference.

Items: one per level (``c1``, ``c2``, ... role ``level``) plus ``aggregate``.

Reference: each prompt generated alone, one request at a time, through the backend's plain
``generate``. It is computed once per run and shared with every xdist worker
(:class:`~pytest_infercheck.shared_work.SharedWork`), while holding the target's load lock
exclusively, so no stress level of any worker loads the same engine meanwhile (load from
other kinds of checks is not coordinated).

Level ``L``: every prompt ``copies = max(repeats, ceil(L / prompts))`` times, copies of a
prompt side by side, so a prompt is in flight with itself and at least ``L`` requests exist.

- An engine with batched generation of its own (it overrides ``generate_batch``: mlx-lm
  in-process) gets consecutive batches of ``L`` requests (a batch is also cut where the
  generation parameters change); each request's interval is its batch call's.
- Any other engine (HTTP servers) gets every request started at once with at most ``L`` in
  flight (a semaphore), inside ``under_load()``: no client gate and no retries, so a 503
  busy answer is an error of the level, not a retry.

A managed server that has died is not load: a level asks whether it is alive before it
sends and, if any request failed, after; a dead one fails the level with the server's death
(exit code, last log lines), not with an error rate.

A level holds the target's load lock shared: levels on different xdist workers overlap on
the same server (pytest-xdist is the load generator); each level's figures are its own
requests. Each level is measured once per run: its result is published in the shared folder
and reused by its item and the aggregate, whichever runs first, on whichever worker.

Per level (``Outcome.data``, a :class:`StressLevel`): ``requests``; ``errors`` {kind: count}
(``http_503``, ``ReadTimeout``, ...); ``error_rate = errors / requests``; ``consistent``:
outputs equal to their reference (same token ids when both sides have ids, and same text);
``consistency = consistent / requests``, so an error counts as inconsistent and is never
dropped from a denominator; ``flips``: outputs whose answer (by the prompt's
``answer_kind``) flipped against the reference's
(:func:`~pytest_infercheck.metrics.answers.classify_flip`, with the prompt's reference
answer); ``flip_rate = flips / requests``; ``latency_p50_s`` and ``latency_p95_s`` over the
successful requests (linear interpolation); ``tokens_per_s``, ``achieved_concurrency``
(time-weighted mean in flight) and ``max_in_flight`` as defined in
:mod:`~pytest_infercheck.metrics.load` (tokens of successful requests; None when the engine
reports no token counts); ``mismatches``: the first :data:`MAX_MISMATCHES` inconsistent
outputs (``first_divergence`` in tokens, or in characters for text-only engines: ``unit``;
``fault``: ``empty generation: ...`` when one of the two is empty); ``faults``
(:class:`~pytest_infercheck.metrics.consistency.Fault`): a request whose latency (``end -
start``, errors included) is NaN or infinite (``non-finite latency at requests 3, 7 (NaN)``;
its percentiles and rates are then not reported), and successful outputs that are empty
while their reference is not, or the other way round (``empty generation in 2 of 40
requests: ...``).

An output that leaves its reference at a token (both with token ids) has that token labelled
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``
(:mod:`~pytest_infercheck.metrics.ties`: the reference's margin from the chosen logprobs
and top-k it keeps, the output's from its own), kept on its :class:`Mismatch` (``tie``) and
counted over every inconsistent output of the level (``divergence_labels``) and the
aggregate.

Gates, per level (:class:`StressThresholds`): every fault is a violation of its own,
whatever the thresholds; ``error_rate <= max_error_rate``; ``consistency >=
min_consistency`` (with ``fail_on: decisive``, outputs that leave their reference at a
near-tie count as consistent); ``flips.max_rate`` against the Wilson upper bound of
``flip_rate`` at ``flips.confidence`` (or the point estimate with ``gate: point``). The aggregate
(:func:`summarize`, a pure function of the levels' records: the live run and
``pytest-infercheck report`` over shards call it alike) judges each level's record again and
fails when any level does, naming each level's violations, and names the levels that
errored.

Records (:attr:`~.protocol.CheckKind.records`): :class:`StressLevel` (role ``level``, its
mismatches :class:`Mismatch`) and :class:`StressAggregate` (role ``aggregate``). The
references (:class:`Reference`) and each level cross between processes as JSON
(:func:`~pytest_infercheck.records.plain_data` out,
:func:`~pytest_infercheck.records.load_record` back in).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from pydantic import Field, field_validator

from ..metrics.answers import judge_answers
from ..metrics.consistency import (
    EMPTY_GENERATION,
    Fault,
    empty_fault,
    latency_fault,
    output_text,
    read_generation,
)
from ..metrics.degenerate import Degenerate, DegenerateScan
from ..metrics.determinism import side_tokens
from ..metrics.load import max_in_flight, mean_in_flight, tokens_per_second
from ..metrics.sameness import DivergenceUnit, compare_outputs
from ..metrics.stats import percentile, wilson_interval
from ..metrics.ties import (
    DEFAULT_TIE_MARGIN,
    SideTokens,
    TieDivergence,
    count_labels,
    describe_tie,
    tie_divergence,
)
from ..records import OMIT_WHEN_EMPTY, load_record, plain_data
from ..render.charts import line_chart
from ..render.markup import esc, kv_table, num, table
from ..render.table import render_table
from ..render.views import facts, side_by_side
from ..shared_work import SharedWork
from ..specs import ErrorRate, FlipGates, FlipThresholds, TargetCheck, TieGates
from ..tools import ToolCall, canonical_calls
from .protocol import (
    ItemPlan,
    Outcome,
    RateGate,
    RecordedItem,
    Summary,
    TargetContext,
    TargetRun,
    records_of,
    target_kind,
)

if TYPE_CHECKING:
    from ..backends import Backend, Generation, GenerationParams, PromptInput
    from ..config import CheckSpec
    from ..suites import Prompt, Suite

MAX_MISMATCHES = 10
"""Inconsistent outputs listed per level (all are counted)."""
MAX_SHOWN_FAULTS = 3
"""Requests whose logprob faults are quoted per level (all are counted)."""
TEXT_CHARS = 200
"""Characters of a mismatching reference and output kept in the report."""

Job = tuple["Prompt", "PromptInput", "GenerationParams"]


class StressSpec(TargetCheck):
    """The suite at each concurrency level; ``repeats`` copies of every prompt per level, so a
    prompt is also in flight with itself."""

    levels: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16],
        min_length=1,
        json_schema_extra={"uniqueItems": True, "items": {"type": "integer", "minimum": 1}},
    )
    repeats: int = Field(default=2, ge=1)

    @field_validator("levels")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        if any(level < 1 for level in value) or len(set(value)) != len(value):
            raise ValueError("levels must be distinct integers >= 1")
        return sorted(value)


class StressThresholds(ErrorRate, FlipGates, TieGates):
    """Per level: ``min_consistency`` (the share of outputs equal to their reference; with
    ``fail_on: decisive`` an output that leaves it at a near-tie counts as consistent,
    :class:`~pytest_infercheck.specs.TieGates`, whose ``tie_margin`` labels a divergence),
    ``max_error_rate`` (the share of failed requests), ``flips.max_rate`` (the flip rate, on
    the upper bound of its Wilson interval at ``flips.confidence`` or the point estimate with
    ``gate: point``). A level has no single answer, so ``flips.fail_item_on`` other than its
    default is refused rather than ignored."""

    min_consistency: float = Field(default=1.0, ge=0, le=1)

    @field_validator("flips")
    @classmethod
    def _rate_only(cls, value: FlipThresholds) -> FlipThresholds:
        if value.fail_item_on != FlipThresholds().fail_item_on:
            raise ValueError(
                "stress does not use flips.fail_item_on: it gates each level's flip rate "
                "(flips.max_rate)"
            )
        return value


@dataclass(frozen=True)
class Output:
    """One request of a level: its interval on the monotonic clock and what came back, or the
    kind of error it met."""

    prompt_id: str
    start: float
    end: float
    text: str = ""
    token_ids: list[int] | None = None
    n_tokens: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    faults: tuple[Fault, ...] = ()
    """Non-finite or mismatched logprobs of what came back, and its degenerate stretch
    (:func:`~pytest_infercheck.metrics.consistency.read_generation`)."""
    degenerate: Degenerate | None = None
    tokens: SideTokens | None = None
    """Its token ids, texts, chosen logprobs and top-k for the margins of a divergence
    (:func:`~pytest_infercheck.metrics.determinism.side_tokens`, without full rows)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls the server returned apart from the text (``Generation.tool_calls``)."""


@dataclass
class Reference:
    """A prompt generated alone, one request at a time: what its outputs at every level are
    compared with."""

    text: str
    token_ids: list[int] | None
    """None when the backend gives no token ids."""
    finish_reason: str | None = None
    """Why it stopped (``stop``: its token ids end with the end-of-sequence token)."""
    token_texts: list[str] | None = None
    chosen_logprobs: list[float | None] | None = None
    """The reported logprobs of its tokens (None where not reported or not finite)."""
    top_logprobs: list[dict[str, float] | None] | None = None
    """Its top-k per token, keyed by ``top_keys``: token ids as strings (JSON object keys),
    which :meth:`side` turns back into ints, or token texts."""
    top_keys: str = "id"
    tool_calls: tuple[ToolCall, ...] = field(default=(), metadata=OMIT_WHEN_EMPTY)
    """The calls the server returned apart from the text (``Generation.tool_calls``);
    absent from the JSON when none."""

    def side(self) -> SideTokens:
        """The reference as a side of :func:`~pytest_infercheck.metrics.ties.tie_divergence`
        (top-k keyed by int ids again when ``top_keys`` is ``id``)."""
        top: list[Any] | None = self.top_logprobs
        if top is not None and self.top_keys == "id":
            top = [None if t is None else {int(k): v for k, v in t.items()} for t in top]
        return SideTokens(
            ids=self.token_ids,
            texts=self.token_texts,
            chosen=self.chosen_logprobs,
            top=top,
            top_keys=self.top_keys,
        )


@dataclass
class Mismatch:
    """An output of a level that differs from its reference (texts cut to
    :data:`TEXT_CHARS`)."""

    prompt_id: str
    first_divergence: int | None
    """Where the output leaves the reference, in ``unit``."""
    unit: DivergenceUnit | None
    """``token`` (both sides have token ids) or ``char``."""
    reference: str
    output: str
    fault: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """``empty generation: ...`` when the output or its reference is empty and the other is
    not; None otherwise, and then absent from the JSON."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first divergent token, labelled (:mod:`~pytest_infercheck.metrics.ties`: margins
    of the reference, then the output); absent for a text-only divergence."""


@dataclass
class StressLevel:
    """The record of one concurrency level (role ``level``); see the module docstring for
    how each figure is measured."""

    target: str
    level: int
    """The concurrency level (``c<level>``)."""
    requests: int
    errors: dict[str, int]
    """Failed requests by kind (``http_503``, ``ReadTimeout``, ...), sorted by kind."""
    error_rate: float
    """Failed requests / ``requests``."""
    consistent: int
    """Outputs equal to their reference."""
    consistency: float
    """``consistent / requests`` (1.0 for no requests): an error counts as inconsistent."""
    flips: int
    """Outputs whose answer flipped against the reference's."""
    flip_rate: float
    """``flips / requests``."""
    latency_p50_s: float | None
    """Median latency of the successful requests; None when none succeeded."""
    latency_p95_s: float | None
    tokens_per_s: float | None
    """Tokens of the successful requests / the level's span; None when the engine reports no
    token counts (or none succeeded)."""
    achieved_concurrency: float | None
    """Time-weighted mean of requests in flight; None for a zero span."""
    max_in_flight: int
    mismatches: list[Mismatch]
    """The first :data:`MAX_MISMATCHES` inconsistent outputs."""
    violations: list[str] = field(default_factory=list)
    """The level's gates it broke (:func:`level_violations`; set by the run, judged again by
    the aggregate from the record)."""
    measured_by: str = ""
    """The process that measured the level: an xdist worker (``gw0``) or ``main`` (set by the
    run)."""
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Non-finite latencies and empty generations (see the module docstring): each is a
    violation. Absent from the JSON when there are none."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The divergence labels of every inconsistent output (not only the listed
    ``mismatches``) counted; absent when none diverges at a token."""
    degenerate: DegenerateScan | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The degenerate findings of the level's outputs (:mod:`~pytest_infercheck.metrics.
    degenerate`); absent from a record of an older version."""


@dataclass
class StressAggregate:
    """The record of a stress check x suite (role ``aggregate``): every level, whichever
    process measured it."""

    target: str
    levels: list[StressLevel]
    engines: dict[str, dict[str, Any]]
    """The target's engine identity, by target label."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The levels' divergence labels summed (absent in records made before labels)."""


def error_kind(exc: BaseException) -> str:
    """``http_<status>`` for an HTTP answer, else the name of the underlying exception
    (``ReadTimeout``, ``ConnectError``) or of the error itself."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return f"http_{status}"
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__


def token_count(generation: Generation) -> int | None:
    """Generated tokens: the ids (with EOS), else the server's token texts, else the
    server's ``usage.completion_tokens``, else unknown."""
    if generation.token_ids is not None:
        return len(generation.token_ids)
    if generation.token_texts is not None:
        return len(generation.token_texts)
    return generation.completion_tokens


def reference_of(generation: Generation) -> Reference:
    """What a reference keeps (published to the other workers): its output and, for the
    margins of a divergence, its token texts, reported chosen logprobs and top-k."""
    side = side_tokens(generation)
    return Reference(
        generation.text,
        generation.token_ids,
        generation.finish_reason,
        token_texts=None if side.texts is None else list(side.texts),
        chosen_logprobs=None if side.chosen is None else list(side.chosen),
        top_logprobs=None
        if side.top is None
        else [None if t is None else {str(k): v for k, v in t.items()} for t in side.top],
        top_keys=side.top_keys,
        tool_calls=generation.tool_calls,
    )


def jobs_for(prompts: Sequence[Prompt], level: int, repeats: int) -> list[Prompt]:
    """Every prompt ``max(repeats, ceil(level / len(prompts)))`` times, copies side by side."""
    copies = max(repeats, math.ceil(level / max(len(prompts), 1)))
    return [p for p in prompts for _ in range(copies)]


def batches(jobs: Sequence[Job], level: int) -> list[list[Job]]:
    """Consecutive batches of at most ``level`` jobs, cut where the generation params change."""
    out: list[list[Job]] = []
    for job in jobs:
        if out and len(out[-1]) < level and out[-1][0][2] == job[2]:
            out[-1].append(job)
        else:
            out.append([job])
    return out


def _output(prompt_id: str, start: float, end: float, result: Any) -> Output:
    if isinstance(result, BaseException):
        return Output(prompt_id, start, end, error=error_kind(result))
    reading = read_generation(f"the output of {prompt_id}", result)
    return Output(
        prompt_id,
        start,
        end,
        result.text,
        result.token_ids,
        token_count(result),
        finish_reason=result.finish_reason,
        faults=tuple(reading.faults),
        degenerate=reading.degenerate,
        tokens=dataclasses.replace(side_tokens(result), full=None),
        tool_calls=result.tool_calls,
    )


async def send_burst(backend: Backend, jobs: Sequence[Job], level: int) -> list[Output]:
    """Every job started at once, at most ``level`` in flight; errors become outputs."""
    gate = asyncio.Semaphore(level)

    async def one(job: Job) -> tuple[str, float, float, Any]:
        prompt, rendered, params = job
        async with gate:
            start = time.perf_counter()
            try:
                result: Any = await backend.generate(rendered, params)
            except Exception as exc:  # counted by kind, never dropped
                result = exc
            return prompt.id, start, time.perf_counter(), result

    # Outputs (and their fault checks) are made once every request is done: nothing of the
    # harness's runs while a request holds its place in flight.
    return [_output(*done) for done in await asyncio.gather(*(one(job) for job in jobs))]


async def send_batches(backend: Backend, jobs: Sequence[Job], level: int) -> list[Output]:
    """Batches of ``level`` jobs through ``generate_batch``, one after the other."""
    done: list[tuple[str, float, float, Any]] = []
    for batch in batches(jobs, level):
        start = time.perf_counter()
        try:
            results: list[Any] = await backend.generate_batch(
                [rendered for _, rendered, _ in batch], batch[0][2]
            )
        except Exception as exc:  # the whole batch failed: each request is an error
            results = [exc] * len(batch)
        end = time.perf_counter()
        done += [(p.id, start, end, r) for (p, _, _), r in zip(batch, results, strict=True)]
    return [_output(*one) for one in done]  # checked after the level: no gap between batches


def level_data(
    level: int,
    target: str,
    outputs: Sequence[Output],
    references: Mapping[str, Reference],
    prompts: Iterable[Prompt],
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> StressLevel:
    """The measured figures of one level (see the module docstring for each one), an
    inconsistent output's divergence labelled at ``tie_margin``; its ``violations`` and
    ``measured_by`` are the run's to set."""
    by_id = {p.id: p for p in prompts}
    errors = Counter(o.error for o in outputs if o.error is not None)
    done = [o for o in outputs if o.error is None]
    consistent = flips = 0
    mismatches: list[Mismatch] = []
    empties: list[tuple[int, Fault]] = []
    labels: list[str] = []
    for index, output in enumerate(outputs):
        if output.error is not None:
            continue
        reference = references[output.prompt_id]
        verdict = compare_outputs(
            reference.text,
            reference.token_ids,
            output.text,
            output.token_ids,
            a_calls=canonical_calls(reference.tool_calls) if reference.tool_calls else "",
            b_calls=canonical_calls(output.tool_calls) if output.tool_calls else "",
        )
        empty = empty_fault(
            (output_text(output.text, output.tool_calls), output.token_ids, output.finish_reason),
            (
                output_text(reference.text, reference.tool_calls),
                reference.token_ids,
                reference.finish_reason,
            ),
            a_name=f"request {index} ({output.prompt_id})",
            b_name="its reference",
        )
        if empty is not None:
            empties.append((index, empty))
        tie = (
            None
            if verdict.same
            or verdict.divergence_unit != "token"
            or verdict.first_divergence is None
            or output.tokens is None
            else tie_divergence(
                reference.side(), output.tokens, verdict.first_divergence, tie_margin
            )
        )
        if tie is not None:
            labels.append(tie.divergence_label)
        if verdict.same:
            consistent += 1
        elif len(mismatches) < MAX_MISMATCHES:
            mismatches.append(
                Mismatch(
                    prompt_id=output.prompt_id,
                    first_divergence=verdict.first_divergence,
                    unit=verdict.divergence_unit,
                    reference=reference.text[:TEXT_CHARS],
                    output=output.text[:TEXT_CHARS],
                    fault=None if empty is None else empty.text,
                    tie=tie,
                )
            )
        prompt = by_id[output.prompt_id]
        if prompt.answer_kind is not None:
            judged = judge_answers(
                prompt.answer_kind,
                prompt.answer,
                reference.text,
                output.text,
                base_calls=reference.tool_calls,
                test_calls=output.tool_calls,
            )
            flips += judged.flip.is_flip
    n = len(outputs)
    intervals = [(o.start, o.end) for o in outputs]
    latencies = [o.end - o.start for o in done]
    faults = [f for f in [latency_fault(f"c{level}", [e - s for s, e in intervals])] if f]
    if empties:
        faults.append(_empty_requests(level, n, empties))
    faults += _logprob_faults(level, n, outputs)
    counts = [o.n_tokens for o in done]
    known = all(c is not None for c in counts) and bool(done)
    tokens = sum(c for c in counts if c is not None)
    return StressLevel(
        target=target,
        level=level,
        requests=n,
        errors=dict(sorted(errors.items())),
        error_rate=(n - len(done)) / n if n else 0.0,
        consistent=consistent,
        consistency=consistent / n if n else 1.0,
        flips=flips,
        flip_rate=flips / n if n else 0.0,
        latency_p50_s=_finite(percentile(latencies, 50.0)),
        latency_p95_s=_finite(percentile(latencies, 95.0)),
        tokens_per_s=_finite(tokens_per_second(tokens, intervals)) if known else None,
        achieved_concurrency=_finite(mean_in_flight(intervals)),
        max_in_flight=max_in_flight(intervals),
        mismatches=mismatches,
        faults=faults,
        divergence_labels=count_labels(labels) if labels else {},
        degenerate=DegenerateScan.of([o.degenerate for o in done]),
    )


def _logprob_faults(level: int, requests: int, outputs: Sequence[Output]) -> list[Fault]:
    """One fault per kind of logprob fault over the level's requests, quoting the first
    few: ``non-finite logprob in 2 of 40 requests: request 3: non-finite logprob in the
    output of s01 at position 0 (NaN); ...``."""
    found = [(i, f) for i, o in enumerate(outputs) for f in o.faults]
    out = []
    for kind in dict.fromkeys(f.fault for _, f in found):
        hits = [(i, f) for i, f in found if f.fault == kind]
        shown = "; ".join(f"request {i}: {f.text}" for i, f in hits[:MAX_SHOWN_FAULTS])
        more = len(hits) - MAX_SHOWN_FAULTS
        shown += f"; ... {more} more" if more > 0 else ""
        n = len({i for i, _ in hits})
        text = f"{kind} in {n} of {requests} requests: {shown}"
        out.append(Fault(fault=kind, where=f"c{level}", text=text))
    return out


def _empty_requests(level: int, requests: int, empties: list[tuple[int, Fault]]) -> Fault:
    """One fault for the level's empty generations: ``empty generation in 2 of 40 requests:
    request 3 (a) generated no tokens while its reference generated 3; ...``."""
    shown = "; ".join(
        f.text.removeprefix(f"{EMPTY_GENERATION}: ") for _, f in empties[:MAX_MISMATCHES]
    )
    more = f"; ... ({len(empties)} in all)" if len(empties) > MAX_MISMATCHES else ""
    return Fault(
        EMPTY_GENERATION,
        f"c{level}",
        f"{EMPTY_GENERATION} in {len(empties)} of {requests} requests: {shown}{more}",
        [i for i, _ in empties],
        "request",
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def level_violations(data: StressLevel, thresholds: StressThresholds) -> list[str]:
    """The per-level gates (see the module docstring): the level's faults first."""
    n = data.requests
    out: list[str] = [f.text for f in data.faults]
    if data.error_rate > thresholds.max_error_rate:
        kinds = ", ".join(f"{k} x{v}" for k, v in data.errors.items())
        failed = sum(data.errors.values())
        out.append(
            f"error rate {data.error_rate:.3f} ({failed}/{n}: {kinds}) > max_error_rate "
            f"{thresholds.max_error_rate}"
        )
    near_ties = data.divergence_labels.get("near-tie", 0)
    passing = data.consistent + (near_ties if thresholds.fail_on == "decisive" else 0)
    if (passing / n if n else 1.0) < thresholds.min_consistency:
        out.append(
            f"consistency {data.consistency:.3f} ({data.consistent}/{n} outputs equal "
            f"to their reference{near_tie_note(near_ties, thresholds)}) < min_consistency "
            f"{thresholds.min_consistency}"
        )
    gate = thresholds.flips
    if gate.max_rate is not None and n:
        upper = wilson_interval(data.flips, n, gate.confidence)[1]
        rate, how = (
            (upper, f"Wilson upper bound at {gate.confidence:g}")
            if gate.gate == "upper"
            else (data.flip_rate, "point estimate")
        )
        if rate > gate.max_rate:
            out.append(
                f"flip rate {data.flip_rate:.3f} ({data.flips}/{n}; {how} {rate:.3f}) "
                f"> flips.max_rate {gate.max_rate}"
            )
    return out


def near_tie_note(near_ties: int, thresholds: StressThresholds) -> str:
    """``, 1 more at a near-tie`` when ``fail_on: decisive`` counts near-ties as
    consistent."""
    return f", {near_ties} more at a near-tie" if thresholds.fail_on == "decisive" else ""


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def level_row(data: StressLevel) -> list[str]:
    """One level as a row of :data:`COLUMNS`."""
    failed = sum(data.errors.values())
    kinds = ", ".join(f"{k} x{v}" for k, v in data.errors.items())
    return [
        f"c{data.level}",
        str(data.requests),
        f"{failed} ({kinds})" if failed else "0",
        f"{data.consistent}/{data.requests}",
        str(data.flips),
        _num(data.latency_p50_s, ".3f"),
        _num(data.latency_p95_s, ".3f"),
        _num(data.tokens_per_s, ".1f"),
        f"{_num(data.achieved_concurrency, '.2f')}/{data.max_in_flight}",
        "FAIL" if data.violations else "pass",
    ]


COLUMNS = (
    ("level", "<"),
    ("requests", ">"),
    ("errors", ">"),
    ("consistent", ">"),
    ("flips", ">"),
    ("p50 s", ">"),
    ("p95 s", ">"),
    ("tok/s", ">"),
    ("in flight mean/max", ">"),
    ("verdict", "<"),
)


def level_table(levels: Sequence[StressLevel]) -> list[str]:
    return render_table([level_row(d) for d in levels], COLUMNS)


def level_text(data: StressLevel) -> str:
    """The human-readable report of one level (model output shown as Python literals)."""
    lines = level_table([data])
    for m in data.mismatches:
        lines.append(
            f"  {m.prompt_id}: reference {m.reference!r} -> {m.output!r} (first "
            f"divergence at {m.unit} {m.first_divergence}{'; ' + m.fault if m.fault else ''})"
        )
        if m.tie is not None:
            lines.append(f"    {describe_tie(m.tie, ('reference', 'output'))}")
    if data.divergence_labels:
        lines.append(f"  divergences {data.divergence_labels}")
    return "\n".join(lines)


def level_properties(data: StressLevel) -> list[tuple[str, Any]]:
    """Scalar JUnit properties of one level."""
    keys = (
        "level",
        "requests",
        "error_rate",
        "consistency",
        "flips",
        "latency_p50_s",
        "latency_p95_s",
        "tokens_per_s",
        "achieved_concurrency",
        "max_in_flight",
        "measured_by",
    )
    return [(f"infercheck_{k}", getattr(data, k)) for k in keys]


class StressRun(TargetRun[StressSpec, StressThresholds]):
    """The stress check of one target x suite (see the module docstring)."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        levels = cast(StressSpec, check.spec).levels
        return [ItemPlan(f"c{level}", "level", str(level)) for level in levels]

    @cached_property
    def shared(self) -> SharedWork:
        """The run's shared folder (a subfolder of the managed-servers folder)."""
        servers = self.cache.servers
        return SharedWork(None if servers is None else servers.state_dir / "stress")

    @cached_property
    def _key(self) -> str:
        """This check x suite, the same in every process of the run."""
        ident = repr((str(self.loaded.path), self.index, self.suite.name))
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    @cached_property
    def _load_lock(self) -> str:
        """The lock of the engine under load, shared by every stress check of the target."""
        return "load-" + hashlib.sha256(repr(self.target.key).encode()).hexdigest()[:16]

    def references(self) -> dict[str, Reference]:
        """Each prompt generated alone, by prompt id (computed once per run, see the module
        docstring)."""
        target = self.target

        def alone() -> dict[str, dict[str, Any]]:
            with self.shared.locked(self._load_lock, exclusive=True):
                return {
                    p.id: plain_data(
                        reference_of(
                            self.cache.call(
                                target, target.backend.generate(self.render(p), self.params(p))
                            )
                        )
                    )
                    for p in self.suite.prompts
                }

        shared = self.shared.once(f"{self._key}-references", alone)
        return {pid: load_record(Reference, ref) for pid, ref in shared.items()}

    def level(self, level: int) -> StressLevel:
        """The figures of ``level``, measured once per run by whichever process needs them
        first."""
        shared = self.shared.once(f"{self._key}-c{level}", lambda: plain_data(self._measure(level)))
        return load_record(StressLevel, shared)

    def _measure(self, level: int) -> StressLevel:
        from ..backends.http import under_load  # httpx: loaded only by runs that use HTTP

        references = self.references()
        target = self.target
        jobs = [
            (p, self.render(p), self.params(p))
            for p in jobs_for(self.suite.prompts, level, self.spec.repeats)
        ]
        send = send_batches if target.backend.batching is not None else send_burst
        self.cache.check_alive(target)
        with self.shared.locked(self._load_lock, exclusive=False), under_load():
            outputs = self.cache.run(send(target.backend, jobs, level))
        if any(output.error is not None for output in outputs):
            # a dead (or dying) server is its death, not a load failure
            self.cache.check_alive(target, after_failures=True)
        data = level_data(
            level,
            target.label,
            outputs,
            references,
            self.suite.prompts,
            self.thresholds.tie_margin,
        )
        data.violations = level_violations(data, self.thresholds)
        data.measured_by = os.environ.get("PYTEST_XDIST_WORKER", "main")
        return data

    def run_item(self, plan: ItemPlan) -> Outcome:
        data = self.level(int(plan.key))
        return Outcome(
            violations=list(data.violations),
            text=level_text(data),
            data=data,
            properties=level_properties(data),
            degenerate=data.degenerate,
        )


def summarize(
    items: Sequence[RecordedItem], thresholds: StressThresholds, context: TargetContext
) -> Summary:
    """The aggregate of the levels' records, by level: each level judged again by
    :func:`level_violations` (its record's ``violations`` are those), every broken gate named
    by level, and the levels that errored (no record) named."""
    levels = sorted(
        (
            dataclasses.replace(d, violations=level_violations(d, thresholds))
            for d in records_of(items, "level")
        ),
        key=lambda d: d.level,
    )
    record = StressAggregate(
        target=context.target,
        levels=levels,
        engines=context.engines,
        divergence_labels={
            label: sum(d.divergence_labels.get(label, 0) for d in levels)
            for label in count_labels([])
        },
    )
    return Summary(
        record=record,
        violations=level_union_violations(levels),
        text="\n".join([*level_table(levels), f"divergences {record.divergence_labels}"]),
        properties=[
            ("infercheck_levels_failed", sum(bool(d.violations) for d in levels)),
            ("infercheck_measured_by", ",".join(sorted({d.measured_by for d in levels}))),
            *(
                (f"infercheck_divergences_{label.replace('-', '_')}", n)
                for label, n in record.divergence_labels.items()
            ),
        ],
    )


def summary_lines(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """The end-of-run table of each stress aggregate: every level, whichever worker measured
    it (the aggregate's data carries all of them)."""
    lines: list[str] = []
    for nodeid, passed, data in aggregates:
        record = load_record(StressAggregate, data)
        parts = nodeid.split("::")
        check, suite = (parts[-3], parts[-2]) if len(parts) >= 3 else (nodeid, "?")
        verdict = "pass" if passed else "FAIL"
        lines.append(f"{check} {suite} on {record.target}: {verdict}")
        lines += [f"  {line}" for line in level_table(record.levels)]
    return lines


def stress_level(data: Mapping[str, Any]) -> str:
    """The level's numbers and the outputs that differed from the reference."""
    record = load_record(StressLevel, data)
    parts = [facts(plain_data(record), ())]
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    if record.errors:
        parts.append("<h4>errors</h4>" + kv_table(record.errors))
    for m in record.mismatches[:20]:
        parts.append(
            side_by_side(
                f"reference ({m.prompt_id})",
                m.reference,
                f"at concurrency {record.level}",
                m.output,
                m.first_divergence,
            )
        )
        if m.tie is not None:
            parts.append(f"<p>{esc(describe_tie(m.tie, ('reference', 'output')))}</p>")
    return "".join(parts)


def _aggregate_or_none(data: Mapping[str, Any]) -> StressAggregate | None:
    """The aggregate's record; None when ``data`` is not one (a results file of another
    version), which the summary then shows as one plain column and without charts."""
    try:
        return load_record(StressAggregate, data)
    except ValueError:
        return None


def level_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per level in the HTML summary table: ``q4@local c8`` (its numbers keyed by
    the :class:`StressLevel` fields)."""
    record = _aggregate_or_none(data)
    if record is None:
        return [(str(data.get("target", "?")), data)]
    return [(f"{record.target} c{lv.level}".strip(), plain_data(lv)) for lv in record.levels]


def level_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    record = _aggregate_or_none(data)
    if record is None:
        return []
    levels = record.levels
    labels = [str(lv.level) for lv in levels]
    return [
        line_chart(
            [
                ("p50", [lv.latency_p50_s for lv in levels]),
                ("p95", [lv.latency_p95_s for lv in levels]),
            ],
            title=f"latency: {name}",
            x_labels=labels,
            x_label="concurrency",
            y_label="s",
        ),
        line_chart(
            [
                ("consistency", [lv.consistency for lv in levels]),
                ("error rate", [lv.error_rate for lv in levels]),
            ],
            title=f"consistency: {name}",
            x_labels=labels,
            x_label="concurrency",
            y_label="rate",
        ),
    ]


def level_union_violations(levels: Sequence[StressLevel]) -> list[str]:
    """The aggregate's verdict: every level's broken gates, named by level."""
    return [f"c{d.level}: {v}" for d in levels for v in d.violations]


def flip_rate_gates(check: CheckSpec, suite: Suite) -> list[RateGate]:
    """``flips.max_rate`` on the upper Wilson bound of each level's flip rate, counted over
    the level's requests: the smallest level sends the fewest."""
    gate = cast(StressThresholds, check.kind_thresholds()).flips
    if gate.max_rate is None or gate.gate != "upper":
        return []
    spec = cast(StressSpec, check.spec)
    level = min(spec.levels)
    n = len(jobs_for(suite.prompts, level, spec.repeats))
    copies = n // max(len(suite.prompts), 1)
    return [
        RateGate(
            field=("flips", "max_rate"),
            max_rate=gate.max_rate,
            confidence=gate.confidence,
            n=n,
            trials=f"{n} requests at c{level} ({len(suite.prompts)} prompts x {copies})",
            unit="requests per level (prompts x repeats)",
        )
    ]


STRESS = target_kind(
    "stress",
    StressSpec,
    StressRun,
    thresholds=StressThresholds,
    context=TargetContext,
    summarize=summarize,
    summary_lines=summary_lines,
    records={"level": StressLevel, "aggregate": StressAggregate},
    views={"level": stress_level},
    measures=(
        ("requests", ("requests",), num),
        ("error rate", ("error_rate",), num),
        ("consistency", ("consistency",), num),
        ("flips", ("flips",), num),
        (
            "latency p50 / p95 (s)",
            ("latency_p50_s", "latency_p95_s"),
            lambda p50, p95: f"{num(p50, '.3g')} / {num(p95, '.3g')}",
        ),
        ("tokens/s", ("tokens_per_s",), lambda v: num(v, ".4g")),
        ("achieved concurrency", ("achieved_concurrency",), lambda v: num(v, ".3g")),
    ),
    columns=level_columns,
    headline="consistency",
    charts=level_charts,
    spread_over_workers=True,
    rate_gates=flip_rate_gates,
)
