"""What a stress level measured, from its requests (pure: the gather facet calls it on
what the engine returned).

Per level (a :class:`~.records.StressLevel`): ``requests``; ``errors`` {kind: count}
(``http_503``, ``ReadTimeout``, ...); ``error_rate = errors / requests``; ``consistent``:
outputs equal to their reference (same token ids when both sides have ids, and same text);
``consistency = consistent / requests``, so an error counts as inconsistent and is never
dropped from a denominator; ``flips``: outputs whose answer (by the prompt's
``answer_kind``) flipped against the reference's
(:func:`~pytest_infercheck.metrics.answers.judge_answers`, with the prompt's reference
answer); ``flip_rate = flips / requests``; ``latency_p50_s`` and ``latency_p95_s`` over the
successful requests (linear interpolation); ``tokens_per_s``, ``achieved_concurrency``
(time-weighted mean in flight) and ``max_in_flight`` as defined in
:mod:`~pytest_infercheck.metrics.load` (tokens of successful requests; None when the engine
reports no token counts); ``mismatches``: the first :data:`MAX_MISMATCHES` inconsistent
outputs (``first_divergence`` in tokens, or in characters for text-only engines: ``unit``;
``fault``: ``empty generation: ...`` when one of the two is empty); ``faults``: a request
whose latency (``end - start``, errors included) is NaN or infinite (``non-finite latency
at requests 3, 7 (NaN)``; its percentiles and rates are then not reported), successful
outputs that are empty while their reference is not, or the other way round (``empty
generation in 2 of 40 requests: ...``), and each kind of logprob fault of the outputs.

An output that leaves its reference at a token (both with token ids) has that token labelled
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``
(:mod:`~pytest_infercheck.metrics.ties`: the reference's margin from the chosen logprobs
and top-k it keeps, the output's from its own), kept on its :class:`~.records.Mismatch`
(``tie``) and counted over every inconsistent output of the level (``divergence_labels``);
the near-tie ones are listed apart (:class:`~.evidence.NearTie`).

Logprobs: each successful output's ``|chosen logprob - its reference's|`` at every token
before its first divergence (every token when the two are equal) where both are reported and
finite; ``logprob_diff`` is their largest over the level (None when no output has such a
token), ``logprob_worst`` where it is (:class:`~.records.LogprobShift`).

With ``beside`` (isolation), every request carries its model (``Output.side``); its
reference is that model's output alone (:func:`ref_key`), a mismatch and the largest
logprob delta name it, and ``sides`` counts each model's requests, consistent outputs and
largest logprob delta (:class:`~.records.SideCount`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...backends.base import BackendError
from ...metrics.answers import judge_answers
from ...metrics.consistency import (
    empty_fault,
    latency_fault,
    output_text,
    read_generation,
)
from ...metrics.degenerate import Degenerate, DegenerateScan
from ...metrics.determinism import side_tokens
from ...metrics.faults import EMPTY_GENERATION, Fault
from ...metrics.load import max_in_flight, mean_in_flight, tokens_per_second
from ...metrics.sameness import compare_outputs
from ...metrics.stats import percentile
from ...metrics.ties import DEFAULT_TIE_MARGIN, SideTokens, count_labels, tie_divergence
from ...tools import ToolCall, canonical_calls
from ..framework.failures import server_message
from .evidence import NearTie
from .records import LogprobShift, Mismatch, Reference, SideCount, StressLevel

if TYPE_CHECKING:
    from ...backends import Generation, GenerationParams, PromptInput
    from ...suites import Prompt

MAX_MISMATCHES = 10
"""Inconsistent outputs listed per level (all are counted)."""
MAX_SHOWN_FAULTS = 3
"""Requests whose logprob faults are quoted per level (all are counted)."""
TEXT_CHARS = 200
"""Characters of a mismatching reference and output kept in the report."""

Job = tuple["Prompt", "PromptInput", "GenerationParams"]


@dataclass(frozen=True)
class Output:
    """One request of a level: its interval on the monotonic clock and what came back, or the
    kind of error it met (and its message)."""

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
    message: str | None = None
    """The error's message (the server's), when it failed."""
    status: int | None = None
    """The error's HTTP status, when it had one."""
    side: str = ""
    """With ``beside``: the model the request asked (its reference is that model's)."""


def ref_key(side: str, prompt_id: str) -> str:
    """The key of a prompt's reference: its id, or ``side/id`` for a model's request under
    ``beside`` (every side named then, so the two forms never meet)."""
    return f"{side}/{prompt_id}" if side else prompt_id


def logprob_shift(
    reference: Sequence[float | None] | None, output: Sequence[float | None] | None, upto: int
) -> tuple[float, int] | None:
    """The largest ``|output[i] - reference[i]|`` over ``i < upto`` where both are reported
    and finite, and its ``i`` (the first of equals); None when there is no such ``i``."""
    if reference is None or output is None:
        return None
    best: tuple[float, int] | None = None
    for i, (a, b) in enumerate(zip(reference[:upto], output[:upto], strict=False)):
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            continue
        delta = abs(b - a)
        if best is None or delta > best[0]:
            best = (delta, i)
    return best


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


def output_of(prompt_id: str, start: float, end: float, result: Any, side: str = "") -> Output:
    """One request's :class:`Output` from what it returned (a generation or an error)."""
    if isinstance(result, BaseException):
        message, status = (
            server_message(result)
            if isinstance(result, BackendError)
            else (
                f"{type(result).__name__}: {result}",
                None,
            )
        )
        return Output(
            prompt_id,
            start,
            end,
            error=error_kind(result),
            message=message,
            status=status,
            side=side,
        )
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
        side=side,
    )


def level_data(
    level: int,
    target: str,
    outputs: Sequence[Output],
    references: Mapping[str, Reference],
    prompts: Iterable[Prompt],
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> StressLevel:
    """The measured figures of one level (:func:`measure_level` without its near-ties)."""
    return measure_level(level, target, outputs, references, prompts, tie_margin)[0]


def measure_level(
    level: int,
    target: str,
    outputs: Sequence[Output],
    references: Mapping[str, Reference],
    prompts: Iterable[Prompt],
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> tuple[StressLevel, list[NearTie]]:
    """The measured figures of one level (see the module docstring), an inconsistent
    output's divergence labelled at ``tie_margin``, and its near-tie outputs; its
    ``violations`` and ``measured_by`` are the gather's and the judge's to set."""
    by_id = {p.id: p for p in prompts}
    errors = Counter(o.error for o in outputs if o.error is not None)
    done = [o for o in outputs if o.error is None]
    consistent = flips = 0
    mismatches: list[Mismatch] = []
    empties: list[tuple[int, Fault]] = []
    labels: list[str] = []
    near: list[NearTie] = []
    worst: LogprobShift | None = None
    sides: dict[str, list[Any]] = {}  # side -> [requests, consistent, largest delta]
    for o in outputs:
        if o.side:
            sides.setdefault(o.side, [0, 0, None])[0] += 1
    for index, output in enumerate(outputs):
        if output.error is not None:
            continue
        reference = references[ref_key(output.side, output.prompt_id)]
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
            a_name=f"request {index} ({output.side + ', ' if output.side else ''}"
            f"{output.prompt_id})",
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
        upto = (
            None
            if verdict.same
            else (verdict.first_divergence or 0)
            if verdict.divergence_unit == "token"
            else 0  # a text-only divergence: no token is known to be shared
        )
        shift = logprob_shift(
            reference.chosen_logprobs,
            None if output.tokens is None else output.tokens.chosen,
            len(reference.token_ids or reference.chosen_logprobs or []) if upto is None else upto,
        )
        if shift is not None:
            if worst is None or shift[0] > worst.delta:
                worst = LogprobShift(shift[0], index, output.prompt_id, shift[1], output.side)
            if output.side:
                count = sides[output.side]
                count[2] = shift[0] if count[2] is None else max(count[2], shift[0])
        if verdict.same:
            consistent += 1
            if output.side:
                sides[output.side][1] += 1
        else:
            slot = len(mismatches) if len(mismatches) < MAX_MISMATCHES else None
            if slot is not None:
                mismatches.append(
                    Mismatch(
                        prompt_id=output.prompt_id,
                        first_divergence=verdict.first_divergence,
                        unit=verdict.divergence_unit,
                        reference=reference.text[:TEXT_CHARS],
                        output=output.text[:TEXT_CHARS],
                        fault=None if empty is None else empty.text,
                        tie=tie,
                        side=output.side,
                    )
                )
            if tie is not None and tie.divergence_label == "near-tie" and not output.side:
                # beside: no near-tie is judged past (each model would be scored on itself)
                near.append(NearTie(index, output.prompt_id, tie.token, slot))
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
    data = StressLevel(
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
        logprob_diff=None if worst is None else worst.delta,
        logprob_worst=worst,
        sides={side: SideCount(*count) for side, count in sides.items()},
    )
    return data, near


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
        tuple(i for i, _ in empties),
        "request",
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
