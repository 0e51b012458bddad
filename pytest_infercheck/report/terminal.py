"""The end-of-run terminal table: one row per check x suite x test target."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..kinds import COMPARISON_KINDS

COLUMNS = (
    ("check", "<"),
    ("suite", "<"),
    ("test", "<"),
    ("prompts", ">"),
    ("failed", ">"),
    ("KL mean±SE", ">"),
    ("KL p99", ">"),
    ("KL max", ">"),
    ("same-top", ">"),
    ("flips (CI)", ">"),
    ("verdict", "<"),
)


def _num(value: float | None, fmt: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def summary_lines(records: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """The whole end-of-run summary from ``(aggregate node id, passed, record)``: one table
    for the comparisons (compare, sweep, diff), then each single-target kind's own lines."""
    comparisons = [(n, p, r["data"]) for n, p, r in records if r["kind"] in COMPARISON_KINDS]
    lines: list[str] = []
    if comparisons:
        lines += render_table(summary_rows(comparisons)) + cliff_lines(comparisons)
    kinds = dict.fromkeys(r["kind"] for _, _, r in records if r["kind"] not in COMPARISON_KINDS)
    if kinds:
        from ..checks.target import summary_lines as target_lines

        for kind in kinds:
            group = [(n, p, r["data"]) for n, p, r in records if r["kind"] == kind]
            lines += target_lines(kind, group)
    return lines


Aggregates = list[tuple[str, bool, dict[str, Any]]]
"""``(aggregate node id, passed, aggregate data)`` of one kind of check."""


def check_table(
    aggregates: Aggregates,
    columns: tuple[tuple[str, str], ...],
    cells: Callable[[dict[str, Any]], list[str]],
    complete: Callable[[dict[str, Any]], bool] = lambda data: True,
) -> list[str]:
    """One row per check x suite: check, suite, target, ``cells(data)`` under ``columns``,
    and the verdict: ``PASS`` when the aggregate passed and ``complete(data)`` holds (e.g.
    every prompt deterministic, since a failed item does not fail its aggregate)."""
    rows = []
    for nodeid, passed, data in aggregates:
        parts = nodeid.split("::")
        check, suite = (parts[-3], parts[-2]) if len(parts) >= 3 else (nodeid, "?")
        verdict = "PASS" if passed and complete(data) else "FAIL"
        rows.append([check, suite, str(data.get("target", "?")), *cells(data), verdict])
    head = (("check", "<"), ("suite", "<"), ("target", "<"))
    return render_table(rows, (*head, *columns, ("verdict", "<"))) if rows else []


def summary_rows(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[list[str]]:
    """Rows from ``(aggregate node id, passed, aggregate data)``.

    The verdict is ``FAIL`` when the suite gates failed or any of its items did.
    """
    rows: list[list[str]] = []
    for nodeid, passed, data in aggregates:
        parts = nodeid.split("::")
        check = parts[-3] if len(parts) >= 3 else data.get("check", "?")
        for level in data["levels"]:
            flips = (
                "-"
                if level["flip_rate"] is None
                else f"{level['n_flips']}/{level['n_answered']} "
                f"({level['flip_rate_low']:.2f}-{level['flip_rate_high']:.2f})"
            )
            rows.append(
                [
                    check,
                    data["suite"],
                    level["test"],
                    str(level["n_prompts"]),
                    str(level["n_failed"]),
                    f"{_num(level['kl_mean'])}±{_num(level['kl_se'], '.2g')}",
                    _num(level["kl_p99"]),
                    _num(level["kl_max"]),
                    _num(level["same_top_rate"], ".3f"),
                    flips,
                    "pass" if passed and level["n_failed"] == 0 else "FAIL",
                ]
            )
    return rows


def render_table(
    rows: list[list[str]], columns: tuple[tuple[str, str], ...] = COLUMNS
) -> list[str]:
    """Fixed-width lines for ``rows`` under ``columns`` (name, ``<`` or ``>`` alignment)."""
    headers = [name for name, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(w) if align == "<" else cell.rjust(w)
            for cell, w, (_, align) in zip(cells, widths, columns, strict=True)
        ).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def cliff_lines(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """``sweep(bf16) reasoning: degradation cliff: q4@local`` for every sweep aggregate."""
    lines = []
    for nodeid, _, data in aggregates:
        if "cliff" in data:
            parts = nodeid.split("::")
            lines.append(f"{parts[-3]} {data['suite']}: degradation cliff: {data['cliff']}")
    return lines
