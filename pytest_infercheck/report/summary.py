"""The summary section: one table per check x suite and the charts, for one or more runs.

A table has a row per measure and a column per run x test side (a sweep's levels, a stress
check's concurrencies), so two runs (old engine, new engine) read side by side. Measures of
comparisons: failed items, flip rate with its interval (the check's confidence, 95% unless
set), mean KL +- SE (clustered by prompt), KL p99 and max, same-top rate; of single-target
kinds: their own known measures, then every other scalar the aggregate recorded.

Charts: flip rate by suite and test side (Wilson interval as error bars), the distribution
of per-prompt mean KL (log10 bins, KL = 0 apart), a sweep's degradation across its levels,
stress latency and consistency against concurrency, determinism scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kinds import COMPARISON_KINDS
from .charts import bar_chart, histogram, line_chart
from .markup import esc, interval, is_number, kv_table, mapping, num, plain, rate
from .views import engines

MAX_KL_CHARTS = 24
"""KL distribution charts drawn at most (one per run x check x suite x test side)."""
MAX_BARS = 40


@dataclass
class RunView:
    """One run's items as the report sees them: dicts with the record's keys (check, kind,
    suite, role, name, thresholds, violations, data) plus ``nodeid`` and ``outcome``."""

    label: str
    items: Sequence[Mapping[str, Any]]
    engines: Mapping[str, Any] = field(default_factory=dict)
    """Engine identities by target label; empty: those recorded by the aggregates."""


Measure = tuple[str, Callable[[Mapping[str, Any]], str]]

COMPARISON_MEASURES: list[Measure] = [
    ("prompts", lambda c: num(c.get("n_prompts"))),
    ("failed items", lambda c: num(c.get("n_failed"))),
    ("flips", lambda c: rate(c.get("n_flips"), c.get("n_answered"))),
    (
        "flip rate [CI]",
        lambda c: interval(c.get("flip_rate"), c.get("flip_rate_low"), c.get("flip_rate_high")),
    ),
    ("mean KL ± SE", lambda c: f"{num(c.get('kl_mean'), '.6g')} ± {num(c.get('kl_se'), '.2g')}"),
    ("KL median", lambda c: num(c.get("kl_median"))),
    ("KL p99", lambda c: num(c.get("kl_p99"))),
    ("KL max", lambda c: num(c.get("kl_max"))),
    ("same-top rate", lambda c: num(c.get("same_top_rate"))),
    ("delta-p mean / RMS", lambda c: f"{num(c.get('delta_p_mean'))} / {num(c.get('delta_p_rms'))}"),
    ("McNemar p", lambda c: num(c.get("mcnemar_p"), ".3g")),
    ("methods", lambda c: plain(c.get("methods", {}))),
]

MeasureSpec = tuple[str, tuple[str, ...], Callable[..., str]]
"""A row of a single-target table: title, the data keys it reads, and how it shows them."""

_KNOWN: dict[str, list[MeasureSpec]] = {
    "determinism": [
        ("runs per prompt", ("runs",), num),
        ("deterministic prompts", ("deterministic_prompts", "prompts"), rate),
        ("determinism score [CI]", ("score", "score_low", "score_high"), interval),
        ("errors", ("errors",), num),
        ("max logprob drift", ("max_logprob_drift",), num),
    ],
    "stress": [
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
    ],
    "batch-invariance": [
        ("invariant prompts", ("invariant_prompts", "prompts"), rate),
        ("rate", ("rate",), num),
    ],
}


def _measure(spec: MeasureSpec) -> Measure:
    title, keys, show = spec
    return title, lambda c: show(*(c.get(k) for k in keys))


KNOWN_MEASURES: dict[str, list[Measure]] = {
    kind: [_measure(spec) for spec in specs] for kind, specs in _KNOWN.items()
}
_USED_KEYS = {kind: {k for _, keys, _ in specs for k in keys} for kind, specs in _KNOWN.items()}
_NOT_MEASURES = {"target", "level", "engines", "levels", "check", "suite", "baseline", "test"}


def columns(item: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(column title, numbers)`` of an aggregate item: one per comparison level or stress
    level, else one for the target."""
    data = mapping(item.get("data"))
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    if item.get("kind") in COMPARISON_KINDS:
        return [(str(lv.get("test", "?")), lv) for lv in levels]
    if levels:
        return [(f"{data.get('target', '')} c{lv.get('level', '?')}".strip(), lv) for lv in levels]
    return [(str(data.get("target", item.get("name", "?"))), data)]


def measures(kind: Any, cols: list[Mapping[str, Any]]) -> list[Measure]:
    """The rows of a check x suite table: the kind's known measures, then any other scalar
    recorded by any column (so a kind this module does not know still shows its numbers)."""
    if kind in COMPARISON_KINDS:
        return COMPARISON_MEASURES
    known = list(KNOWN_MEASURES.get(kind, []))
    used = _USED_KEYS.get(kind, set()) | _NOT_MEASURES
    extra = dict.fromkeys(
        k for c in cols for k, v in c.items() if k not in used and not isinstance(v, dict | list)
    )
    return known + [(k.replace("_", " "), lambda c, k=k: plain(c.get(k, "-"))) for k in extra]


def _aggregates(
    runs: list[RunView],
) -> dict[tuple[str, str], list[tuple[RunView, Mapping[str, Any]]]]:
    groups: dict[tuple[str, str], list[tuple[RunView, Mapping[str, Any]]]] = {}
    for run in runs:
        for item in run.items:
            if item.get("role") == "aggregate":
                key = (str(item.get("check", "?")), str(item.get("suite", "?")))
                groups.setdefault(key, []).append((run, item))
    return groups


def _engines(run: RunView) -> dict[str, Any]:
    """The union of the engine identities recorded by the run's aggregates."""
    out: dict[str, Any] = {}
    for item in run.items:
        if item.get("role") == "aggregate":
            out.update(mapping(mapping(item.get("data")).get("engines")))
    return out


def check_table(entries: list[tuple[RunView, Mapping[str, Any]]], several_runs: bool) -> str:
    """The table of one check x suite over the runs that have it."""
    cols: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
    for run, item in entries:
        for title, numbers in columns(item):
            cols.append((f"{run.label}: {title}" if several_runs else title, numbers, item))
    kind = entries[0][1].get("kind")
    thresholds = mapping(entries[0][1].get("thresholds"))
    rows = measures(kind, [c for _, c, _ in cols])
    confidence = mapping(thresholds.get("flips")).get("confidence", 0.95)
    if is_number(confidence):
        rows = [
            (f"flip rate [{confidence:.0%} CI]" if n == "flip rate [CI]" else n, f) for n, f in rows
        ]
    head = "<th>measure</th>" + "".join(f"<th>{esc(t)}</th>" for t, _, _ in cols)
    body = [
        f"<tr><th>{esc(label)}</th>" + "".join(f"<td>{fn(c)}</td>" for _, c, _ in cols) + "</tr>"
        for label, fn in rows
    ]
    verdicts = "".join(
        f'<td class="ic-{esc(item.get("outcome", ""))}">{esc(item.get("outcome", "-"))}'
        + (
            f": {esc('; '.join(map(str, item.get('violations') or [])))}"
            if item.get("violations")
            else ""
        )
        + "</td>"
        for _, _, item in cols
    )
    body.append(f"<tr><th>suite gates</th>{verdicts}</tr>")
    return (
        f'<table class="ic-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        "</table><details><summary>thresholds</summary>" + kv_table(thresholds) + "</details>"
    )


def summary_html(runs: list[RunView]) -> str:
    """The summary section of ``runs``: engines, one table per check x suite, charts."""
    several = len(runs) > 1
    parts = ['<section class="ic-summary"><h2>infercheck summary</h2>']
    for run in runs:
        identities = run.engines or _engines(run)
        if identities:
            parts.append(f"<h3>engines{': ' + esc(run.label) if several else ''}</h3>")
            parts.append(engines(identities).removeprefix("<h4>engines</h4>"))
    for (check, suite), entries in _aggregates(runs).items():
        parts.append(f"<h3>{esc(check)} · {esc(suite)}</h3>")
        parts.append(check_table(entries, several))
    parts.append('<h3>charts</h3><div class="ic-charts">')
    parts.extend(charts(runs))
    parts.append("</div></section>")
    return "".join(parts)


def charts(runs: list[RunView]) -> list[str]:
    """Every summary chart the runs have data for."""
    several = len(runs) > 1
    out = []
    flips, determinism = [], []
    for run, item in ((r, i) for r in runs for i in r.items if i.get("role") == "aggregate"):
        prefix = f"{run.label}: " if several else ""
        for title, c in columns(item):
            if item.get("kind") in COMPARISON_KINDS:
                label = f"{prefix}{item.get('suite', '?')}/{title}"
                flips.append(
                    (label, c.get("flip_rate"), c.get("flip_rate_low"), c.get("flip_rate_high"))
                )
            if item.get("kind") == "determinism":
                determinism.append(
                    (f"{prefix}{title}", c.get("score"), c.get("score_low"), c.get("score_high"))
                )
        data = mapping(item.get("data"))
        name = f"{prefix}{item.get('check', '?')} · {item.get('suite', '?')}"
        if item.get("kind") == "sweep":
            out.extend(_sweep_charts(name, data))
        if item.get("kind") == "stress":
            out.extend(_stress_charts(name, data))
    if any(is_number(v) for _, v, _, _ in flips):
        out.insert(
            0, bar_chart(flips[:MAX_BARS], title="flip rate by suite and test side", y_label="rate")
        )
    if determinism:
        out.append(bar_chart(determinism[:MAX_BARS], title="determinism score", y_label="score"))
    out.extend(_kl_distributions(runs))
    return out


def _sweep_charts(name: str, data: Mapping[str, Any]) -> list[str]:
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


def _stress_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    labels = [str(lv.get("level", "?")) for lv in levels]
    return [
        line_chart(
            [
                ("p50", [lv.get("latency_p50_s") for lv in levels]),
                ("p95", [lv.get("latency_p95_s") for lv in levels]),
            ],
            title=f"latency: {name}",
            x_labels=labels,
            x_label="concurrency",
            y_label="s",
        ),
        line_chart(
            [
                ("consistency", [lv.get("consistency") for lv in levels]),
                ("error rate", [lv.get("error_rate") for lv in levels]),
            ],
            title=f"consistency: {name}",
            x_labels=labels,
            x_label="concurrency",
            y_label="rate",
        ),
    ]


def _kl_distributions(runs: list[RunView]) -> list[str]:
    groups: dict[str, list[Any]] = {}
    several = len(runs) > 1
    for run in runs:
        for item in run.items:
            data = item.get("data")
            if (
                item.get("kind") in COMPARISON_KINDS
                and item.get("role") == "prompt"
                and isinstance(data, Mapping)
            ):
                title = (
                    f"{item.get('check', '?')} · {item.get('suite', '?')} · {data.get('test', '?')}"
                )
                groups.setdefault(f"{run.label}: {title}" if several else title, []).append(
                    data.get("kl_mean")
                )
    return [
        histogram(
            values,
            title=f"per-prompt mean KL: {title}",
            bins=12,
            log10=True,
            x_label="KL (log scale)",
        )
        for title, values in list(groups.items())[:MAX_KL_CHARTS]
        if any(is_number(v) for v in values)
    ]
