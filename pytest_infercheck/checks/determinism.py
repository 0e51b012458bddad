"""The ``determinism`` check: each prompt ``runs`` times at temperature 0 on one target.

An item (one per prompt) fails when its runs are not all identical (token ids where the
backend gives them, else text), when more of its runs errored than ``max_error_rate``
allows, when runs with identical tokens drift in logprobs by more than
``max_logprob_drift`` (a NaN drift never passes it), and on any fault of a run's own output
(:mod:`~pytest_infercheck.metrics.consistency`: ``non-finite logprob in run 3 at positions 2,
5 (NaN)``, ``logprob does not match its token ...``, ``empty generation: run 2 generated no
tokens while run 0 generated 3``), whatever the thresholds. The aggregate gates the suite's
determinism score (mean modal share, see
:func:`~pytest_infercheck.metrics.determinism.determinism_score`) with ``min_determinism`` on
the point estimate, and the error rate over all runs, and fails naming the prompts with
faults (``non-finite logprob in 2 of 20 prompts: r003 (run 3 at positions 2, 5), ...``).

Each non-modal output's first divergent token from the modal output is labelled
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``
(:mod:`~pytest_infercheck.metrics.ties`, margins from each run's own top-k or full rows),
counted per item and in the aggregate; with ``fail_on: decisive`` an item whose only fault is
distinct outputs that all part at a near-tie passes (the score still counts them).

HTTP backends get every selected prompt x run at once, bounded by their concurrency (so
runs of a prompt also overlap with each other); in-process backends loop.

Records (:attr:`~.protocol.CheckKind.records`): :class:`DeterminismPrompt` (role
``prompt``) and :class:`DeterminismAggregate` (role ``aggregate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..backends import BackendError
from ..metrics.consistency import EMPTY_GENERATION, Fault, aggregate_faults
from ..metrics.determinism import (
    DeterminismSummary,
    DistinctOutput,
    RunOutput,
    determinism_score,
    run_output,
    summarize_runs,
)
from ..metrics.finite import strict_max
from ..metrics.ties import count_labels, describe_tie
from ..records import OMIT_WHEN_EMPTY, load_record, plain_data
from ..render.markup import esc, interval, num, plain, rate, table
from ..render.table import check_table
from ..render.views import facts, marked_text, side_by_side
from ..specs import ErrorRate, TargetCheck, TieGates
from .protocol import (
    Aggregates,
    BarSeries,
    ItemPlan,
    Outcome,
    RecordedItem,
    Summary,
    TargetRun,
    records_of,
    target_kind,
)

if TYPE_CHECKING:
    from ..suites import Prompt

MAX_SHOWN_OUTPUTS = 5
MAX_SHOWN_DIVERGENCES = 12
SCORE_INTERVAL = "95% Wilson interval of the pooled share of runs equal to their modal"


@dataclass
class DeterminismPrompt:
    """The record of one prompt's item (role ``prompt``): its runs at temperature 0."""

    prompt_id: str
    target: str
    """The target's label (``q4@local``)."""
    runs: int
    """Runs made, failed ones included."""
    modal_share: float
    """Runs equal to the most frequent output / ``runs`` (a failed run counts against it)."""
    distinct: int
    """Distinct successful outputs."""
    errors: int
    """Failed runs."""
    error_messages: list[str]
    """``run <i>: <error>`` of each failed run."""
    first_divergences: list[int | None]
    """Per run: the first index (token, else character) where it leaves the modal output;
    None when it equals it or failed."""
    max_logprob_drift: float | None
    """Largest logprob spread at one position among runs with identical tokens; None when no
    two such runs expose logprobs."""
    outputs: list[DistinctOutput]
    """The distinct outputs, modal first, then by count and first appearance."""
    faults: list[Fault] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of the runs' own outputs (non-finite logprobs, logprobs that do not match their
    token, an empty generation among non-empty runs): each is a violation. The key is absent
    from the JSON when there are none."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The non-modal outputs' divergence labels counted (``{near-tie: 1, decisive: 0,
    unknown: 0}``, each output's in :attr:`DistinctOutput.tie`); absent when the runs do not
    diverge token by token."""


@dataclass
class DeterminismAggregate:
    """The record of a determinism check x suite (role ``aggregate``)."""

    target: str
    runs: int
    """Runs per prompt."""
    prompts: int
    """Prompts aggregated (the suite, or the shard's selection)."""
    deterministic_prompts: int
    """Prompts whose runs all succeeded and gave one output."""
    score: float
    """The determinism score: mean modal share over the prompts."""
    score_low: float
    """Lower bound of :attr:`interval`."""
    score_high: float
    """Upper bound of :attr:`interval`."""
    interval: str
    """What ``score_low``/``score_high`` bound (:data:`SCORE_INTERVAL`)."""
    errors: int
    """Failed runs over all prompts."""
    max_logprob_drift: float | None
    """The largest prompt's ``max_logprob_drift``; None when no prompt has one."""
    engines: dict[str, dict[str, Any]]
    """The target's engine identity, by target label."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The non-modal outputs' divergence labels counted over the prompts (absent in records
    made before labels)."""


class DeterminismSpec(TargetCheck):
    """Each prompt ``runs`` times at temperature 0."""

    runs: int = Field(default=10, ge=2)


class DeterminismThresholds(ErrorRate, TieGates):
    """``min_determinism``: suite gate on the determinism score (the mean over prompts of the
    share of runs equal to the modal output), on the point estimate. ``max_logprob_drift``:
    per item, the largest |logprob difference| among runs with identical tokens (None:
    reported only). ``max_error_rate``: per item and over all runs. ``tie_margin`` labels
    divergences; ``fail_on: decisive`` passes distinct outputs that all part at a near-tie
    (:class:`~pytest_infercheck.specs.TieGates`)."""

    min_determinism: float | None = Field(default=None, ge=0, le=1)
    max_logprob_drift: float | None = Field(default=None, ge=0)


@dataclass
class DeterminismContext:
    """What the aggregate takes besides the prompts' records (fields of
    :class:`DeterminismAggregate`)."""

    target: str
    runs: int
    engines: dict[str, dict[str, Any]]


@dataclass
class DeterminismRun(TargetRun[DeterminismSpec, DeterminismThresholds]):
    """The runs of every prompt, memoised per prompt on the run (shared by the suite's items
    and its aggregate)."""

    _summaries: dict[str, tuple[DeterminismSummary, list[str]]] = field(
        default_factory=dict, init=False, repr=False
    )
    """By prompt id: the summary of the prompt's runs and its failed runs' messages."""

    @property
    def runs(self) -> int:
        return self.spec.runs

    # -- per prompt ------------------------------------------------------------------------
    def result(self, prompt: Prompt) -> tuple[DeterminismSummary, list[str]]:
        """The summary of ``prompt``'s runs and its runs' error messages (memoised; the first
        call runs every selected prompt, so an HTTP backend gets them all at once)."""
        if prompt.id not in self._summaries:
            wanted = [p for p in self.suite.prompts if not self.selected or p.id in self.selected]
            self._compute([prompt, *wanted])
        return self._summaries[prompt.id]

    def _compute(self, prompts: list[Prompt]) -> None:
        """Run the prompts not yet memoised: concurrently first (HTTP), then collect."""
        todo = [p for p in dict.fromkeys(prompts) if p.id not in self._summaries]
        target = self.target
        jobs = [(self.render(p), self.params(p)) for p in todo]
        failures = self.cache.prefetch(target, jobs, runs=self.runs)
        if failures:
            # Failed runs on a server that is dying are its death (with its last log lines).
            self.cache.check_alive(target, after_failures=True)
        for prompt, (rendered, params) in zip(todo, jobs, strict=True):
            outputs: list[RunOutput | None] = []
            messages: list[str] = []
            for run in range(self.runs):
                error = failures.get((rendered.key(), params.key(), run))
                if error is None:
                    try:
                        g = self.cache.generate(target, rendered, params, run=run)
                    except BackendError as exc:
                        error = exc
                if error is not None:
                    outputs.append(None)
                    messages.append(f"run {run}: {error}")
                    continue
                outputs.append(run_output(g, run))
            summary = summarize_runs(outputs, self.thresholds.tie_margin)
            self._summaries[prompt.id] = (summary, messages)

    def run_item(self, plan: ItemPlan) -> Outcome:
        prompt = self.prompt(plan.key)
        summary, messages = self.result(prompt)
        violations = item_violations(summary, self.thresholds)
        data = DeterminismPrompt(
            prompt_id=prompt.id,
            target=self.target.label,
            runs=summary.runs,
            modal_share=summary.modal_share,
            distinct=summary.distinct,
            errors=summary.errors,
            error_messages=messages,
            first_divergences=summary.first_divergences,
            max_logprob_drift=summary.max_logprob_drift,
            outputs=summary.outputs,
            faults=summary.faults,
            divergence_labels=count_labels(summary.divergence_labels)
            if summary.divergence_labels
            else {},
        )
        properties: list[tuple[str, Any]] = [
            ("infercheck_runs", summary.runs),
            ("infercheck_modal_share", summary.modal_share),
            ("infercheck_distinct", summary.distinct),
            ("infercheck_errors", summary.errors),
            ("infercheck_max_logprob_drift", summary.max_logprob_drift),
        ]
        return Outcome(
            violations,
            describe(summary, messages),
            data,
            properties,
            degenerate=summary.degenerate,
        )

    # -- suite level -------------------------------------------------------------------------
    def prepare(self, plans: list[ItemPlan]) -> None:
        """Every prompt the aggregate covers, run at once (an HTTP backend gets them all)."""
        self._compute([self.prompt(plan.key) for plan in plans])

    def context(self) -> DeterminismContext:
        target = self.target
        return DeterminismContext(
            target.label, self.runs, {target.label: target.backend.identity()}
        )


def summarize(
    items: Sequence[RecordedItem], thresholds: DeterminismThresholds, context: DeterminismContext
) -> Summary:
    """The aggregate of the prompts' records: the determinism score (mean modal share, with
    the Wilson interval of the pooled share), deterministic prompts, failed runs, the largest
    drift; violations: errored items, prompts with faults, then the suite gates
    (:func:`determinism_gates`)."""
    prompts: list[DeterminismPrompt] = records_of(items, "prompt")
    summaries = [summary_of(p) for p in prompts]
    score, low, high = determinism_score(summaries)
    runs = sum(s.runs for s in summaries)
    errors = sum(s.errors for s in summaries)
    drifts = [s.max_logprob_drift for s in summaries if s.max_logprob_drift is not None]
    deterministic = sum(s.deterministic for s in summaries)
    faulty = [(p.prompt_id, p.faults) for p in prompts if p.faults]
    violations = aggregate_faults(faulty, n_items=len(summaries))
    violations += determinism_gates(score, low, high, errors, runs, thresholds)
    data = DeterminismAggregate(
        target=context.target,
        runs=context.runs,
        prompts=len(summaries),
        deterministic_prompts=deterministic,
        score=score,
        score_low=low,
        score_high=high,
        interval=SCORE_INTERVAL,
        errors=errors,
        max_logprob_drift=strict_max(drifts),
        engines=context.engines,
        divergence_labels=count_labels([x for s in summaries for x in s.divergence_labels]),
    )
    text = (
        f"{context.target}: {deterministic}/{len(summaries)} prompts deterministic over "
        f"{context.runs} runs; score {score:.4f} (95% CI {low:.4f}-{high:.4f}); "
        f"{errors} failed runs; {len(faulty)} prompts with faults; "
        f"divergences {data.divergence_labels}"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_determinism_score", score),
        ("infercheck_determinism_score_low", low),
        ("infercheck_determinism_score_high", high),
        ("infercheck_deterministic_prompts", deterministic),
        ("infercheck_errors", errors),
        ("infercheck_max_logprob_drift", data.max_logprob_drift),
        *(
            (f"infercheck_divergences_{label.replace('-', '_')}", n)
            for label, n in data.divergence_labels.items()
        ),
    ]
    return Summary(data, violations, text, properties)


def item_violations(summary: DeterminismSummary, thresholds: DeterminismThresholds) -> list[str]:
    """Why one prompt fails: its runs' faults (each named), distinct outputs, more failed runs
    than ``max_error_rate``, logprob drift among runs with identical tokens above
    ``max_logprob_drift`` or not finite. Distinct outputs do not fail the item under
    ``fail_on: decisive`` when every non-modal output parts from the modal one at a
    ``near-tie``."""
    violations = [f.text for f in summary.faults]
    max_error_rate = thresholds.max_error_rate
    labels = summary.divergence_labels
    near_ties = (
        thresholds.fail_on == "decisive"
        and len(labels) == summary.distinct - 1
        and all(x == "near-tie" for x in labels)
    )
    if summary.distinct > 1 and not near_ties:
        violations.append(
            f"{summary.distinct} distinct outputs in {summary.runs} runs "
            f"(modal share {summary.modal_share:.4f})"
        )
    if summary.runs and summary.errors / summary.runs > max_error_rate:
        violations.append(
            f"{summary.errors}/{summary.runs} runs failed (max_error_rate {max_error_rate})"
        )
    limit = thresholds.max_logprob_drift
    drift = summary.max_logprob_drift
    if limit is not None and drift is not None and not drift <= limit:
        violations.append(
            f"logprob drift {drift:.3g} among runs with identical tokens "
            f"{'> ' if math.isfinite(drift) else 'is not finite: fails '}"
            f"max_logprob_drift {limit}"
        )
    return violations


def describe(summary: DeterminismSummary, messages: list[str]) -> str:
    """The item's report: counts, then each distinct output (escaped with ``repr``) with the
    runs that gave it and where they left the modal output."""
    lines = [
        f"{summary.runs} runs: modal share {summary.modal_share:.4f}, "
        f"{summary.distinct} distinct outputs, {summary.errors} failed"
    ]
    for n, output in enumerate(summary.outputs[:MAX_SHOWN_OUTPUTS]):
        marker = "modal" if n == 0 else f"#{n + 1}"
        empty = output.text == "" and any(f.fault == EMPTY_GENERATION for f in summary.faults)
        note = f" ({EMPTY_GENERATION})" if empty else ""
        lines.append(f"  {marker} x{output.count}: {output.text!r}{note}")
        if output.tie is not None:
            lines.append(f"    {describe_tie(output.tie, ('modal', 'this'))}")
    if len(summary.outputs) > MAX_SHOWN_OUTPUTS:
        lines.append(f"  ... {len(summary.outputs) - MAX_SHOWN_OUTPUTS} more outputs")
    diverged = [f"run {i} at {d}" for i, d in enumerate(summary.first_divergences) if d is not None]
    if diverged:
        more = len(diverged) - MAX_SHOWN_DIVERGENCES
        lines.append(
            "  first divergence from the modal output: "
            + ", ".join(diverged[:MAX_SHOWN_DIVERGENCES])
            + (f", ... {more} more" if more > 0 else "")
        )
    lines += [f"  {m}" for m in messages[:MAX_SHOWN_OUTPUTS]]
    return "\n".join(lines)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per determinism check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = load_record(DeterminismAggregate, data)
        drift = record.max_logprob_drift
        return [
            str(record.runs),
            f"{record.deterministic_prompts}/{record.prompts}",
            f"{record.score:.4f} ({record.score_low:.3f}-{record.score_high:.3f})",
            str(record.errors),
            "-" if drift is None else f"{drift:.3g}",
        ]

    def complete(data: dict[str, Any]) -> bool:
        record = load_record(DeterminismAggregate, data)
        return record.deterministic_prompts == record.prompts

    columns = (
        ("runs", ">"),
        ("deterministic", ">"),
        ("score (95% CI)", ">"),
        ("errors", ">"),
        ("max drift", ">"),
    )
    return check_table(aggregates, columns, cells, complete)


def determinism_prompt(data: Mapping[str, Any]) -> str:
    """Run counts and each distinct output, the modal one first, against the modal one."""
    record = load_record(DeterminismPrompt, data)
    outputs = sorted(record.outputs, key=lambda o: -o.count)
    parts = [facts(plain_data(record), ())]
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    modal = outputs[0].text if outputs else ""
    for k, out in enumerate(outputs):
        title = f"output {k + 1}: {out.count} of {record.runs} runs"
        if k == 0:
            parts.append(f"<h4>{esc(title)} (modal)</h4>")
            parts.append(marked_text(modal, None))
        else:
            parts.append(side_by_side("modal output", modal, title, out.text))
            if out.tie is not None:
                parts.append(f"<p>{esc(describe_tie(out.tie, ('modal', 'this')))}</p>")
    if record.first_divergences:
        parts.append(f"<h4>first divergences</h4>{plain(record.first_divergences)}")
    if record.error_messages:
        parts.append(f"<h4>error messages</h4>{plain(record.error_messages)}")
    return "".join(parts)


def determinism_gates(
    score: float,
    low: float,
    high: float,
    errors: int,
    runs: int,
    thresholds: DeterminismThresholds,
) -> list[str]:
    """The suite gates: the determinism score against ``min_determinism`` (the point
    estimate), the failed runs over all runs against ``max_error_rate``."""
    violations = []
    minimum = thresholds.min_determinism
    if minimum is not None and score < minimum:
        violations.append(
            f"determinism score {score:.4f} < min_determinism {minimum} "
            f"(95% Wilson interval {low:.4f}-{high:.4f})"
        )
    if runs and errors / runs > thresholds.max_error_rate:
        violations.append(
            f"{errors}/{runs} runs failed: error rate {errors / runs:.4f} > "
            f"max_error_rate {thresholds.max_error_rate}"
        )
    return violations


def summary_of(record: DeterminismPrompt) -> DeterminismSummary:
    """A prompt's summary read back from its record (the modal output is the first)."""
    return DeterminismSummary(
        runs=record.runs,
        errors=record.errors,
        modal_count=record.outputs[0].count if record.outputs else 0,
        distinct=record.distinct,
        first_divergences=record.first_divergences,
        max_logprob_drift=record.max_logprob_drift,
        outputs=record.outputs,
    )


DETERMINISM = target_kind(
    "determinism",
    DeterminismSpec,
    DeterminismRun,
    thresholds=DeterminismThresholds,
    context=DeterminismContext,
    summarize=summarize,
    summary_lines=summary_lines,
    records={"prompt": DeterminismPrompt, "aggregate": DeterminismAggregate},
    views={"prompt": determinism_prompt},
    measures=(
        ("runs per prompt", ("runs",), num),
        ("deterministic prompts", ("deterministic_prompts", "prompts"), rate),
        ("determinism score [CI]", ("score", "score_low", "score_high"), interval),
        ("errors", ("errors",), num),
        ("max logprob drift", ("max_logprob_drift",), num),
    ),
    bars=BarSeries("determinism score", "score", "score", "score_low", "score_high"),
    headline="determinism score [CI]",
)
