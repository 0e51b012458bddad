"""Fixed-width text tables for the terminal summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..nodeid import NodeId


def render_table(rows: list[list[str]], columns: tuple[tuple[str, str], ...]) -> list[str]:
    """Fixed-width lines for ``rows`` under ``columns`` (name, ``<`` or ``>`` alignment)."""
    headers = [name for name, _ in columns]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(w) if align == "<" else cell.rjust(w)
            for cell, w, (_, align) in zip(cells, widths, columns, strict=True)
        ).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def check_table(
    aggregates: list[tuple[str, bool, dict[str, Any]]],
    columns: tuple[tuple[str, str], ...],
    cells: Callable[[dict[str, Any]], list[str]],
    complete: Callable[[dict[str, Any]], bool] = lambda data: True,
) -> list[str]:
    """One row per check x suite: check, suite, target, ``cells(data)`` under ``columns``,
    and the verdict: ``PASS`` when the aggregate passed and ``complete(data)`` holds (e.g.
    every prompt deterministic, since a failed item does not fail its aggregate)."""
    rows = []
    for nodeid, passed, data in aggregates:
        node = NodeId.parse(nodeid)
        check, suite = (node.check, node.suite) if node is not None else (nodeid, "?")
        verdict = "PASS" if passed and complete(data) else "FAIL"
        rows.append([check, suite, str(data.get("target", "?")), *cells(data), verdict])
    head = (("check", "<"), ("suite", "<"), ("target", "<"))
    return render_table(rows, (*head, *columns, ("verdict", "<"))) if rows else []
