"""The end-of-run terminal summary: each family of check kinds renders its aggregates (see
:attr:`..checks.framework.kind.CheckKind.summary_lines`), families in the registry's order. Only
the kinds that have aggregates are imported (kinds of one family share their table)."""

from __future__ import annotations

from typing import Any

from ..checks.framework.outcome import DEFERRED
from ..checks.registry import KIND_NAMES, kind_named
from ..metrics.degenerate import DegenerateTotal
from ..records import load_record


def summary_lines(records: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """The whole end-of-run summary from ``(aggregate node id, passed, record)``."""
    lines: list[str] = []
    present = {r["kind"] for _, _, r in records}
    found = [kind_named(name) for name in KIND_NAMES if name in present]
    kinds_here = [k for k in found if k is not None]
    for family in dict.fromkeys(k.present.family for k in kinds_here):
        kinds = [k for k in kinds_here if k.present.family == family]
        names = {k.name for k in kinds}
        group = [(n, p, r["data"]) for n, p, r in records if r["kind"] in names]
        if group:
            lines += kinds[0].present.summary_lines(group)
    deferred = [(n, r["gates_deferred_to"]) for n, _, r in records if r.get("gates_deferred_to")]
    if deferred:
        shard = deferred[0][1]
        lines.append(
            f"{DEFERRED.format(shard=shard)}: {len(deferred)} aggregate(s) above show this "
            "shard's part; the merge judges their suite gates"
        )
    return lines + degenerate_lines(records)


def degenerate_lines(records: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """``<aggregate>: degenerate: 3 of 40 generations (...)`` for each aggregate whose items
    found degenerate output; one line of the generations read when none did. Nothing when no
    aggregate read generations."""
    totals = [
        (nodeid, load_record(DegenerateTotal, r["degenerate"]))
        for nodeid, _, r in records
        if r.get("degenerate")
    ]
    found = [f"{nodeid}: {total.text}" for nodeid, total in totals if total.found]
    if found or not totals:
        return found
    return [f"degenerate: 0 of {sum(t.generations for _, t in totals)} generations"]
