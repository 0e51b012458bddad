"""How ``sampling`` is shown: an item's report and JUnit properties, the terminal table and
the HTML summary's rows."""

from __future__ import annotations

from typing import Any

from ...records import load_record
from ...render.markup import num
from ...render.table import check_table
from ...render.views import target_aggregate
from ..framework.kind import Aggregates, PresentFacet
from .evidence import said
from .records import SamplingAggregate, SamplingPosition, SamplingSeed


def describe(record: SamplingPosition | SamplingSeed) -> str:
    """A position: its parameters, the test and the token table; a seed item: its counts."""
    if isinstance(record, SamplingSeed):
        return (
            f"{said(record.params)}, seed {record.seed}: {record.alone_distinct} distinct "
            f"outputs alone, {record.together_distinct} with the requests at once; "
            f"{record.seeds} other seeds gave {record.seeds_distinct} distinct outputs"
        )
    head = (
        f"{said(record.params)} at position {record.position} "
        f"(after {len(record.context)} greedy tokens), {record.samples} draws from "
        f"{record.target}; expected: {record.reference}'s logprobs under {record.engine}'s "
        "semantics"
    )
    if record.not_measured is not None:
        return f"{head}\n  not measured: {record.not_measured}"
    lines = [
        head,
        f"  G {record.statistic:.4g} on {record.dof} dof, p {record.p_value:.3g} "
        f"(level alpha/m = {record.alpha:g}/{record.family}); support {record.support} "
        f"tokens ({len(record.boundary)} at the boundary, {record.pooled} pooled); "
        f"detects a total-variation departure of {record.detectable_tv:.3f} (80% power)",
    ]
    for t in record.tokens:
        exp = "boundary" if t.expected is None else f"{t.expected:.1f}"
        lines.append(f"  token {t.token} {t.text!r}: {t.count} drawn, {exp} expected")
    return "\n".join(lines)


def properties(record: SamplingPosition | SamplingSeed) -> list[tuple[str, Any]]:
    if isinstance(record, SamplingSeed):
        return [("infercheck_seed_distinct", record.together_distinct)]
    return [
        ("infercheck_samples", record.samples),
        ("infercheck_g", record.statistic),
        ("infercheck_p_value", record.p_value),
        ("infercheck_detectable_tv", record.detectable_tv),
    ]


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per sampling check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        r = load_record(SamplingAggregate, data)
        tv = "-" if r.max_detectable_tv is None else f"{r.max_detectable_tv:.3f}"
        low = "-" if r.min_p_value is None else f"{r.min_p_value:.3g}"
        return [f"{r.compared}/{r.positions}", str(len(r.holm_rejected)), low, tv, str(r.seeds)]

    def complete(data: dict[str, Any]) -> bool:
        r = load_record(SamplingAggregate, data)
        return not r.holm_rejected and r.compared == r.positions

    columns = (
        ("tested", ">"),
        ("rejected", ">"),
        ("min p", ">"),
        ("detectable TV", ">"),
        ("seed items", ">"),
    )
    return check_table(aggregates, columns, cells, complete)


PRESENT = PresentFacet(
    family="sampling",
    describe=describe,
    properties=properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate},
    measures=(
        ("positions tested", ("compared",), num),
        ("Holm-rejected", ("holm_rejected",), lambda v: str(len(v))),
        ("max detectable TV", ("max_detectable_tv",), num),
    ),
)
