"""cache-parity's present facet: an item's text and JUnit properties, its HTML view, and the
terminal table of the aggregates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...metrics.ties import describe_tie
from ...records import load_record, plain_data
from ...render.markup import esc, table
from ...render.table import check_table
from ...render.views import facts, side_by_side, target_aggregate
from ..framework.kind import Aggregates, PresentFacet
from .records import CacheParityAggregate, CacheParityPrompt
from .spec import EXPECTS_HIT


def describe(record: CacheParityPrompt) -> str:
    """The item's report: the reference, then one line per exercised scenario (the
    framework adds how the reference was kept cold and what was not exercised)."""
    if record.reference_error is not None:
        lines = [f"reference ({record.reference_kind}): none: {record.reference_error}"]
    else:
        lines = [f"reference ({record.reference_kind}): {record.reference_text!r}"]
    for r in record.scenarios:
        if not r.exercised:
            continue
        verdict = "identical" if r.match else (r.error or f"differs at {r.first_divergence}")
        hit = f"{r.hit}" + (f" ({r.cached_tokens} cached tokens)" if r.cached_tokens else "")
        cache = "" if r.error is not None else f"; cache {hit}"
        lines.append(f"  {r.scenario}: {verdict}{cache}" + (f"; {r.note}" if r.note else ""))
        if r.hit == "no-hit" and r.scenario in EXPECTS_HIT:
            lines.append(f"    no cache hit: {r.scenario} did not exercise the cache")
    lines += record.notes
    return "\n".join(lines)


def properties(record: CacheParityPrompt) -> list[tuple[str, Any]]:
    """The item's JUnit properties: scenarios exercised, matching, without a hit, and the
    cached tokens of each one compared."""
    results = record.scenarios
    return [
        ("infercheck_scenarios", sum(r.exercised for r in results)),
        ("infercheck_matching_scenarios", sum(bool(r.match) for r in results)),
        ("infercheck_no_hit", sum(r.hit == "no-hit" for r in results)),
        *(
            (f"infercheck_cached_tokens_{r.scenario.replace('-', '_')}", r.cached_tokens)
            for r in results
            if r.exercised and r.error is None
        ),
    ]


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per cache-parity check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = load_record(CacheParityAggregate, data)
        counts = record.scenarios.values()
        return [
            f"{record.parity_prompts}/{record.prompts}",
            str(record.reference_kind),
            str(sum(c.no_hit for c in counts)),
            str(sum(c.not_exercised for c in counts)),
        ]

    columns = (("identical", ">"), ("reference", "<"), ("no hit", ">"), ("not exercised", ">"))
    return check_table(aggregates, columns, cells)


def prompt_view(data: Mapping[str, Any]) -> str:
    """The reference, a table of the scenarios, and each differing scenario beside it."""
    record = load_record(CacheParityPrompt, data)
    parts = [facts(plain_data(record), ("scenarios", "reference_faults", "reference_token_ids"))]
    rows = [
        [
            esc(r.scenario),
            "not exercised"
            if not r.exercised
            else ("failed" if r.error else ("identical" if r.match else "differs")),
            esc(r.hit or "-"),
            esc("-" if r.cached_tokens is None else str(r.cached_tokens)),
            esc(r.error or r.note or ""),
        ]
        for r in record.scenarios
    ]
    parts.append(table(["scenario", "verdict", "cache", "cached tokens", "note"], rows))
    faults = [*record.reference_faults, *(f for r in record.scenarios for f in r.faults)]
    if faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in faults]))
    for r in record.scenarios:
        if r.exercised and r.match is False and r.text is not None:
            ref = r.reference if r.reference is not None else record.reference_text
            parts.append(side_by_side("reference", ref, r.scenario, r.text, r.first_divergence))
            if r.tie is not None:
                parts.append(f"<p>{esc(describe_tie(r.tie, ('reference', r.scenario)))}</p>")
    return "".join(parts)


PRESENT = PresentFacet(
    family="cache-parity",
    describe=describe,
    properties=properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate, "prompt": prompt_view},
)
