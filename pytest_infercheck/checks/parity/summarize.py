"""The summarize facet of stream-parity and endpoint-parity: the aggregate of a check x
suite, a pure function of its items' records and violations (the live run and
``pytest-infercheck report`` over shards call it alike).

The aggregate counts the items (identical, differing, answer flips, errored, unsupported),
their divergence labels and, for endpoint-parity, each endpoint's items; it names the items
with faults, one line per kind of fault. Its failed and errored items fail it (the
framework's rule, :func:`~pytest_infercheck.checks.framework.items.summarize_items`); it has
no suite gates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...metrics.answers import FlipKind
from ...metrics.faults import aggregate_faults
from ...metrics.ties import count_labels
from ...render.text import counted
from ..framework.items import RecordedItem, Summary
from ..framework.target import TargetContext
from .records import (
    EndpointCounts,
    EndpointParityAggregate,
    EndpointParityContext,
    ParityAggregate,
    ParityIncomplete,
    ParityPrompt,
)
from .spec import EndpointParityThresholds, StreamParityThresholds


@dataclass(frozen=True)
class ParityItem:
    """An item as its aggregate counts it: its record and its violations (empty: passed)."""

    record: ParityPrompt | ParityIncomplete
    violations: Sequence[str] = ()


Items = Mapping[str, ParityItem | str]
"""Items by name; a string is an item's error (it produced no record)."""


def _unsupported(record: ParityPrompt | ParityIncomplete) -> bool:
    return isinstance(record, ParityIncomplete) and bool(record.unsupported)


def count_items(target: str, engines: dict[str, dict[str, Any]], items: Items) -> ParityAggregate:
    """The aggregate of ``items`` by name (a string is an item's error)."""
    failed = sorted(k for k, i in items.items() if isinstance(i, str) or i.violations)
    errors = {k: i for k, i in items.items() if isinstance(i, str)}
    records = [i.record for i in items.values() if isinstance(i, ParityItem)]
    done = [r for r in records if isinstance(r, ParityPrompt)]
    n_match = sum(1 for r in done if r.match)
    n_flips = sum(1 for r in done if r.flip is not None and FlipKind(r.flip).is_flip)
    return ParityAggregate(
        target=target,
        items=len(items),
        n_match=n_match,
        n_mismatch=len(done) - n_match,
        n_failed=len(failed),
        n_flips=n_flips,
        n_errors=len(errors),
        errors=errors,
        failed=failed,
        engines=engines,
        divergence_labels=count_labels([r.tie.divergence_label for r in done if r.tie is not None]),
        unsupported=sorted(
            k for k, i in items.items() if isinstance(i, ParityItem) and _unsupported(i.record)
        ),
    )


def endpoint_counts(items: Items) -> dict[str, EndpointCounts]:
    """Per endpoint (the ``[param]`` of each item name): its items, matches, failures and
    items not compared because the endpoint is lacking."""
    rows: dict[str, list[ParityItem | str]] = {}
    for name, item in items.items():
        rows.setdefault(name.rpartition("[")[2].rstrip("]"), []).append(item)
    return {
        endpoint: EndpointCounts(
            items=len(row),
            match=sum(
                1
                for i in row
                if isinstance(i, ParityItem)
                and isinstance(i.record, ParityPrompt)
                and i.record.match
            ),
            failed=sum(1 for i in row if isinstance(i, str) or i.violations),
            unsupported=sum(1 for i in row if isinstance(i, ParityItem) and _unsupported(i.record)),
        )
        for endpoint, row in rows.items()
    }


def item_faults(items: Items) -> list[str]:
    """The aggregate's lines naming the items with faults (``non-finite logprob in 2 of 20
    items: ...``)."""
    faulty = [
        (name, item.record.faults)
        for name, item in items.items()
        if isinstance(item, ParityItem)
        and isinstance(item.record, ParityPrompt)
        and item.record.faults
    ]
    return aggregate_faults(faulty, n_items=len(items), item_unit="items")


def aggregate_summary(record: ParityAggregate, faults: Sequence[str] = ()) -> Summary:
    """The aggregate's record, its fault lines (``faults``, :func:`item_faults`), text and
    JUnit properties (its failed items: the framework's rule)."""
    unsupported = f", {len(record.unsupported)} unsupported" if record.unsupported else ""
    text = (
        f"{record.target}: {record.n_match}/{record.items} identical, {record.n_flips} answer "
        f"flips, {record.n_errors} errors{unsupported}; "
        f"divergences {counted(record.divergence_labels)}"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_items", record.items),
        ("infercheck_match", record.n_match),
        ("infercheck_failed", record.n_failed),
        ("infercheck_flips", record.n_flips),
        ("infercheck_errors", record.n_errors),
        ("infercheck_unsupported", len(record.unsupported)),
        *(
            (f"infercheck_divergences_{label.replace('-', '_')}", n)
            for label, n in record.divergence_labels.items()
        ),
    ]
    return Summary(record, list(faults), text, properties)


def parity_items(items: Sequence[RecordedItem]) -> dict[str, ParityItem | str]:
    """The items by name, sorted (the same order for a live run and for merged shards): each
    record with its violations, or the item's error message."""
    out: dict[str, ParityItem | str] = {}
    for item in sorted(items, key=lambda i: i.name):
        if item.record is None:
            out[item.name] = item.error or "error"
        else:
            out[item.name] = ParityItem(item.record, item.violations)
    return out


def summarize_stream(
    items: Sequence[RecordedItem], thresholds: StreamParityThresholds, context: TargetContext
) -> Summary:
    """The stream-parity aggregate of the items (see the module docstring)."""
    counted = parity_items(items)
    return aggregate_summary(
        count_items(context.target, context.engines, counted), item_faults(counted)
    )


def summarize_endpoints(
    items: Sequence[RecordedItem],
    thresholds: EndpointParityThresholds,
    context: EndpointParityContext,
) -> Summary:
    """The endpoint-parity aggregate of the items, with the counts per endpoint."""
    counted = parity_items(items)
    record = EndpointParityAggregate(
        **vars(count_items(context.target, context.engines, counted)),
        reference=context.reference,
        endpoints=endpoint_counts(counted),
    )
    return aggregate_summary(record, item_faults(counted))
