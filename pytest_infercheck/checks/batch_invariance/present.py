"""How ``batch-invariance`` is shown: an item's report and JUnit properties, its HTML view,
the terminal table and the HTML summary's rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...metrics.ties import describe_tie
from ...records import load_record, plain_data
from ...render.markup import esc, num, rate, table
from ...render.table import check_table
from ...render.views import facts, side_by_side, target_aggregate, text_of
from ..framework.kind import Aggregates, PresentFacet
from .records import BatchInvarianceAggregate, BatchInvariancePrompt
from .trials import max_diff, record_faults


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
        if t.after_tie is not None:
            lines.append(f"    {t.after_tie.why}")
    return "\n".join(lines)


def properties(record: BatchInvariancePrompt) -> list[tuple[str, Any]]:
    """An item's JUnit properties."""
    return [
        ("infercheck_trials", len(record.trials)),
        ("infercheck_matching_trials", sum(t.match for t in record.trials)),
        ("infercheck_max_logprob_diff", max_diff(record.trials)),
    ]


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
            if t.after_tie is not None:
                parts.append(f"<p>{esc(t.after_tie.why)}</p>")
            break
    return "".join(parts)


PRESENT = PresentFacet(
    family="batch-invariance",
    describe=describe,
    properties=properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate, "prompt": batch_invariance_prompt},
    measures=(
        ("invariant prompts", ("invariant_prompts", "prompts"), rate),
        ("rate", ("rate",), num),
    ),
)
