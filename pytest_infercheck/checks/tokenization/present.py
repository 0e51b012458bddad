"""The present facet of tokenization: an item's JUnit properties, the HTML views of its
records, the terminal table of the aggregates and the columns of the HTML summary (one per
target tested against the reference)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...records import load_record, plain_data
from ...render.markup import esc, kv_table, num, rate, table
from ...render.table import check_table
from ...render.views import engines, side_by_side
from ..framework.kind import Aggregates, MeasureSpec
from .records import TokenizationAggregate, TokenizationIncomplete, TokenizationPrompt


def properties(record: Any) -> list[tuple[str, Any]]:
    """An item's JUnit properties: its status, cause and first differing position."""
    if isinstance(record, TokenizationIncomplete):
        return [("infercheck_status", "incomplete")]
    if not isinstance(record, TokenizationPrompt):
        return []
    return [
        ("infercheck_status", record.status),
        ("infercheck_cause", str(record.cause)),
        ("infercheck_first_difference", str(record.first_difference)),
    ]


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per tokenization check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        try:
            record = load_record(TokenizationAggregate, data)
        except ValueError:
            return ["?"] * 5
        causes = ", ".join(f"{c} {n}" for c, n in record.by_cause.items()) or "-"
        return [
            f"{record.identical}/{record.items}",
            str(record.count_only),
            str(record.differing),
            causes,
            str(record.n_errors),
        ]

    columns = (
        ("identical", ">"),
        ("count-only", ">"),
        ("differing", ">"),
        ("causes", "<"),
        ("errors", ">"),
    )
    return check_table(aggregates, columns, cells)


def tokenization_prompt(data: Mapping[str, Any]) -> str:
    """The verdict, the tokens from the first difference on both sides, and the rendered
    texts side by side; every text escaped."""
    record = load_record(TokenizationPrompt, data)
    facts = {
        "prompt_id": record.prompt_id,
        "status": record.status,
        "cause": record.cause,
        "allowed": record.allowed,
        "first_difference": record.first_difference,
        "explanation": record.explanation,
    }
    for name, side in (("reference", record.reference), ("other", record.other)):
        facts[name] = f"{side.target}: {side.count} tokens ({side.source})"
    if record.unsupported:
        facts["unsupported"] = "; ".join(record.unsupported)
    parts = [kv_table(facts)]
    if record.window:
        rows = [
            [
                esc(row.position),
                esc("-" if row.reference_id is None else row.reference_id),
                f"<code>{esc(row.reference_piece)}</code>",
                esc("-" if row.other_id is None else row.other_id),
                f"<code>{esc(row.other_piece)}</code>",
            ]
            for row in record.window
        ]
        ref, other = esc(record.reference.target), esc(record.other.target)
        parts.append(
            table(["position", f"{ref} id", f"{ref} text", f"{other} id", f"{other} text"], rows)
        )
    if record.reference.text is not None and record.other.text is not None:
        parts.append(
            side_by_side(
                record.reference.target,
                record.reference.text,
                record.other.target,
                record.other.text,
                record.first_difference,
            )
        )
    return "".join(parts)


def tokenization_aggregate(data: Mapping[str, Any]) -> str:
    """The counts (by cause and by other target), errors and engines."""
    shown = {k: v for k, v in data.items() if k not in ("engines", "errors", "sides")}
    parts = [kv_table(shown)]
    sides = data.get("sides")
    if isinstance(sides, Mapping) and sides:
        keys = ["items", "identical", "count_only", "differing", "incomplete", "errors"]
        rows = [
            [esc(label), *(esc(c.get(k, 0)) if isinstance(c, Mapping) else "-" for k in keys)]
            for label, c in sides.items()
        ]
        titles = [
            "items",
            "identical",
            "count-only (counts equal)",
            "differing",
            "not compared (a request failed)",
            "errors",
        ]
        parts.append(table(["target tested", *titles], rows))
    errors = data.get("errors")
    if isinstance(errors, Mapping) and errors:
        parts.append("<h4>errors</h4>" + kv_table(errors))
    return "".join(parts) + engines(data.get("engines"))


def tested_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per target tested against the reference in the HTML summary (its counts and
    the reference's label); the reference alone for data that is not an aggregate record."""
    try:
        record = load_record(TokenizationAggregate, data)
    except ValueError:
        return [(str(data.get("target", "?")), data)]
    return [
        (label, {**plain_data(counts), "reference": record.target})
        for label, counts in record.sides.items()
    ] or [(record.target, data)]


MEASURES: tuple[MeasureSpec, ...] = (
    ("against reference", ("reference",), lambda ref: esc("-" if ref is None else ref)),
    ("identical", ("identical", "items"), rate),
    ("count-only (counts equal)", ("count_only", "items"), rate),
    ("differing", ("differing", "items"), rate),
    ("errors", ("errors",), num),
)
"""The rows of a tokenization check's summary table (a column per target tested)."""


def tokenization_incomplete(data: Mapping[str, Any]) -> str:
    """An item that compared nothing: the requests that failed."""
    record = load_record(TokenizationIncomplete, data)
    facts = {"prompt_id": record.prompt_id, "reference": record.reference, "other": record.other}
    rows = [[esc(f)] for f in record.failures]
    return kv_table(facts) + "<h4>failed requests</h4>" + table(["request"], rows)


VIEWS = {
    "prompt": tokenization_prompt,
    "incomplete": tokenization_incomplete,
    "aggregate": tokenization_aggregate,
}
