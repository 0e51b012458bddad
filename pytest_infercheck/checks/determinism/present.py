"""How ``determinism`` is shown: an item's report and JUnit properties, its HTML view, the
terminal table and the HTML summary's rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...metrics.faults import EMPTY_GENERATION
from ...metrics.ties import describe_tie
from ...records import load_record, plain_data
from ...render.markup import esc, interval, num, plain, rate, table
from ...render.table import check_table
from ...render.views import facts, marked_text, side_by_side, target_aggregate
from ..framework.kind import Aggregates, BarSeries, PresentFacet
from .records import DeterminismAggregate, DeterminismPrompt

MAX_SHOWN_OUTPUTS = 5
MAX_SHOWN_DIVERGENCES = 12


def describe(record: DeterminismPrompt) -> str:
    """The item's report: counts, then each distinct output (escaped with ``repr``) with the
    runs that gave it, where it leaves the modal output and what followed a near-tie."""
    lines = [
        f"{record.runs} runs: modal share {record.modal_share:.4f}, "
        f"{record.distinct} distinct outputs, {record.errors} failed"
    ]
    for n, output in enumerate(record.outputs[:MAX_SHOWN_OUTPUTS]):
        marker = "modal" if n == 0 else f"#{n + 1}"
        empty = output.text == "" and any(f.fault == EMPTY_GENERATION for f in record.faults)
        note = f" ({EMPTY_GENERATION})" if empty else ""
        lines.append(f"  {marker} x{output.count}: {output.text!r}{note}")
        if output.tie is not None:
            lines.append(f"    {describe_tie(output.tie, ('modal', 'this'))}")
        if output.after_tie is not None:
            lines.append(f"    {output.after_tie.why}")
    if len(record.outputs) > MAX_SHOWN_OUTPUTS:
        lines.append(f"  ... {len(record.outputs) - MAX_SHOWN_OUTPUTS} more outputs")
    diverged = [f"run {i} at {d}" for i, d in enumerate(record.first_divergences) if d is not None]
    if diverged:
        more = len(diverged) - MAX_SHOWN_DIVERGENCES
        lines.append(
            "  first divergence from the modal output: "
            + ", ".join(diverged[:MAX_SHOWN_DIVERGENCES])
            + (f", ... {more} more" if more > 0 else "")
        )
    lines += [f"  {m}" for m in record.error_messages[:MAX_SHOWN_OUTPUTS]]
    return "\n".join(lines)


def properties(record: DeterminismPrompt) -> list[tuple[str, Any]]:
    """An item's JUnit properties."""
    return [
        ("infercheck_runs", record.runs),
        ("infercheck_modal_share", record.modal_share),
        ("infercheck_distinct", record.distinct),
        ("infercheck_errors", record.errors),
        ("infercheck_max_logprob_drift", record.max_logprob_drift),
    ]


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
        ("identical", ">"),  # prompts whose runs all gave the modal output
        ("score (95% CI)", ">"),
        ("errors", ">"),
        ("drift", ">"),  # largest logprob drift among runs with identical tokens
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
            if out.after_tie is not None:
                parts.append(f"<p>{esc(out.after_tie.why)}</p>")
    if record.first_divergences:
        parts.append(f"<h4>first divergences</h4>{plain(record.first_divergences)}")
    if record.error_messages:
        parts.append(f"<h4>error messages</h4>{plain(record.error_messages)}")
    return "".join(parts)


PRESENT = PresentFacet(
    family="determinism",
    describe=describe,
    properties=properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate, "prompt": determinism_prompt},
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
