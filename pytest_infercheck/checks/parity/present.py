"""The present facet of stream-parity and endpoint-parity: an item's JUnit properties, the
HTML views of its records, and the terminal table of the aggregates."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ...metrics.ties import describe_tie
from ...records import load_record
from ...render.markup import esc, kv_table, table
from ...render.table import check_table
from ...render.views import flip_cell, side_by_side
from ..framework.kind import Aggregates
from .records import EndpointParityAggregate, ParityAggregate, ParityIncomplete, ParityPrompt

R = TypeVar("R")
A = TypeVar("A", bound=ParityAggregate)


def properties(record: Any) -> list[tuple[str, Any]]:
    """An item's JUnit properties: whether its outputs match, their similarity, first
    divergence and answer flip; an item that compared nothing says why."""
    if isinstance(record, ParityIncomplete):
        return [
            ("infercheck_match", "None"),
            ("infercheck_unsupported", bool(record.unsupported)),
            ("infercheck_failed_requests", len(record.failures)),
        ]
    if not isinstance(record, ParityPrompt):
        return []
    return [
        ("infercheck_match", record.match),
        ("infercheck_similarity", record.similarity),
        ("infercheck_first_divergence", str(record.first_divergence)),
        ("infercheck_flip", str(record.flip)),
    ]


def _loaded(record_type: type[R], data: Mapping[str, Any]) -> R | None:
    """``data`` read as ``record_type``, or None when it is not one (an older results file)."""
    try:
        return load_record(record_type, data)
    except ValueError:
        return None


def _summary(aggregates: Aggregates, record_type: type[A], detail: Callable[[A], str]) -> list[str]:
    """The terminal table of parity aggregates of ``record_type`` (``?`` for a record that
    is not one); ``detail`` says what was compared."""

    def cells(data: dict[str, Any]) -> list[str]:
        record = _loaded(record_type, data)
        if record is None:
            return ["?"] * 4
        counts = (f"{record.n_match}/{record.items}", str(record.n_flips))
        return [detail(record), *counts, str(record.n_errors)]

    columns = (("compared", "<"), ("identical", ">"), ("flips", ">"), ("errors", ">"))
    return check_table(aggregates, columns, cells)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per stream-parity check x suite for the terminal summary."""
    return _summary(aggregates, ParityAggregate, lambda record: "streamed vs not")


def endpoint_summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per endpoint-parity check x suite for the terminal summary."""

    def detail(record: EndpointParityAggregate) -> str:
        return ", ".join(
            f"{e} {c.match}/{c.items}"
            + (f" ({c.unsupported} unsupported)" if c.unsupported else "")
            for e, c in record.endpoints.items()
        )

    return _summary(aggregates, EndpointParityAggregate, detail)


def parity_prompt(data: Mapping[str, Any]) -> str:
    """The two modes or endpoints side by side, their answers and whether they flipped."""
    record = load_record(ParityPrompt, data)
    ref, other = record.reference, record.other
    facts = {
        "prompt_id": record.prompt_id,
        "target": record.target,
        "match": record.match,
        "first_divergence": record.first_divergence,
        "divergence_unit": record.divergence_unit,
        "similarity": record.similarity,
        "flip": record.flip,
        "logprob_drift": record.logprob_drift,
    }
    parts = [
        kv_table(facts),
        side_by_side(ref.label, ref.text, other.label, other.text, record.first_divergence),
    ]
    if record.tie is not None:
        parts.append(f"<p>{esc(describe_tie(record.tie, (ref.label, other.label)))}</p>")
    if record.after_tie is not None:
        parts.append(f"<p>after the near-tie: {esc(record.after_tie)}</p>")
    if record.answers:
        cells = [esc(a) for a in record.answers[:2]] + [flip_cell(record.flip)]
        parts.append(table(["reference answer", "other answer", "flip"], [cells]))
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    return "".join(parts)


def parity_incomplete(data: Mapping[str, Any]) -> str:
    """An item that compared nothing: which sides failed (the server's message) or were
    not offered."""
    record = load_record(ParityIncomplete, data)
    facts = {
        "prompt_id": record.prompt_id,
        "target": record.target,
        "reference": record.reference,
        "other": record.other,
    }
    parts = [kv_table(facts)]
    if record.failures:
        parts.append(
            "<h4>failed requests</h4>" + table(["request"], [[esc(f)] for f in record.failures])
        )
    if record.unsupported:
        rows = [[esc(u)] for u in record.unsupported]
        parts.append("<h4>unsupported</h4>" + table(["path"], rows))
    return "".join(parts)


VIEWS = {"prompt": parity_prompt, "incomplete": parity_incomplete}
