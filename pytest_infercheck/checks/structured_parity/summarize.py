"""structured-parity's summarize facet: the aggregate of a check x suite from its items'
records (sorted by name: the same for a live run and for merged shards; pure).

It counts differences by field, validity faults by kind, answers by path and items per
target, and names the paths the targets' probes found lacking. That an aggregate fails when
any item failed or errored is the framework's rule
(:func:`~pytest_infercheck.checks.framework.items.summarize_items`); this kind has no suite
gate of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...render.text import safe_text
from ...structured.results import FIELDS, INVALID_KINDS
from ..framework.items import RecordedItem, Summary
from .judge import failing_differences
from .records import (
    PathCounts,
    StructuredParityAggregate,
    StructuredParityContext,
    StructuredParityPrompt,
    TargetCounts,
)
from .spec import PATHS, REFERENCE, StructuredParityThresholds

COUNTED = {"answered": "answered", "unsupported": "unsupported", "not exercised": "not_exercised"}
"""A path result's status -> its count in :class:`~.records.PathCounts` (any other status,
``error`` or ``malformed``, counts as ``failed``)."""


def summarize(
    items: Sequence[RecordedItem],
    thresholds: StructuredParityThresholds,
    context: StructuredParityContext,
) -> Summary:
    """The aggregate of the items' records (see the module docstring): an item passed when
    it has no violation (as its run recorded them)."""
    ordered = sorted(items, key=lambda i: i.name)
    records: list[StructuredParityPrompt] = [i.record for i in ordered if i.record is not None]
    errors = {i.name: i.error or "error" for i in ordered if i.record is None}
    failed = sorted(i.name for i in ordered if i.record is None or i.violations)
    allowed = set(thresholds.allow)
    differences: dict[str, int] = {}
    invalid: dict[str, int] = {}
    unsupported: dict[str, str] = {}
    paths: dict[str, dict[str, int]] = {}
    for record in records:
        for result in record.results:
            counts = paths.setdefault(result.path, {})
            key = COUNTED.get(result.status, "failed")
            counts[key] = counts.get(key, 0) + 1
            for fault in result.invalid:
                invalid[fault.kind] = invalid.get(fault.kind, 0) + 1
            if result.status == "unsupported":
                unsupported.setdefault(f"{record.target} {result.path}", result.message or "")
        for comparison in record.comparisons:
            path = "cross-target" if comparison.reference != REFERENCE else comparison.side
            counts = paths.setdefault(path, {})
            if comparison.compared:
                counts["compared"] = counts.get("compared", 0) + 1
                fails = any(d.field not in allowed for d in comparison.differences)
                counts["differing"] = counts.get("differing", 0) + fails
            for d in comparison.differences:
                differences[d.field] = differences.get(d.field, 0) + 1
    order = [*PATHS, "cross-target"]
    data = StructuredParityAggregate(
        target=context.target,
        targets=list(context.targets),
        sides=list(context.sides),
        items=len(ordered),
        passed=len(ordered) - len(failed),
        failed=failed,
        n_errors=len(errors),
        errors=errors,
        differences={f: differences[f] for f in FIELDS if f in differences},
        failed_answers=sum(c.get("failed", 0) for c in paths.values()),
        allowed=sum(n for f, n in differences.items() if f in allowed),
        invalid={k: invalid[k] for k in INVALID_KINDS if k in invalid},
        unsupported=unsupported,
        paths={p: PathCounts(**paths[p]) for p in order if p in paths},
        per_target=per_target(ordered, thresholds, context.sides),
        engines=context.engines,
    )
    return Summary(data, [], aggregate_text(data), aggregate_properties(data))


def per_target(
    items: Sequence[RecordedItem], thresholds: StructuredParityThresholds, sides: Sequence[str]
) -> dict[str, TargetCounts]:
    """Each target's counts, by its label (an errored item's from its name: ``tu001[vllm]``,
    or the only target's)."""
    counts: dict[str, dict[str, int]] = {side: {} for side in sides}
    for item in items:
        record: StructuredParityPrompt | None = item.record
        if record is not None:
            side = record.side
        elif "[" in item.name:
            side = item.name.rpartition("[")[2].rstrip("]")
        else:
            side = sides[0] if sides else "?"
        c = counts.setdefault(side, {})
        c["items"] = c.get("items", 0) + 1
        c["passed"] = c.get("passed", 0) + (record is not None and not item.violations)
        if record is None:
            c["errors"] = c.get("errors", 0) + 1
            continue
        c["differences"] = c.get("differences", 0) + failing_differences(record, thresholds)
        c["invalid"] = c.get("invalid", 0) + sum(len(r.invalid) for r in record.results)
        c["unsupported"] = c.get("unsupported", 0) + sum(
            r.status == "unsupported" for r in record.results
        )
        c["errors"] = c.get("errors", 0) + sum(
            r.status in ("error", "malformed") for r in record.results
        )
    keys = ("items", "passed", "differences", "invalid", "unsupported", "errors")
    return {
        side: TargetCounts(**{k: c.get(k, 0) for k in keys})
        for side, c in counts.items()
        if c.get("items")
    }


def aggregate_text(data: StructuredParityAggregate) -> str:
    """The aggregate in words: items passing, differences by field, faults, lacking paths."""
    fields = ", ".join(f"{f} {n}" for f, n in data.differences.items()) or "none"
    faults = ", ".join(f"{k} {n}" for k, n in data.invalid.items()) or "none"
    lines = [
        f"{', '.join(data.targets)}: {data.passed}/{data.items} items pass; differences: "
        f"{fields}{f' ({data.allowed} allowed)' if data.allowed else ''}; invalid: {faults}; "
        f"{len(data.unsupported)} unsupported path(s); {data.failed_answers} failed answers, "
        f"{data.n_errors} errored items"
    ]
    for path, c in data.paths.items():
        skipped = f", {c.not_exercised} not exercised" if c.not_exercised else ""
        lines.append(
            f"  {path}: {c.answered} answered, {c.unsupported} unsupported{skipped}, "
            f"{c.failed} failed, {c.differing}/{c.compared} differing"
        )
    lines += [
        f"  unsupported: {where}: {safe_text(msg)}" for where, msg in data.unsupported.items()
    ]
    return "\n".join(lines)


def aggregate_properties(data: StructuredParityAggregate) -> list[tuple[str, Any]]:
    """JUnit properties of the aggregate."""
    return [
        ("infercheck_items", data.items),
        ("infercheck_passed", data.passed),
        ("infercheck_errors", data.n_errors),
        ("infercheck_failed_answers", data.failed_answers),
        ("infercheck_unsupported", len(data.unsupported)),
        ("infercheck_invalid", sum(data.invalid.values())),
        ("infercheck_differences", sum(data.differences.values())),
        *(
            (f"infercheck_differences_{f.replace('.', '_')}", n)
            for f, n in data.differences.items()
        ),
    ]
