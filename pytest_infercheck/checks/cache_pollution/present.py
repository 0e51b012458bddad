"""cache-pollution's present facet: an item's text and JUnit properties, its HTML view, and
the terminal table of the aggregates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...records import load_record
from ...render.markup import esc, kv_table, table
from ...render.table import check_table
from ...render.text import mark_divergence
from ...render.views import side_by_side, target_aggregate
from ..framework.kind import Aggregates, PresentFacet
from .records import CachePollutionAggregate, HostileRecord


def describe(record: HostileRecord) -> str:
    """The hostile request's answer, the server's health after it, and each changed output
    with its first divergence marked."""
    lines = [
        f"hostile request {record.hostile}: {record.response}",
        f"server alive: {record.alive}",
    ]
    lines += [
        f"  {c.prompt_id}: before {mark_divergence(c.before, c.after)}"
        f" | after {mark_divergence(c.after, c.before)}"
        for c in record.changed
    ]
    return "\n".join(lines)


def properties(record: HostileRecord) -> list[tuple[str, Any]]:
    return [
        ("infercheck_alive", record.alive),
        ("infercheck_changed", len(record.changed)),
        ("infercheck_prompts", record.prompts),
    ]


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per cache-pollution check x suite for the terminal summary (``?`` for a
    record that is not a :class:`CachePollutionAggregate`)."""

    def cells(data: dict[str, Any]) -> list[str]:
        try:
            record = load_record(CachePollutionAggregate, data)
        except ValueError:
            return ["?"] * 4
        return [
            str(n) for n in (record.n_hostile, record.prompts, record.n_dead, record.n_polluted)
        ]

    columns = (("hostile", ">"), ("prompts", ">"), ("died", ">"), ("changed", ">"))
    return check_table(aggregates, columns, cells)


def hostile_view(data: Mapping[str, Any]) -> str:
    """The hostile request's fate and every prompt whose output changed after it."""
    record = load_record(HostileRecord, data)
    facts = {
        "target": record.target,
        "hostile": record.hostile,
        "response": record.response,
        "alive": record.alive,
        "prompts": record.prompts,
    }
    if record.failure is not None:
        facts["failure"] = record.failure
    parts = [kv_table(facts)]
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    for c in record.changed[:20]:
        parts.append(
            side_by_side(
                f"before ({c.prompt_id})",
                c.before,
                "after the hostile request",
                c.after,
                c.first_divergence,
            )
        )
    return "".join(parts)


PRESENT = PresentFacet(
    family="cache-pollution",
    describe=describe,
    properties=properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate, "hostile": hostile_view},
)
