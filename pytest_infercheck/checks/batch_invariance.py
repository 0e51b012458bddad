"""The ``batch-invariance`` check (the needle test): a prompt run alone, then placed at a
random position of ``trials`` batches of ``batch_size`` prompts of mixed lengths.

The reference is the prompt generated alone, straight from the backend (never a cached
generation that may have been produced under concurrency). Each trial draws, with a
``random.Random`` seeded by ``(seed, prompt id)``, the needle's position and its
``batch_size - 1`` companions: other prompts of the suite (the prompt itself when the suite
has no other), each repeated 1-3 times so that the batch mixes lengths even when the suite's
prompts are alike. The batch goes through ``Backend.generate_batch``: mlx-lm's own
``BatchGenerator`` in-process, a burst of concurrent requests on a server.

A trial passes when the needle's tokens equal the alone tokens (token ids where both sides
have them, else text) and, where logprobs are exposed, ``max_t |lp_alone[t] - lp_batch[t]|``
over the positions before the first divergence is within ``logprob_tolerance`` (a NaN
difference never is), and neither output has a fault of its own
(:mod:`~pytest_infercheck.metrics.consistency`: ``non-finite logprob in the batched output
at position 2 (NaN)``, ``logprob does not match its token ...``, ``empty generation: the
batched output generated no tokens while the output alone generated 3``): each is a
violation of the prompt's item, whatever the thresholds, and the aggregate fails naming the
prompts with faults.

A trial whose tokens leave the alone output's has its first divergent token labelled
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``
(:mod:`~pytest_infercheck.metrics.ties`: the alone and batched outputs' margins from their
own top-k or full rows), counted per item and in the aggregate; with ``fail_on: decisive`` a
trial that differs only at a near-tie is not a violation.

Records (:attr:`~.protocol.CheckKind.records`): :class:`BatchInvariancePrompt` (role
``prompt``, its trials :class:`Trial`) and :class:`BatchInvarianceAggregate` (role
``aggregate``).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..backends import Generation
from ..metrics.consistency import (
    Fault,
    aggregate_faults,
    empty_fault,
    read_generation,
    reported_logprobs,
)
from ..metrics.degenerate import Degenerate, DegenerateScan
from ..metrics.determinism import logprob_diff, side_tokens
from ..metrics.finite import strict_max
from ..metrics.sameness import same_generation
from ..metrics.ties import (
    DEFAULT_TIE_MARGIN,
    TieDivergence,
    count_labels,
    describe_tie,
    tie_divergence,
)
from ..records import OMIT_WHEN_EMPTY, load_record, plain_data
from ..render.markup import esc, num, rate, table
from ..render.table import check_table
from ..render.views import facts, side_by_side, text_of
from ..specs import LogprobTolerance, TargetCheck, TieGates
from .protocol import (
    Aggregates,
    ItemPlan,
    Outcome,
    RecordedItem,
    Summary,
    TargetContext,
    TargetRun,
    memoised,
    records_of,
    target_kind,
)

if TYPE_CHECKING:
    from ..backends import Backend, PromptInput
    from ..suites import Prompt

MAX_REPEAT = 3
"""Companions are other prompts repeated 1..MAX_REPEAT times (mixed lengths)."""
CONCURRENT_BURST = "concurrent burst"
SEQUENTIAL = "sequential (the backend takes one request at a time)"


@dataclass
class AloneOutput:
    """The prompt generated alone: the reference of every trial."""

    text: str
    token_ids: list[int] | None
    """None when the backend gives no token ids."""
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of its own logprobs (each a violation); absent from the JSON when none."""
    degenerate: Degenerate | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Its degenerate stretch (:mod:`~pytest_infercheck.metrics.degenerate`), if any."""


@dataclass
class Trial:
    """One trial: the prompt (the needle) at ``position`` of a batch, against it alone."""

    trial: int
    """The trial's number (0, 1, ...)."""
    position: int
    """The needle's index in the batch."""
    batch: list[str]
    """The batch's prompt ids in order; a companion repeated ``n`` times is ``id*n``."""
    match: bool
    """The needle's batched generation is the same as alone (token ids where both sides have
    them, and text); False when its request failed."""
    first_divergence: int | None
    """Where it leaves the alone output (in ``divergence_unit``); None when it matches or
    failed."""
    max_logprob_diff: float | None
    """``max_t |lp_alone[t] - lp_batch[t]|`` over the positions both share a token; None
    without logprobs (or when the request failed)."""
    text: str | None
    """The needle's batched output; None when its request failed."""
    divergence_unit: str | None = None
    """``token`` or ``char``; None when it matches or failed (absent in results version 1)."""
    error: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """``<exception type>: <message>`` when the batched request failed; the key is absent from
    the JSON otherwise ."""
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of the batched output: of its own logprobs, and an empty generation against the
    output alone (each a violation); absent from the JSON when none."""
    degenerate: Degenerate | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The batched output's degenerate stretch, if any."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first divergent token from the alone output, labelled (:mod:`~pytest_infercheck.
    metrics.ties`: margins of the alone output, then the batched one); absent when the
    tokens do not diverge (a match, a failed request, a text-only difference)."""


@dataclass
class BatchInvariancePrompt:
    """The record of one prompt's item (role ``prompt``): alone, then its trials."""

    prompt_id: str
    target: str
    seed: int
    """The check's seed: with the prompt id, it draws the trials' positions and companions."""
    alone: AloneOutput
    trials: list[Trial]
    batched_by: str
    """How the backend ran a batch (:func:`batched_by`)."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The trials' divergence labels counted (:attr:`Trial.tie`); absent when no trial's
    tokens diverge."""


@dataclass
class BatchInvarianceAggregate:
    """The record of a batch-invariance check x suite (role ``aggregate``)."""

    target: str
    prompts: int
    """Prompts aggregated (the suite, or the shard's selection)."""
    invariant_prompts: int
    """Prompts without a violation in any trial."""
    rate: float
    """``invariant_prompts / prompts`` (0.0 for no prompts)."""
    trials: int
    """Trials over all prompts."""
    batched_by: str | None
    """How the backend ran a batch; None for no prompts."""
    engines: dict[str, dict[str, Any]]
    """The target's engine identity, by target label."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The trials' divergence labels counted over the prompts (absent in records made
    before labels)."""


class BatchInvarianceSpec(TargetCheck):
    """Each prompt alone, then at a random position of ``trials`` batches of ``batch_size``
    prompts of mixed lengths, drawn with ``seed``."""

    trials: int = Field(default=3, ge=1)
    batch_size: int = Field(default=8, ge=2)
    seed: int = 0


class BatchInvarianceThresholds(LogprobTolerance, TieGates):
    """``logprob_tolerance`` (:class:`~pytest_infercheck.specs.LogprobTolerance`);
    ``tie_margin`` labels a trial's divergence, ``fail_on: decisive`` passes a trial that
    differs only at a near-tie (:class:`~pytest_infercheck.specs.TieGates`)."""


@dataclass
class BatchInvarianceRun(TargetRun[BatchInvarianceSpec, BatchInvarianceThresholds]):
    """The needle trials of every prompt, memoised per prompt on the run (shared by the
    suite's items and its aggregate)."""

    _trials_by_prompt: dict[str, BatchInvariancePrompt] = field(
        default_factory=dict, init=False, repr=False
    )
    """By prompt id: the record of its trials (see :meth:`result`)."""

    def run_item(self, plan: ItemPlan) -> Outcome:
        record = self.result(self.prompt(plan.key))
        violations = trial_violations(record, self.thresholds)
        props: list[tuple[str, Any]] = [
            ("infercheck_trials", len(record.trials)),
            ("infercheck_matching_trials", sum(t.match for t in record.trials)),
            ("infercheck_max_logprob_diff", _max_diff(record.trials)),
        ]
        return Outcome(violations, describe(record), record, props, degenerate=scan(record))

    def result(self, prompt: Prompt) -> BatchInvariancePrompt:
        """The record of ``prompt``'s trials (see the module docstring; memoised)."""
        return memoised(self._trials_by_prompt, prompt.id, lambda: self._trials(prompt))

    def _trials(self, prompt: Prompt) -> BatchInvariancePrompt:
        spec = self.spec
        target = self.target
        backend = target.backend
        params = self.params(prompt)
        needle = self.render(prompt)
        alone = self.cache.call(target, backend.generate(needle, params))
        alone_read = read_generation("the output alone", alone)
        rng = random.Random(f"{spec.seed}:{prompt.id}")
        others = [p for p in self.suite.prompts if p.id != prompt.id] or [prompt]
        trials = []
        for trial in range(spec.trials):
            position = rng.randrange(spec.batch_size)
            companions = [self._companion(rng, others) for _ in range(spec.batch_size - 1)]
            inputs = [c for _, c in companions]
            inputs.insert(position, needle)
            names = [n for n, _ in companions]
            names.insert(position, prompt.id)
            results = self.cache.call(target, backend.generate_batch(inputs, params))
            trials.append(
                compare_to_alone(
                    alone,
                    results[position],
                    trial=trial,
                    position=position,
                    batch=names,
                    tie_margin=self.thresholds.tie_margin,
                )
            )
        return BatchInvariancePrompt(
            prompt_id=prompt.id,
            target=target.label,
            seed=spec.seed,
            alone=AloneOutput(
                alone.text, alone.token_ids, alone_read.faults, alone_read.degenerate
            ),
            trials=trials,
            batched_by=batched_by(backend),
            divergence_labels=trial_labels(trials),
        )

    def _companion(self, rng: random.Random, others: list[Prompt]) -> tuple[str, PromptInput]:
        """A random other prompt repeated 1..MAX_REPEAT times (a conversation: once, as it
        is): its name and rendering."""
        other = rng.choice(others)
        repeat = rng.randint(1, MAX_REPEAT)
        if other.messages is not None:
            repeat = 1
        name = other.id if repeat == 1 else f"{other.id}*{repeat}"
        return name, self.render(dataclasses.replace(other, text=other.text * repeat))


def scan(record: BatchInvariancePrompt) -> DegenerateScan:
    """The degenerate findings of a prompt's generations: alone, and in each trial whose
    request succeeded."""
    trials = [t.degenerate for t in record.trials if t.error is None]
    return DegenerateScan.of([record.alone.degenerate, *trials])


def trial_labels(trials: Sequence[Trial]) -> dict[str, int]:
    """The trials' divergence labels counted; empty when no trial's tokens diverge."""
    labels = [t.tie.divergence_label for t in trials if t.tie is not None]
    return count_labels(labels) if labels else {}


def summarize(
    items: Sequence[RecordedItem], thresholds: BatchInvarianceThresholds, context: TargetContext
) -> Summary:
    """The aggregate of the prompts' records: a prompt is invariant when no trial breaks a
    threshold (:func:`trial_violations`); violations: errored items and the prompts whose
    outputs carry faults."""
    results: list[BatchInvariancePrompt] = records_of(items, "prompt")
    invariant = sum(not trial_violations(r, thresholds) for r in results)
    faulty = [(r.prompt_id, record_faults(r)) for r in results if record_faults(r)]
    trials = sum(len(r.trials) for r in results)
    rate = invariant / len(results) if results else 0.0
    data = BatchInvarianceAggregate(
        target=context.target,
        prompts=len(results),
        invariant_prompts=invariant,
        rate=rate,
        trials=trials,
        batched_by=results[0].batched_by if results else None,
        engines=context.engines,
        divergence_labels=count_labels(
            [t.tie.divergence_label for r in results for t in r.trials if t.tie is not None]
        ),
    )
    text = (
        f"{context.target}: {invariant}/{len(results)} prompts batch-invariant over "
        f"{trials} trials ({data.batched_by}); divergences {data.divergence_labels}"
    )
    props: list[tuple[str, Any]] = [
        ("infercheck_invariant_prompts", invariant),
        ("infercheck_batch_invariance_rate", rate),
        ("infercheck_trials", trials),
        *(
            (f"infercheck_divergences_{label.replace('-', '_')}", n)
            for label, n in data.divergence_labels.items()
        ),
    ]
    violations = aggregate_faults(faulty, n_items=len(results))
    return Summary(data, violations, text, props)


def batched_by(backend: Backend) -> str:
    """How ``backend.generate_batch`` runs a batch: the backend's own batching (its
    ``batching`` attribute), else a burst of concurrent requests, which a backend that takes
    one request at a time serves one after the other."""
    if backend.batching is not None:
        return backend.batching
    return CONCURRENT_BURST if backend.concurrency > 1 else SEQUENTIAL


def compare_to_alone(
    alone: Generation,
    batched: Generation | BaseException,
    *,
    trial: int,
    position: int,
    batch: list[str],
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> Trial:
    """The trial ``trial`` (the needle at ``position`` of ``batch``): ``match``
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`: ids and text),
    ``first_divergence`` and its unit, ``max_logprob_diff`` over the positions both runs
    share a token (:func:`~pytest_infercheck.metrics.determinism.logprob_diff`: NaN when a
    compared logprob is NaN), ``text`` of the needle's batched generation against the alone
    one (``error`` when the batched request failed), the batched output's ``faults`` and
    ``degenerate`` finding (:func:`~pytest_infercheck.metrics.consistency.read_generation`), and
    the first divergent token's ``tie`` labelled at ``tie_margin``."""
    if isinstance(batched, BaseException):
        return Trial(
            trial=trial,
            position=position,
            batch=batch,
            match=False,
            first_divergence=None,
            divergence_unit=None,
            max_logprob_diff=None,
            text=None,
            error=f"{type(batched).__name__}: {batched}",
        )
    verdict = same_generation(alone, batched)
    reading = read_generation("the batched output", batched)
    found = empty_fault(
        (batched.text, batched.token_ids, batched.finish_reason),
        (alone.text, alone.token_ids, alone.finish_reason),
        a_name="the batched output",
        b_name="the output alone",
    )
    empty = [] if found is None else [found]
    if verdict.same or verdict.detokenization_difference:
        aligned: int | None = None  # every position holds the same token
    elif verdict.divergence_unit == "token":
        aligned = verdict.first_divergence
    else:
        aligned = 0  # texts differ and no tokens say where: no position is comparable
    return Trial(
        trial=trial,
        position=position,
        batch=batch,
        match=verdict.same,
        first_divergence=verdict.first_divergence,
        divergence_unit=verdict.divergence_unit,
        max_logprob_diff=logprob_diff(
            reported_logprobs(alone.chosen_logprobs, alone.top_logprobs),
            reported_logprobs(batched.chosen_logprobs, batched.top_logprobs),
            aligned,
        ),
        text=batched.text,
        faults=[*reading.faults, *empty],
        degenerate=reading.degenerate,
        tie=None
        if verdict.divergence_unit != "token" or verdict.first_divergence is None
        else tie_divergence(
            side_tokens(alone), side_tokens(batched), verdict.first_divergence, tie_margin
        ),
    )


def record_faults(record: BatchInvariancePrompt) -> list[Fault]:
    """Every fault of a prompt's record: the output alone's, then each trial's."""
    return [*record.alone.faults, *(f for t in record.trials for f in t.faults)]


def trial_violations(
    record: BatchInvariancePrompt, thresholds: BatchInvarianceThresholds
) -> list[str]:
    """Why a prompt is not batch-invariant: a fault of the output alone (once), then per
    trial: its batched output's faults, its tokens differing from the alone run (not under
    ``fail_on: decisive`` when they part at a ``near-tie``), its batched request failing, its
    logprobs moving beyond ``logprob_tolerance`` (or by NaN)."""
    violations = [f.text for f in record.alone.faults]
    size = len(record.trials[0].batch) if record.trials else 0
    for t in record.trials:
        where = f"trial {t.trial} (position {t.position} of {size})"
        violations += [f"{where}: {f.text}" for f in t.faults]
        if t.error is not None:
            violations.append(f"{where}: the batched request failed: {t.error}")
        elif not t.match and not (
            thresholds.fail_on == "decisive"
            and t.tie is not None
            and t.tie.divergence_label == "near-tie"
        ):
            violations.append(
                f"{where}: output differs from the prompt alone at {t.first_divergence}: "
                f"{record.alone.text!r} alone vs {t.text!r} batched"
            )
        diff = t.max_logprob_diff
        if diff is not None and not diff <= thresholds.logprob_tolerance:
            violations.append(
                f"{where}: logprobs moved by {diff:.3g} "
                f"{'> ' if math.isfinite(diff) else '(not finite): fails '}"
                f"logprob_tolerance {thresholds.logprob_tolerance}"
            )
    return violations


def describe(record: BatchInvariancePrompt) -> str:
    """The item's report: the alone output and each trial's batch and result."""
    lines = [f"alone: {record.alone.text!r} (batched by {record.batched_by})"]
    for t in record.trials:
        verdict = "match" if t.match else "DIFFERS"
        lines.append(
            f"  trial {t.trial}: position {t.position} in [{', '.join(t.batch)}]: "
            f"{verdict}, max |logprob diff| {t.max_logprob_diff}"
        )
        if t.tie is not None:
            lines.append(f"    {describe_tie(t.tie, ('alone', 'batched'))}")
    return "\n".join(lines)


def _max_diff(trials: list[Trial]) -> float | None:
    return strict_max([t.max_logprob_diff for t in trials if t.max_logprob_diff is not None])


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per batch-invariance check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = load_record(BatchInvarianceAggregate, data)
        invariant = f"{record.invariant_prompts}/{record.prompts}"
        return [str(record.trials), invariant, str(record.batched_by)]

    def complete(data: dict[str, Any]) -> bool:
        record = load_record(BatchInvarianceAggregate, data)
        return record.invariant_prompts == record.prompts

    columns = (("trials", ">"), ("invariant", ">"), ("batched by", "<"))
    return check_table(aggregates, columns, cells, complete)


def batch_invariance_prompt(data: Mapping[str, Any]) -> str:
    """The prompt alone against each batched trial."""
    record = load_record(BatchInvariancePrompt, data)
    rows = [
        [
            esc(t.trial),
            esc(t.position),
            esc(t.batch),
            esc(t.match),
            esc(t.first_divergence),
            num(t.max_logprob_diff),
        ]
        for t in record.trials
    ]
    parts = [
        facts(plain_data(record), ()),
        table(
            ["trial", "position", "batch", "match", "first divergence", "max logprob diff"], rows
        ),
    ]
    faults = record_faults(record)
    if faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in faults]))
    for t in record.trials:
        if not t.match:
            parts.append(
                side_by_side(
                    "alone",
                    record.alone.text,
                    f"trial {t.trial} (batch {t.batch})",
                    text_of(t.text),
                    t.first_divergence,
                )
            )
            if t.tie is not None:
                parts.append(f"<p>{esc(describe_tie(t.tie, ('alone', 'batched')))}</p>")
            break
    return "".join(parts)


BATCH_INVARIANCE = target_kind(
    "batch-invariance",
    BatchInvarianceSpec,
    BatchInvarianceRun,
    thresholds=BatchInvarianceThresholds,
    context=TargetContext,
    summarize=summarize,
    summary_lines=summary_lines,
    records={"prompt": BatchInvariancePrompt, "aggregate": BatchInvarianceAggregate},
    views={"prompt": batch_invariance_prompt},
    measures=(
        ("invariant prompts", ("invariant_prompts", "prompts"), rate),
        ("rate", ("rate",), num),
    ),
)
