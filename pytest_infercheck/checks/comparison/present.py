"""How the comparison kinds show what they measured: each item's HTML detail, the terminal
table, the rows and charts of the HTML summary, and the aggregate merged across shards."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from ...plain_data import plain as plain_data
from ...render.charts import line_chart
from ...render.markup import clip, esc, interval, is_number, num, plain, rate, table
from ...render.table import render_table
from ...render.views import engines, flip_cell, side_by_side, text_of
from ...specs import Thresholds
from ..protocol import Aggregates, BarSeries, Distribution, MeasureSpec
from .aggregate import aggregate, aggregate_violations, degradation_cliff
from .prompt import PromptComparison
from .run import SELF_CHECK


# -- an item's detail ---------------------------------------------------------------------------
def comparison_prompt(data: Mapping[str, Any]) -> str:
    """Baseline and test side by side, answers and flip, per-position KL chart."""
    method = data.get("method", "-")
    facts = [
        ("prompt", data.get("prompt_id")),
        ("method", method),
        ("similarity", num(data.get("similarity"))),
        ("severity", data.get("severity")),
        ("KL mean", num(data.get("kl_mean"), ".6g")),
        ("KL max", num(data.get("kl_max"), ".6g")),
        ("same-top rate", num(data.get("same_top_rate"))),
        ("finish", f"{data.get('base_finish', '-')} / {data.get('test_finish', '-')}"),
    ]
    parts = [
        table([esc(k) for k, _ in facts], [[esc(v) for _, v in facts]]),
        "<h4>prompt</h4>",
        f'<pre class="ic-text">{esc(clip(text_of(data.get("prompt_text"))))}</pre>',
        side_by_side(
            f"baseline: {data.get('baseline', '-')}",
            text_of(data.get("base_text")),
            f"test: {data.get('test', '-')}",
            text_of(data.get("test_text")),
            data.get("first_divergence"),
        ),
    ]
    if data.get("answer_kind") is not None:
        parts.append(
            table(
                ["answer kind", "reference", "baseline answer", "test answer", "flip"],
                [
                    [
                        esc(data.get("answer_kind")),
                        esc(data.get("reference", "-")),
                        esc(data.get("base_answer", "-")),
                        esc(data.get("test_answer", "-")),
                        flip_cell(data.get("flip")),
                    ]
                ],
            )
        )
    kl = data.get("kl_per_position") or []
    if kl:
        label = "lower bound, top-k" if method == "top-k-lower-bound" else str(method)
        parts.append(
            line_chart(
                [("KL_t", kl)],
                title=f"KL per position ({label})",
                x_label="position in the baseline's continuation",
                y_label="KL",
            )
        )
    return "".join(parts)


COMPARISON_COLUMNS: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
    ("test", lambda lv: esc(lv.get("test", "-"))),
    ("prompts", lambda lv: num(lv.get("n_prompts"))),
    ("failed items", lambda lv: num(lv.get("n_failed"))),
    (
        "flip rate [CI]",
        lambda lv: (
            f"{rate(lv.get('n_flips'), lv.get('n_answered'))} = "
            + interval(lv.get("flip_rate"), lv.get("flip_rate_low"), lv.get("flip_rate_high"))
        ),
    ),
    ("mean KL ± SE", lambda lv: f"{num(lv.get('kl_mean'), '.6g')} ± {num(lv.get('kl_se'), '.2g')}"),
    ("KL p99", lambda lv: num(lv.get("kl_p99"))),
    ("KL max", lambda lv: num(lv.get("kl_max"))),
    ("same-top rate", lambda lv: num(lv.get("same_top_rate"))),
    ("McNemar p", lambda lv: num(lv.get("mcnemar_p"), ".3g")),
    ("methods", lambda lv: plain(lv.get("methods", {}))),
]


def comparison_aggregate(data: Mapping[str, Any]) -> str:
    """One row per test side with the suite statistics; the engines compared."""
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    parts = [
        table(
            [esc(n) for n, _ in COMPARISON_COLUMNS],
            [[f(lv) for _, f in COMPARISON_COLUMNS] for lv in levels],
        )
    ]
    if data.get("cliff") is not None:
        parts.append(f"<p>degradation cliff: <b>{esc(data['cliff'])}</b></p>")
    return "".join(parts) + engines(data.get("engines"))


def self_check(data: Mapping[str, Any]) -> str:
    problems = data.get("problems") or []
    if not problems:
        return "<p>the baseline generated twice was identical</p>"
    return "<ul>" + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul>"


# -- terminal -----------------------------------------------------------------------------------
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


def cliff_lines(aggregates: list[tuple[str, bool, dict[str, Any]]]) -> list[str]:
    """``sweep(bf16) reasoning: degradation cliff: q4@local`` for every sweep aggregate."""
    lines = []
    for nodeid, _, data in aggregates:
        if "cliff" in data:
            parts = nodeid.split("::")
            lines.append(f"{parts[-3]} {data['suite']}: degradation cliff: {data['cliff']}")
    return lines


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One table for every comparison aggregate (a row per test side), then each sweep's
    degradation cliff."""
    return render_table(summary_rows(aggregates), COLUMNS) + cliff_lines(aggregates)


# -- HTML summary -------------------------------------------------------------------------------
MEASURES: tuple[MeasureSpec, ...] = (
    ("prompts", ("n_prompts",), num),
    ("failed items", ("n_failed",), num),
    ("flips", ("n_flips", "n_answered"), rate),
    ("flip rate [CI]", ("flip_rate", "flip_rate_low", "flip_rate_high"), interval),
    ("mean KL ± SE", ("kl_mean", "kl_se"), lambda m, se: f"{num(m, '.6g')} ± {num(se, '.2g')}"),
    ("KL median", ("kl_median",), num),
    ("KL p99", ("kl_p99",), num),
    ("KL max", ("kl_max",), num),
    ("same-top rate", ("same_top_rate",), num),
    ("delta-p mean / RMS", ("delta_p_mean", "delta_p_rms"), lambda m, r: f"{num(m)} / {num(r)}"),
    ("McNemar p", ("mcnemar_p",), lambda p: num(p, ".3g")),
    ("methods", ("methods",), lambda m: plain({} if m is None else m)),
)
"""The rows of a comparison's summary table (one column per test side)."""

FLIP_BARS = BarSeries(
    "flip rate by suite and test side",
    "rate",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    by_suite=True,
)
KL_DISTRIBUTION = Distribution(
    role="prompt",
    value="kl_mean",
    group="test",
    title="per-prompt mean KL",
    x_label="KL (log scale)",
)


def side_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per test side: ``q4@local``."""
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    return [(str(lv.get("test", "?")), lv) for lv in levels]


def level_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    labels = [str(lv.get("test", "?")) for lv in levels]

    def failure_rate(lv: Mapping[str, Any]) -> float | None:
        n, failed = lv.get("n_prompts"), lv.get("n_failed")
        return failed / n if is_number(n) and is_number(failed) and n else None

    return [
        line_chart(
            [
                ("failure rate", [failure_rate(lv) for lv in levels]),
                ("flip rate", [lv.get("flip_rate") for lv in levels]),
            ],
            title=f"degradation: {name}",
            x_labels=labels,
            y_label="rate",
        ),
        line_chart(
            [("mean KL", [lv.get("kl_mean") for lv in levels])],
            title=f"mean KL: {name}",
            x_labels=labels,
            y_label="KL",
        ),
    ]


# -- shards -------------------------------------------------------------------------------------
def _suite_of(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[0]


def merge_aggregate(
    nodeid: str, shards: list[tuple[int, dict[str, Any]]], items: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The aggregate of a comparison check x suite from the union of its prompt records (the
    check's thresholds applied to the union), or None when some shard's aggregate has no
    levels to follow (it errored)."""
    first = shards[0][1]
    if any("levels" not in item["data"] for _, item in shards):
        return None
    thresholds = Thresholds.model_validate(first["thresholds"])
    names = {f.name for f in dataclasses.fields(PromptComparison)}
    suite = _suite_of(nodeid)
    comparisons = [
        PromptComparison(**{k: v for k, v in item["data"].items() if k in names})
        for item in items
        if item["role"] == "prompt" and _suite_of(item["nodeid"]) == suite and item["data"]
    ]
    levels, violations = [], []
    for test in [level["test"] for level in first["data"]["levels"]]:
        results = [c for c in comparisons if c.test == test]
        if not results:
            return None
        agg = aggregate(results, thresholds)
        levels.append(agg)
        violations += [f"{agg.test}: {v}" for v in aggregate_violations(agg, thresholds)]
    engines: dict[str, Any] = {}
    for _, item in shards:
        engines.update(item["data"].get("engines") or {})
    data: dict[str, Any] = {**first["data"], "levels": [plain_data(a.to_dict()) for a in levels]}
    data["engines"] = engines
    if "cliff" in first["data"]:
        steps = [(SELF_CHECK, 0.0, 0.0)]
        steps += [(a.test, a.failure_rate, a.flip_rate or 0.0) for a in levels]
        data["cliff"] = degradation_cliff(steps) or "none"
    errored = [item for _, item in shards if item["outcome"] == "error"]
    outcome = "error" if errored else "failed" if violations else "passed"
    longrepr = "\n".join(violations) or None
    if errored:
        longrepr = "\n".join(str(item["longrepr"]) for item in errored)
    return {
        **first,
        "outcome": outcome,
        "duration_s": sum(item["duration_s"] for _, item in shards),
        "worker": None,
        "longrepr": longrepr,
        "violations": violations,
        "data": data,
    }
