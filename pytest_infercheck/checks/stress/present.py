"""How ``stress`` is shown: a level's report, JUnit properties and HTML view, the terminal
table of every level, and the HTML summary's columns (one per level) and charts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...metrics.ties import describe_tie
from ...nodeid import NodeId
from ...records import load_record, plain_data
from ...render.charts import line_chart
from ...render.markup import esc, kv_table, num, table
from ...render.table import render_table
from ...render.text import counted
from ...render.views import facts, side_by_side, target_aggregate
from ..framework.kind import PresentFacet
from .records import StressAggregate, StressLevel


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def level_row(data: StressLevel) -> list[str]:
    """One level as a row of :data:`COLUMNS`."""
    failed = sum(data.errors.values())
    kinds = ", ".join(f"{k} x{v}" for k, v in data.errors.items())
    return [
        f"c{data.level}",
        str(data.requests),
        f"{failed} ({kinds})" if failed else "0",
        f"{data.consistent}/{data.requests}",
        str(data.flips),
        _num(data.latency_p50_s, ".3f"),
        _num(data.latency_p95_s, ".3f"),
        _num(data.tokens_per_s, ".1f"),
        f"{_num(data.achieved_concurrency, '.2f')}/{data.max_in_flight}",
        "FAIL" if data.violations else "PASS",
    ]


COLUMNS = (
    ("level", "<"),
    ("requests", ">"),
    ("errors", ">"),
    ("consistent", ">"),
    ("flips", ">"),
    ("p50 s", ">"),
    ("p95 s", ">"),
    ("tok/s", ">"),
    ("in flight", ">"),  # mean (achieved concurrency) / max
    ("verdict", "<"),
)


def level_table(levels: Sequence[StressLevel]) -> list[str]:
    return render_table([level_row(d) for d in levels], COLUMNS)


def level_text(data: StressLevel) -> str:
    """The human-readable report of one level (model output shown as Python literals)."""
    lines = level_table([data])
    for side, count in data.sides.items():
        diff = "n/a" if count.logprob_diff is None else f"{count.logprob_diff:.3g}"
        lines.append(
            f"  {side}: {count.consistent}/{count.requests} equal to its output alone, "
            f"largest logprob difference {diff}"
        )
    for m in data.mismatches:
        who = f"{m.side} {m.prompt_id}" if m.side else m.prompt_id
        lines.append(
            f"  {who}: reference {m.reference!r} -> {m.output!r} (first "
            f"divergence at {m.unit} {m.first_divergence}{'; ' + m.fault if m.fault else ''})"
        )
        if m.tie is not None:
            lines.append(f"    {describe_tie(m.tie, ('reference', 'output'))}")
        if m.after_tie is not None:
            lines.append(f"    {m.after_tie.why}")
    if data.divergence_labels:
        lines.append(f"  divergences {counted(data.divergence_labels)}")
    return "\n".join(lines)


def level_properties(data: StressLevel) -> list[tuple[str, Any]]:
    """Scalar JUnit properties of one level."""
    keys = (
        "level",
        "requests",
        "error_rate",
        "consistency",
        "flips",
        "latency_p50_s",
        "latency_p95_s",
        "tokens_per_s",
        "achieved_concurrency",
        "max_in_flight",
        "measured_by",
    )
    return [(f"infercheck_{k}", getattr(data, k)) for k in keys]


def summary_lines(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """The end-of-run table of each stress aggregate: every level, whichever worker measured
    it (the aggregate's data carries all of them)."""
    lines: list[str] = []
    for nodeid, passed, data in aggregates:
        record = load_record(StressAggregate, data)
        node = NodeId.parse(nodeid)
        check, suite = (node.check, node.suite) if node is not None else (nodeid, "?")
        verdict = "PASS" if passed else "FAIL"
        lines.append(f"{check} {suite} on {record.target}: {verdict}")
        lines += [f"  {line}" for line in level_table(record.levels)]
    return lines


def stress_level(data: Mapping[str, Any]) -> str:
    """The level's numbers and the outputs that differed from the reference."""
    record = load_record(StressLevel, data)
    parts = [facts(plain_data(record), ())]
    if record.faults:
        parts.append("<h4>faults</h4>" + table(["fault"], [[esc(f.text)] for f in record.faults]))
    if record.errors:
        parts.append("<h4>errors</h4>" + kv_table(record.errors))
    for m in record.mismatches[:20]:
        parts.append(
            side_by_side(
                f"reference ({m.side + ' ' if m.side else ''}{m.prompt_id})",
                m.reference,
                f"at concurrency {record.level}",
                m.output,
                m.first_divergence,
            )
        )
        if m.tie is not None:
            parts.append(f"<p>{esc(describe_tie(m.tie, ('reference', 'output')))}</p>")
        if m.after_tie is not None:
            parts.append(f"<p>{esc(m.after_tie.why)}</p>")
    return "".join(parts)


def _aggregate_or_none(data: Mapping[str, Any]) -> StressAggregate | None:
    """The aggregate's record; None when ``data`` is not one (a results file of another
    version), which the summary then shows as one plain column and without charts."""
    try:
        return load_record(StressAggregate, data)
    except ValueError:
        return None


def level_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per level in the HTML summary table: ``q4@local c8`` (its numbers keyed by
    the :class:`StressLevel` fields)."""
    record = _aggregate_or_none(data)
    if record is None:
        return [(str(data.get("target", "?")), data)]
    return [(f"{record.target} c{lv.level}".strip(), plain_data(lv)) for lv in record.levels]


def level_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    record = _aggregate_or_none(data)
    if record is None:
        return []
    levels = record.levels
    labels = [str(lv.level) for lv in levels]
    return [
        line_chart(
            [
                ("p50", [lv.latency_p50_s for lv in levels]),
                ("p95", [lv.latency_p95_s for lv in levels]),
            ],
            title=f"latency: {name}",
            x_labels=labels,
            x_label="concurrency",
            y_label="s",
        ),
        line_chart(
            [
                ("consistency", [lv.consistency for lv in levels]),
                ("error rate", [lv.error_rate for lv in levels]),
            ],
            title=f"consistency: {name}",
            x_labels=labels,
            x_label="concurrency",
            y_label="rate",
        ),
    ]


PRESENT = PresentFacet(
    family="stress",
    describe=level_text,
    properties=level_properties,
    summary_lines=summary_lines,
    views={"aggregate": target_aggregate, "level": stress_level},
    measures=(
        ("requests", ("requests",), num),
        ("error rate", ("error_rate",), num),
        ("consistency", ("consistency",), num),
        ("flips", ("flips",), num),
        (
            "latency p50 / p95 (s)",
            ("latency_p50_s", "latency_p95_s"),
            lambda p50, p95: f"{num(p50, '.3g')} / {num(p95, '.3g')}",
        ),
        ("tokens/s", ("tokens_per_s",), lambda v: num(v, ".4g")),
        ("achieved concurrency", ("achieved_concurrency",), lambda v: num(v, ".3g")),
    ),
    columns=level_columns,
    headline="consistency",
    charts=level_charts,
)
