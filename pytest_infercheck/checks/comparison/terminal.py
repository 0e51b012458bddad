"""The comparison kinds' terminal summary: one table of every comparison aggregate (a line
per check x suite, a row per test side under it), then each sweep's degradation cliff, every
line under 100 columns."""

from __future__ import annotations

import math
import textwrap
from typing import Any

from ...nodeid import NodeId
from ...render.table import render_table
from ..framework.kind import Aggregates
from .aggregate import SweepAggregateRecord, cliff_evidence
from .buckets import bucket_line
from .present import aggregate_record, side_verdicts, test_sides

COLUMNS = (
    ("check", "<"),
    ("suite", "<"),
    ("test", "<"),
    ("failed", ">"),
    ("identical", ">"),
    ("KL mean±SE", ">"),
    ("KL max", ">"),
    ("same-top", ">"),
    ("flips (CI)", ">"),
    ("verdict", "<"),
)
"""A row of :func:`summary_rows`; the terminal shows the columns from ``test`` on, under a
line per check x suite (:func:`summary_lines`), so that the table stays under 100 columns.
The KL median and p99 are in the aggregate item's text, the HTML report and the results."""
GROUPED = 2
"""The leading columns (check, suite) that :func:`summary_lines` writes once per group."""


def _num(value: float | None, fmt: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def summary_rows(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[list[str]]:
    """Rows of :data:`COLUMNS` from ``(aggregate node id, passed, aggregate data)``.

    ``failed`` is failed items of prompts (``9/60``); ``identical`` counts the prompts whose
    outputs are the same. The verdict is the side's (:func:`side_verdicts`): ``FAIL`` when the
    side broke a suite gate (a sweep level fails for its own gates only), an item errored or
    any of its items failed, else ``UNGATED`` when the check writes no gate (it passed, but
    checked nothing), else ``PASS``. A test side none of whose items has a record (they
    errored) is a row of dashes.
    """
    rows: list[list[str]] = []
    for nodeid, passed, data in aggregates:
        record = aggregate_record(data)
        node = NodeId.parse(nodeid)
        check = node.check if node is not None else record.check
        verdicts = {v.column: v.verdict for v in side_verdicts(data, passed, [])}
        for test, level in test_sides(record).items():
            verdict = verdicts[test].upper()
            if level is None:  # every item of this side errored
                dashes = ["-"] * (len(COLUMNS) - 4)
                rows.append([check, record.suite, test, *dashes, verdict])
                continue
            flips = (
                "-"
                if level.flip_rate is None
                else f"{level.n_flips}/{level.n_answered} "
                f"({level.flip_rate_low:.2f}-{level.flip_rate_high:.2f})"
            )
            rows.append(
                [
                    check,
                    record.suite,
                    level.test,
                    f"{level.n_failed}/{level.n_prompts}",
                    "-" if level.n_identical is None else f"{level.n_identical}/{level.n_prompts}",
                    f"{_num(level.kl_mean)}±{_num(level.kl_se, '.2g')}",
                    _num(level.kl_max),
                    _num(level.same_top_rate, ".3f"),
                    flips,
                    verdict,
                ]
            )
    return rows


def grouped_table(rows: list[list[str]], columns: tuple[tuple[str, str], ...]) -> list[str]:
    """``rows`` as one table whose first :data:`GROUPED` columns are written once per group,
    as a line of their own (``compare(bf16-vs-q4) addition:``), the rows indented under it;
    every row aligned with the others and with the header."""
    body = render_table([r[GROUPED:] for r in rows], columns[GROUPED:])
    lines = [f"  {body[0]}"]
    group: list[str] | None = None
    for row, line in zip(rows, body[1:], strict=True):
        if row[:GROUPED] != group:
            group = row[:GROUPED]
            lines.append(" ".join(group) + ":")
        lines.append(f"  {line}")
    return lines


def wrapped(line: str, width: int = 99) -> list[str]:
    """``line`` in lines of at most ``width`` columns, the later ones indented (a word longer
    than that stays whole)."""
    return textwrap.wrap(
        line, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    ) or [line]


def cliff_lines(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """``sweep(bf16) reasoning: degradation cliff: q4@local: failed items 0 -> 9 of 60 (...);
    mean KL ... crosses max_mean_kl`` for every sweep aggregate (the bare cliff for a record
    without its evidence, from an older results file)."""
    lines = []
    for nodeid, _, data in aggregates:
        record = aggregate_record(data)
        if isinstance(record, SweepAggregateRecord):
            node = NodeId.parse(nodeid)
            check = node.check if node is not None else record.check
            cliff = record.cliff
            if record.cliff_steps:
                cliff = cliff_evidence(record.cliff, record.cliff_steps, record.cliff_alpha)
            lines.append(f"{check} {record.suite}: degradation cliff: {cliff}")
    return lines


def bucket_lines(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """``diff(ladder) context-ladder: q4@local: KL by length: 0.5x 0 (0 flips, 0 failed) |
    ...`` for every test side whose prompts have buckets (:mod:`.buckets`)."""
    lines = []
    for nodeid, _, data in aggregates:
        record = aggregate_record(data)
        node = NodeId.parse(nodeid)
        check = node.check if node is not None else record.check
        for level in record.levels:
            if level.buckets:
                lines.append(f"{check} {record.suite}: {level.test}: {bucket_line(level.buckets)}")
    return lines


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One table for every comparison aggregate (a line per check x suite, a row per test
    side under it), then each sweep's degradation cliff and each side's KL by length
    (:func:`bucket_lines`), wrapped under 100 columns."""
    rows = summary_rows(aggregates)
    table = grouped_table(rows, COLUMNS) if rows else []
    notes = cliff_lines(aggregates) + bucket_lines(aggregates)
    return table + [w for line in notes for w in wrapped(line)]
