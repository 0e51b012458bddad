"""request-conformance's present facet: an item's text and JUnit properties, its HTML view
and the terminal table of the aggregates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...records import load_record
from ...render.markup import esc, kv_table, table
from ...render.table import check_table
from ...render.views import target_aggregate
from ..framework.kind import Aggregates, PresentFacet
from .records import ConformanceAggregate, ConformanceItem


def describe(record: ConformanceItem) -> str:
    """The probe's request, what conforms, and each answer."""
    if not record.asked and not record.answers:
        return f"probe {record.probe}: not sent"
    lines = [f"probe {record.probe}: asked {record.asked}; expected {record.expected}"]
    if record.reference is not None:
        lines.append(f"  greedy reference: {record.reference!r}")
    lines += [
        f"  {a.mode}: {a.text!r}, finish_reason {a.finish_reason}, {a.tokens} tokens"
        + (f", usage {a.prompt_tokens}/{a.completion_tokens}" if a.completion_tokens else "")
        + (f", {a.choices} choices" if a.choices != 1 else "")
        for a in record.answers
    ]
    lines += [f"  {n}" for n in record.notes]
    return "\n".join(lines)


def properties(record: ConformanceItem) -> list[tuple[str, Any]]:
    return [("infercheck_probe", record.probe), ("infercheck_findings", len(record.findings))]


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per request-conformance check x suite."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = load_record(ConformanceAggregate, data)
        total = {"conforming": 0, "failed": 0, "not sent": 0}
        for counts in record.probes.values():
            for key in total:
                total[key] += counts.get(key, 0)
        return [str(len(record.probes)), *(str(total[k]) for k in total)]

    columns = (("probes", ">"), ("conforming", ">"), ("failed", ">"), ("not sent", ">"))
    return check_table(aggregates, columns, cells)


def probe_view(data: Mapping[str, Any]) -> str:
    """The probe's request, the expected answer and each answer observed."""
    record = load_record(ConformanceItem, data)
    parts = [
        kv_table(
            {
                "probe": record.probe,
                "asked": record.asked,
                "expected": record.expected,
                "reference": record.reference,
            }
        )
    ]
    rows = [
        [esc(a.mode), esc(repr(a.text)), esc(a.finish_reason), esc(a.tokens), esc(a.choices)]
        for a in record.answers
    ]
    parts.append(table(["answer", "text", "finish", "tokens", "choices"], rows))
    if record.findings:
        parts.append(table(["finding"], [[esc(f)] for f in record.findings]))
    return "".join(parts)


PRESENT = PresentFacet(
    family="request-conformance",
    describe=describe,
    properties=properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate, "probe": probe_view},
)
