"""structured-parity's present facet: an item's report and JUnit properties, its HTML views
(every model output escaped: it is untrusted), the terminal table and the HTML summary's
rows and columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...records import load_record, plain_data
from ...render.markup import clip, esc, kv_table, num, rate, table
from ...render.table import check_table
from ...render.text import safe_text
from ...render.views import engines
from ...structured.results import ChoiceRecord, PathResult
from ..framework.kind import Aggregates, MeasureSpec, PresentFacet
from .judge import differing_fields
from .records import StructuredParityAggregate, StructuredParityPrompt


def item_properties(record: StructuredParityPrompt) -> list[tuple[str, Any]]:
    """JUnit properties of an item."""
    return [
        ("infercheck_paths_answered", sum(r.status == "answered" for r in record.results)),
        ("infercheck_unsupported", sum(r.status == "unsupported" for r in record.results)),
        ("infercheck_invalid", sum(len(r.invalid) for r in record.results)),
        ("infercheck_differences", sum(len(c.differences) for c in record.comparisons)),
        ("infercheck_differing_fields", ",".join(differing_fields(record))),
    ]


def choice_text(choice: ChoiceRecord) -> str:
    """A choice in one line: finish reason, calls with their place, content, reasoning."""
    calls = ", ".join(
        c.shown() + ("" if c.place == "tool_calls" else " [in content]") for c in choice.calls
    )
    parts = [f"finish {choice.finish_reason!r}", f"calls [{calls}]"]
    if choice.content:
        parts.append(f"content {choice.content!r}")
    if choice.reasoning:
        parts.append(f"reasoning {choice.reasoning!r}")
    return ", ".join(parts)


def result_text(result: PathResult) -> str:
    """A path's answer in one or more lines (one per choice)."""
    if result.status != "answered":
        return f"{result.status}: {result.message}"
    usage = f"usage {result.prompt_tokens}/{result.completion_tokens}"
    if len(result.choices) == 1:
        return f"{choice_text(result.choices[0])}; {usage}"
    lines = [f"{len(result.choices)} choices; {usage}"]
    lines += [f"      {i + 1}: {choice_text(c)}" for i, c in enumerate(result.choices)]
    return "\n".join(lines)


def describe(record: StructuredParityPrompt) -> str:
    """The item's report: the request, each path's answer, each comparison's verdict."""
    facts = record.request
    lines = [
        f"prompt {record.prompt_id} on {record.target}: {safe_text(facts.prompt)}",
        f"  tools [{', '.join(facts.tools)}], tool_choice {facts.tool_choice}, "
        f"response_format {'yes' if facts.response_format else 'no'}, {facts.turns} turns"
        + (
            f" (turns {facts.filled} filled by {record.reference_target} chat)"
            if facts.filled
            else ""
        ),
    ]
    width = max(len(r.path) for r in record.results) if record.results else 4
    for result in record.results:
        lines.append(f"  {result.path:<{width}}: {safe_text(result_text(result), limit=2000)}")
        lines += [f"    note: {safe_text(n)}" for n in result.notes]
    if record.reference_chat is not None:
        lines.append(
            f"  {record.reference_target} chat: "
            f"{safe_text(result_text(record.reference_chat), limit=2000)}"
        )
    for c in record.comparisons:
        if not c.compared:
            verdict = f"not compared ({c.why_not})"
        elif c.differences:
            verdict = "differs: " + ", ".join(dict.fromkeys(d.field for d in c.differences))
        else:
            verdict = "identical"
        lines.append(f"  {c.side} vs {c.reference}: {safe_text(verdict)}")
        lines += [f"    {safe_text(n)}" for n in c.notes]
    return "\n".join(lines)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per structured-parity check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        try:
            record = load_record(StructuredParityAggregate, data)
        except ValueError:
            return ["?"] * 5
        fields = ", ".join(f"{f} {n}" for f, n in record.differences.items()) or "-"
        return [
            f"{record.passed}/{record.items}",
            fields,
            str(sum(record.invalid.values())),
            str(len(record.unsupported)),
            str(record.n_errors + record.failed_answers),
        ]

    columns = (
        ("passed", ">"),
        ("differences", "<"),
        ("invalid", ">"),
        ("unsupported", ">"),
        ("errors", ">"),
    )
    return check_table(aggregates, columns, cells)


def _cell(text: str | None, limit: int = 400) -> str:
    return "-" if not text else f"<code>{esc(clip(text, limit))}</code>"


def _result_rows(result: PathResult, title: str) -> list[list[str]]:
    if result.status != "answered":
        return [[esc(title), esc(result.status), "-", "-", _cell(result.message), "-", "-", "-"]]
    rows = []
    for i, choice in enumerate(result.choices):
        name = title if len(result.choices) == 1 else f"{title} choice {i + 1}"
        calls = "<br>".join(f"<code>{esc(c.shown())}</code> ({esc(c.place)})" for c in choice.calls)
        rows.append(
            [
                esc(name),
                esc(result.status),
                esc(choice.finish_reason if choice.finish_reason is not None else "-"),
                calls or "-",
                _cell(choice.content),
                _cell(choice.reasoning),
                esc(f"{result.prompt_tokens} / {result.completion_tokens}"),
                esc("; ".join(result.notes)) or "-",
            ]
        )
    return rows or [[esc(title), "no choices", "-", "-", "-", "-", "-", "-"]]


def structured_prompt(data: Mapping[str, Any]) -> str:
    """The request, each path's answer (calls, content, reasoning, usage), each comparison's
    differences and every validity fault; everything escaped (model output is untrusted)."""
    record = load_record(StructuredParityPrompt, data)
    parts = [
        kv_table(
            {
                "prompt_id": record.prompt_id,
                "target": record.target,
                "reference target": record.reference_target,
                **plain_data(record.request),
                **({"prompt ids": record.prompt_ids} if record.prompt_ids else {}),
            }
        )
    ]
    rows = [row for r in record.results for row in _result_rows(r, r.path)]
    if record.reference_chat is not None:
        rows += _result_rows(record.reference_chat, f"{record.reference_target} chat")
    headers = ["path", "status", "finish_reason", "calls", "content", "reasoning", "usage", "notes"]
    parts.append(table(headers, rows))
    rows = []
    for c in record.comparisons:
        if not c.compared:
            rows.append([esc(c.side), esc(c.reference), "not compared", esc(c.why_not)])
            continue
        if not c.differences:
            rows.append(
                [esc(c.side), esc(c.reference), "identical", esc("; ".join(c.notes)) or "-"]
            )
        for d in c.differences:
            rows.append([esc(d.side), esc(d.reference), f"<b>{esc(d.field)}</b>", esc(d.text)])
    parts.append("<h4>comparisons</h4>" + table(["side", "reference", "field", "detail"], rows))
    faults = [i for r in record.results for i in r.invalid]
    if faults:
        parts.append(
            "<h4>validity faults</h4>"
            + table(["kind", "fault"], [[esc(i.kind), esc(i.text)] for i in faults])
        )
    return "".join(parts)


def structured_aggregate(data: Mapping[str, Any]) -> str:
    """The counts by field, fault kind, path and target; refusals, errors and engines."""
    try:
        record = load_record(StructuredParityAggregate, data)
    except ValueError:
        return kv_table(data)
    parts = [
        kv_table(
            {
                "targets": ", ".join(record.targets),
                "items": record.items,
                "passed": record.passed,
                "errored items": record.n_errors,
                "failed answers": record.failed_answers,
                "allowed differences": record.allowed,
            }
        )
    ]
    if record.differences:
        rows = [[esc(f), esc(n)] for f, n in record.differences.items()]
        parts.append("<h4>differences by field</h4>" + table(["field", "differences"], rows))
    if record.invalid:
        rows = [[esc(k), esc(n)] for k, n in record.invalid.items()]
        parts.append("<h4>validity faults</h4>" + table(["kind", "faults"], rows))
    keys = ("answered", "unsupported", "not_exercised", "failed", "compared", "differing")
    rows = [[esc(p), *(esc(getattr(c, k)) for k in keys)] for p, c in record.paths.items()]
    parts.append("<h4>paths</h4>" + table(["path", *keys], rows))
    tkeys = ("items", "passed", "differences", "invalid", "unsupported", "errors")
    rows = [[esc(t), *(esc(getattr(c, k)) for k in tkeys)] for t, c in record.per_target.items()]
    parts.append("<h4>targets</h4>" + table(["target", *tkeys], rows))
    if record.unsupported:
        parts.append("<h4>unsupported</h4>" + kv_table(record.unsupported))
    if record.errors:
        parts.append("<h4>errors</h4>" + kv_table(record.errors))
    return "".join(parts) + engines(record.engines)


def target_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per target in the HTML summary (its counts); the data itself for data that
    is not an aggregate record."""
    try:
        record = load_record(StructuredParityAggregate, data)
    except ValueError:
        return [(str(data.get("target", "?")), data)]
    return [(label, plain_data(counts)) for label, counts in record.per_target.items()] or [
        (record.target, data)
    ]


MEASURES: tuple[MeasureSpec, ...] = (
    ("items passing", ("passed", "items"), rate),
    ("differences (failing)", ("differences",), num),
    ("validity faults", ("invalid",), num),
    ("unsupported answers", ("unsupported",), num),
    ("errors", ("errors",), num),
)


PRESENT = PresentFacet(
    family="structured-parity",
    describe=describe,
    properties=item_properties,
    summary_lines=summary_lines,
    views={"prompt": structured_prompt, "aggregate": structured_aggregate},
    measures=MEASURES,
    other_measures=False,
    columns=target_columns,
    headline="items passing",
)
