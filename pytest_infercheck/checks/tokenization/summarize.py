"""The summarize facet of tokenization: the aggregate of a check x suite, a pure function of
its items' records and violations (the live run and ``pytest-infercheck report`` over shards
call it alike). It counts the items identical, count-only and differing (by cause, and the
allowed ones), those that compared nothing (a failed request) and errored, overall and per
other target. Its failed and errored items fail it (the framework's rule); the check has no
suite gates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...metrics.tokenization import Status
from ...specs import KindThresholds
from ..framework.items import RecordedItem, Summary
from ..framework.target import TargetContext
from .records import SideCounts, TokenizationAggregate, TokenizationIncomplete, TokenizationPrompt


@dataclass(frozen=True)
class TokenItem:
    """An item as its aggregate counts it: its record and its violations (empty: passed)."""

    record: TokenizationPrompt | TokenizationIncomplete
    violations: Sequence[str] = ()


Items = Mapping[str, TokenItem | str]
"""Items by name; a string is an item's error (it produced no record)."""


def _count(records: Iterable[TokenizationPrompt], status: Status) -> int:
    return sum(1 for r in records if r.status == status.value)


def count_items(
    target: str, identities: dict[str, dict[str, Any]], items: Items
) -> TokenizationAggregate:
    """The aggregate of ``items`` by name (a string is an item's error)."""
    done = {
        k: i.record
        for k, i in items.items()
        if isinstance(i, TokenItem) and isinstance(i.record, TokenizationPrompt)
    }
    incomplete = {
        k
        for k, i in items.items()
        if isinstance(i, TokenItem) and isinstance(i.record, TokenizationIncomplete)
    }
    errors = {k: i for k, i in items.items() if isinstance(i, str)}
    failed = sorted(k for k, i in items.items() if isinstance(i, str) or i.violations)
    by_cause: dict[str, int] = {}
    for record in done.values():
        if record.cause is not None:
            by_cause[record.cause] = by_cause.get(record.cause, 0) + 1
    sides: dict[str, list[str]] = {}
    for name in items:
        sides.setdefault(name.rpartition("[")[2].rstrip("]"), []).append(name)

    def of(names: list[str]) -> list[TokenizationPrompt]:
        return [done[n] for n in names if n in done]

    return TokenizationAggregate(
        target=target,
        items=len(items),
        identical=_count(done.values(), Status.IDENTICAL),
        count_only=_count(done.values(), Status.COUNT_ONLY),
        differing=_count(done.values(), Status.DIFFERS),
        allowed=sum(1 for r in done.values() if r.allowed),
        by_cause=dict(sorted(by_cause.items())),
        n_errors=len(errors),
        errors=errors,
        failed=failed,
        sides={
            label: SideCounts(
                items=len(names),
                identical=_count(of(names), Status.IDENTICAL),
                count_only=_count(of(names), Status.COUNT_ONLY),
                differing=_count(of(names), Status.DIFFERS),
                errors=sum(1 for n in names if n in errors),
                incomplete=sum(1 for n in names if n in incomplete),
            )
            for label, names in sides.items()
        },
        engines=identities,
        incomplete=len(incomplete),
    )


def aggregate_summary(record: TokenizationAggregate) -> Summary:
    """The aggregate's record, text and JUnit properties (its failed items: the framework's
    rule)."""
    causes = ", ".join(f"{c} {n}" for c, n in record.by_cause.items())
    incomplete = f", {record.incomplete} not compared" if record.incomplete else ""
    text = (
        f"{record.target}: {record.identical}/{record.items} identical, {record.count_only} "
        f"count-only, {record.differing} differing{f' ({causes})' if causes else ''}"
        f"{f', {record.allowed} allowed' if record.allowed else ''}{incomplete}, "
        f"{record.n_errors} errors"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_items", record.items),
        ("infercheck_identical", record.identical),
        ("infercheck_count_only", record.count_only),
        ("infercheck_differing", record.differing),
        ("infercheck_incomplete", record.incomplete),
        ("infercheck_errors", record.n_errors),
    ]
    return Summary(record, [], text, properties)


def summarize(
    items: Sequence[RecordedItem], thresholds: KindThresholds, context: TargetContext
) -> Summary:
    """The aggregate of the items (sorted by name: the same order for a live run and for
    merged shards), counted by their records and violations."""
    counted: dict[str, TokenItem | str] = {}
    for item in sorted(items, key=lambda i: i.name):
        if item.record is None:
            counted[item.name] = item.error or "error"
        else:
            counted[item.name] = TokenItem(item.record, item.violations)
    return aggregate_summary(count_items(context.target, context.engines, counted))
