"""The present facet of the comparison kinds: how they show what they measured: an item's
failure text and JUnit properties, its HTML detail, the terminal table and the rows and
charts of the HTML summary."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...metrics.answers import shown_reference
from ...records import load_record, plain_data
from ...render.charts import line_chart
from ...render.markup import clip, esc, interval, is_number, mapping, num, plain, rate, table
from ...render.views import (
    VIEW_THRESHOLDS,
    engines,
    flip_cell,
    flip_matrix,
    flip_matrix_line,
    side_by_side,
)
from ..framework.kind import BarSeries, Distribution, MeasureSpec, Verdict
from .aggregate import (
    CliffStep,
    ComparisonAggregateRecord,
    SuiteAggregate,
    SweepAggregateRecord,
    cliff_evidence,
)
from .gates import side_reasons, side_verdict
from .prompt import LOWER_BOUND_METHODS, PromptComparison, SelfCheckRecord
from .verdicts import describe, item_faults, past_line

UNGATED_NOTE = (
    "ungated: this check writes no gate (no max_kl, max_kl_position, min_similarity, "
    "max_mean_kl, min_same_top or flips.max_rate; a diff with expect: budget): it passes "
    "whatever the outputs"
)
"""What the reports say of an ungated aggregate (:func:`~.gates.is_ungated`)."""


def describe_item(record: Any) -> str:
    """An item's report above its violations: a prompt's comparison
    (:func:`~.verdicts.describe`), why its sides were generated one at a time and which
    features never engaged; nothing for other records (their judge writes it)."""
    if not isinstance(record, PromptComparison):
        return ""
    text = describe(record)
    if record.batching_note:
        text += f"\ngenerated one at a time: {record.batching_note}"
    if record.unexercised:
        text += "\nunexercised: " + "; ".join(record.unexercised)
    return text


def item_properties(record: Any) -> list[tuple[str, Any]]:
    """An item's JUnit properties (plain types only): a prompt's numbers, a self-check's
    problem count."""
    if isinstance(record, SelfCheckRecord):
        return [("infercheck_self_check_problems", len(record.problems))]
    if not isinstance(record, PromptComparison):
        return []
    return [
        ("infercheck_method", record.method),
        ("infercheck_kl_mean", record.kl_mean),
        ("infercheck_kl_max", record.kl_max),
        ("infercheck_same_top_rate", record.same_top_rate),
        ("infercheck_first_divergence", record.first_divergence),
        ("infercheck_divergence_label", record.divergence_label),
        ("infercheck_noise_floor", record.noise_floor),
        ("infercheck_similarity", round(record.similarity, 6)),
        ("infercheck_severity", record.severity),
        ("infercheck_flip", record.flip),
        ("infercheck_base_reasoning_chars", record.base_reasoning_chars),
        ("infercheck_test_reasoning_chars", record.test_reasoning_chars),
        ("infercheck_unexercised", len(record.unexercised)),
    ]


def aggregate_record(data: Mapping[str, Any]) -> ComparisonAggregateRecord:
    """An aggregate's record read back: a sweep's (:class:`SweepAggregateRecord`) when it has
    a ``cliff``, else a compare's or diff's. Raises ``ValueError`` when a field is missing or
    of the wrong type (an aggregate that errored, a file of another version)."""
    if "cliff" in data:
        return load_record(SweepAggregateRecord, data)
    return load_record(ComparisonAggregateRecord, data)


# -- an item's detail ---------------------------------------------------------------------------
def _measured(value: float | None, fmt: str = ".4g") -> str:
    """A measured number; ``-`` for None (nothing to measure), but ``NaN`` and ``inf`` shown
    as they are (a NaN is a finding, never a blank)."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "NaN"
    return format(value, fmt)


def comparison_prompt(data: Mapping[str, Any]) -> str:
    """Baseline and test side by side, answers and flip, per-position KL chart."""
    r = load_record(PromptComparison, data)
    facts = [
        ("prompt", r.prompt_id),
        (
            "method",
            f"{r.method} (KL a lower bound)" if r.method in LOWER_BOUND_METHODS else r.method,
        ),
        ("similarity", _measured(r.similarity)),
        ("severity", r.severity),
        ("KL mean", _measured(r.kl_mean, ".6g")),
        ("KL max", _measured(r.kl_max, ".6g")),
        ("same-top rate", num(r.same_top_rate)),
        ("finish", f"{r.base_finish} / {r.test_finish}"),
        ("divergence starts at", r.divergence_origin or "-"),
        ("first divergence", _divergence(r)),
        ("noise floor (nats)", _measured(r.noise_floor)),
    ]
    past = past_line(r)
    if past:
        facts.append(("past the divergence", past.partition(": ")[2] or past))
    parts = [
        table([esc(k) for k, _ in facts], [[esc(v) for _, v in facts]]),
        *([f'<p class="ic-method-note">{esc(r.method_note)}</p>'] if r.method_note else []),
        *_origin_html(r),
        *(
            _turns_html(r)
            if r.turns
            else ["<h4>prompt</h4>", f'<pre class="ic-text">{esc(clip(r.prompt_text))}</pre>']
        ),
        side_by_side(
            f"baseline: {r.baseline}",
            r.base_text,
            f"test: {r.test}",
            r.test_text,
            r.first_divergence,
        ),
    ]
    problems = item_faults(r)
    if problems:
        items = "".join(f"<li>{esc(p.describe())}</li>" for p in problems)
        parts.insert(1, f"<h4>problems (each fails the item)</h4><ul>{items}</ul>")
    if r.base_tool_calls or r.test_tool_calls:
        parts.append(
            table(
                ["side", "tool calls returned apart from the text"],
                [
                    [esc(f"baseline: {r.baseline}"), esc(r.base_tool_calls or "none")],
                    [esc(f"test: {r.test}"), esc(r.test_tool_calls or "none")],
                ],
            )
        )
    if r.answer_kind is not None:
        parts.append(
            table(
                ["answer kind", "reference", "baseline answer", "test answer", "flip"],
                [
                    [
                        esc(r.answer_kind),
                        esc(shown_reference(r.reference, r.answer_kind)),
                        esc(r.base_answer),
                        esc(r.test_answer),
                        flip_cell(r.flip),
                    ]
                ],
            )
        )
    if r.kl_per_position:
        parts.append(kl_chart(r, mapping(data.get(VIEW_THRESHOLDS)).get("max_kl")))
    return "".join(parts)


MAX_TOKEN_LABELS = 40
"""Positions of a KL chart labelled with their token, at most (else the first and last
index are written)."""


def kl_chart(r: PromptComparison, max_kl: Any) -> str:
    """KL_t per position of the baseline's continuation; ``max_kl`` (the item's threshold on
    its mean KL) as a dashed line; the first divergent token marked; each position labelled
    with the baseline's token text where the record has them (up to
    :data:`MAX_TOKEN_LABELS` positions), else its index."""
    label = f"{r.method}: a lower bound" if r.method in LOWER_BOUND_METHODS else r.method
    n = len(r.kl_per_position)
    # an engine's token texts may leave out the end-of-sequence token the KL scores
    tokens = [*r.base_tokens, *[""] * (n - len(r.base_tokens))][:n] if r.base_tokens else []
    marks = []
    if r.first_divergence is not None:
        marks.append((r.first_divergence, f"first divergence (token {r.first_divergence})"))
    return line_chart(
        [("KL_t", r.kl_per_position)],
        title=f"KL per position ({label})",
        x_labels=[repr(t)[1:-1] for t in tokens] if 0 < len(tokens) <= MAX_TOKEN_LABELS else None,
        x_label="token of the baseline's continuation"
        if tokens
        else "position in the baseline's continuation",
        y_label="KL",
        threshold=("max_kl (mean)", float(max_kl)) if is_number(max_kl) else None,
        marks=marks,
    )


def _turns_html(r: PromptComparison) -> list[str]:
    """A conversation's turns (escaped): given turns' text, each generated turn's two outputs
    with its sameness, the first divergent turn marked; the final answer follows in full
    (side by side)."""
    first = r.first_divergent_turn
    rows = []
    for turn in r.turns:
        if turn.kind == "final":
            continue
        marked = turn.index == first
        label = f"{turn.index} {turn.role}" + (" (generated)" if turn.kind == "generated" else "")
        if marked:
            label += " - first divergent turn"
        cells = [
            f"<strong>{esc(label)}</strong>" if marked else esc(label),
            f'<pre class="ic-text">{esc(clip(turn.base_text))}</pre>',
            ""
            if turn.test_text is None
            else f'<pre class="ic-text">{esc(clip(turn.test_text))}</pre>',
            esc(turn.sameness or ""),
        ]
        rows.append(cells)
    last = len(r.turns) - 1
    mark = " - first divergent turn" if first == last else ""
    return [
        f"<h4>conversation (first divergent turn: {'none' if first is None else first})</h4>",
        table(["turn", f"baseline: {esc(r.baseline)}", f"test: {esc(r.test)}", "same"], rows),
        f"<h4>final answer (turn {last}){mark}</h4>",
    ]


def _pre(text: str) -> str:
    """Model or suite text, escaped and clipped, as a preformatted block."""
    return f'<pre class="ic-text">{esc(clip(text))}</pre>'


def _divergence(r: PromptComparison) -> str:
    """``near-tie at token 3 (margins 0.0012 / 0.0007)``: the label, where, and the
    baseline's / test side's margins in nats (``>=`` a lower bound); ``-`` without one."""
    if r.divergence_label is None:
        return "-"
    text = f"{r.divergence_label} at token {r.first_divergence}"
    if r.margins is not None:
        bound = "" if r.margins_exact else ">= "
        text += " (margins " + " / ".join(bound + _measured(m) for m in r.margins) + ")"
    return text


def _origin_html(r: PromptComparison) -> list[str]:
    """Where the divergence starts (its evidence) and which prompt each side received,
    escaped; nothing for a record without them (an older file)."""
    parts = []
    if r.origin_detail:
        parts.append(
            f'<p class="ic-origin"><b>{esc(r.divergence_origin or "no divergence")}</b>: '
            f"{esc(r.origin_detail)}</p>"
        )
    if r.prompt_inputs is not None:
        inputs = r.prompt_inputs
        parts.append(
            f'<p class="ic-prompt-inputs">prompt: <b>{esc(inputs.sharing)}</b> '
            f"({esc(inputs.reason)}); prompt ids: baseline {esc(_ids(inputs.base_ids))}, "
            f"test {esc(_ids(inputs.test_ids))}</p>"
        )
    return parts


def _ids(ids: list[int] | None, limit: int = 24) -> str:
    if ids is None:
        return "not exposed"
    shown = ", ".join(map(str, ids[:limit])) + (", …" if len(ids) > limit else "")
    return f"[{shown}] ({len(ids)})"


COMPARISON_COLUMNS: list[tuple[str, Callable[[SuiteAggregate], str]]] = [
    ("test", lambda lv: esc(lv.test)),
    ("prompts", lambda lv: num(lv.n_prompts)),
    ("failed items", lambda lv: num(lv.n_failed)),
    ("identical outputs", lambda lv: rate(lv.n_identical, lv.n_prompts)),
    (
        "flip rate [CI]",
        lambda lv: (
            f"{rate(lv.n_flips, lv.n_answered)} = "
            + interval(lv.flip_rate, lv.flip_rate_low, lv.flip_rate_high)
        ),
    ),
    ("mean KL ± SE", lambda lv: f"{num(lv.kl_mean, '.6g')} ± {num(lv.kl_se, '.2g')}"),
    ("KL p99", lambda lv: num(lv.kl_p99)),
    ("KL max", lambda lv: num(lv.kl_max)),
    ("same-top rate", lambda lv: num(lv.same_top_rate)),
    ("divergences", lambda lv: plain(lv.divergence_labels)),
    ("noise floor", lambda lv: _measured(lv.noise_floor)),
    ("McNemar p", lambda lv: num(lv.mcnemar_p, ".3g")),
    ("methods", lambda lv: plain(lv.methods)),
]


def comparison_aggregate(data: Mapping[str, Any]) -> str:
    """One row per test side with the suite statistics; a sweep's cliff; the engines
    compared."""
    record = aggregate_record(data)
    parts = [f'<p class="ic-ungated"><b>{esc(UNGATED_NOTE)}</b></p>'] if record.ungated else []
    parts.append(
        table(
            [esc(n) for n, _ in COMPARISON_COLUMNS],
            [[f(lv) for _, f in COMPARISON_COLUMNS] for lv in record.levels],
        )
    )
    matrices = [(lv.test, lv.answer_matrix) for lv in record.levels if lv.answer_matrix]
    if matrices:
        parts.append(
            "<h4>flip matrix (baseline answer x test answer, against the reference)</h4>"
            '<div class="ic-charts">'
            + "".join(f"<div><b>{esc(t)}</b>{flip_matrix(m)}</div>" for t, m in matrices)
            + "</div>"
        )
    parts += [f"<p>{esc(line)}</p>" for line in record.replay]
    problems = [f"{lv.test}: {line}" for lv in record.levels for line in lv.problems]
    if problems:
        items = "".join(f"<li>{esc(line)}</li>" for line in problems)
        parts.append(f"<h4>problems (each fails the suite)</h4><ul>{items}</ul>")
    if isinstance(record, SweepAggregateRecord):
        parts.append(f"<p>degradation cliff: <b>{esc(record.cliff)}</b></p>")
        if record.cliff_steps:
            evidence = cliff_evidence(record.cliff, record.cliff_steps, record.cliff_alpha)
            parts.append(f"<p>{esc(evidence)}</p>")
            parts.append(cliff_steps_table(record.cliff, record.cliff_steps, record.cliff_alpha))
    return "".join(parts) + engines(record.engines)


def cliff_steps_table(cliff: str, steps: list[CliffStep], alpha: float) -> str:
    """The cliff's evidence, a row per level: failed items, McNemar against the previous
    level, mean KL ± SE against ``max_mean_kl``."""
    within = {None: "-", True: "yes", False: "no"}
    rows = []
    for i, step in enumerate(steps):
        first = i == 0
        rows.append(
            [
                esc(step.level),
                f"{step.n_failed}/{step.n_prompts}",
                "-" if first else f"+{step.newly_failed} / -{step.recovered}",
                "-" if first else esc(f"{step.p_value:.3g}"),
                f"{_measured(step.kl_mean, '.4g')} ± {_measured(step.kl_se, '.2g')}",
                within[step.kl_within],
                "<b>cliff</b>" if not first and step.level == cliff else "",
            ]
        )
    head = [
        "level",
        "failed items",
        "new / recovered",
        f"McNemar p (alpha {alpha:g})",
        "mean KL ± SE",
        "within max_mean_kl",
        "",
    ]
    return table([esc(h) for h in head], rows)


def self_check(data: Mapping[str, Any]) -> str:
    problems = load_record(SelfCheckRecord, data).problems
    if not problems:
        return "<p>the baseline generated twice was identical</p>"
    return "<ul>" + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul>"


# -- verdicts ------------------------------------------------------------------------------
def test_sides(record: ComparisonAggregateRecord) -> dict[str, SuiteAggregate | None]:
    """Every test side in the user's order, with its level (None: no item has a record)."""
    levels: dict[str, SuiteAggregate | None] = dict.fromkeys(record.tests)
    levels.update((level.test, level) for level in record.levels)
    return levels


def side_verdicts(
    data: Mapping[str, Any], passed: bool, violations: Sequence[str]
) -> list[Verdict]:
    """The verdict matrix's cells of a comparison aggregate, one per test side
    (:func:`~.gates.side_verdict`): ``fail``, ``ungated`` (passed with no gate written) or
    ``pass``, with what decided it."""
    record = aggregate_record(data)
    cliff = record.cliff if isinstance(record, SweepAggregateRecord) else None
    cells = []
    for test, level in test_sides(record).items():
        ok, deciding = side_verdict(record, level, passed, violations)
        reasons = tuple(side_reasons(record, level, passed, violations))
        verdict = "fail" if not ok else "ungated" if record.ungated else "pass"
        note = "degradation cliff" if test == cliff else ""
        cells.append(Verdict(test, verdict, deciding, reasons, note))
    return cells


def sweep_notes(data: Mapping[str, Any]) -> list[str]:
    """A sweep's degradation cliff with its evidence (:func:`~.aggregate.cliff_evidence`),
    for the verdict matrix; nothing for a compare or diff, or a record that cannot be read."""
    record = _record(data)
    if not isinstance(record, SweepAggregateRecord):
        return []
    if not record.cliff_steps:
        return [f"degradation cliff: {record.cliff}"]
    return [
        "degradation cliff: " + cliff_evidence(record.cliff, record.cliff_steps, record.cliff_alpha)
    ]


# -- HTML summary -------------------------------------------------------------------------------
MEASURES: tuple[MeasureSpec, ...] = (
    ("prompts", ("n_prompts",), num),
    ("gates", ("ungated",), lambda ungated: "<b>ungated</b>" if ungated else "written"),
    ("failed items", ("n_failed",), num),
    ("identical outputs", ("n_identical", "n_prompts"), rate),
    ("flips", ("n_flips", "n_answered"), rate),
    ("flip matrix (baseline→test)", ("answer_matrix",), flip_matrix_line),
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


def _record(data: Mapping[str, Any]) -> ComparisonAggregateRecord | None:
    """An aggregate's record; None when it cannot be read (it errored, or comes from a file
    of another version: its detail view shows the data as a table)."""
    try:
        return aggregate_record(data)
    except ValueError:
        return None


def _levels(data: Mapping[str, Any]) -> list[SuiteAggregate]:
    record = _record(data)
    return [] if record is None else record.levels


def side_columns(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A column per test side: ``q4@local`` (its numbers as JSON types, for the measures, and
    whether the check is ``ungated``)."""
    record = _record(data)
    if record is None:
        return []
    return [
        (level.test, {**plain_data(level), "ungated": record.ungated}) for level in record.levels
    ]


def level_charts(name: str, data: Mapping[str, Any]) -> list[str]:
    levels = _levels(data)
    labels = [level.test for level in levels]
    return [
        line_chart(
            [
                ("failure rate", [level.failure_rate for level in levels]),
                ("flip rate", [level.flip_rate for level in levels]),
            ],
            title=f"degradation: {name}",
            x_labels=labels,
            y_label="rate",
        ),
        line_chart(
            [("mean KL", [level.kl_mean for level in levels])],
            title=f"mean KL: {name}",
            x_labels=labels,
            y_label="KL",
        ),
        *length_charts(name, levels),
    ]


def length_charts(name: str, levels: list[SuiteAggregate]) -> list[str]:
    """KL vs length: the pooled mean KL of each bucket (:mod:`.buckets`), a line per test
    side, the buckets in the order of the first side that has them; none without buckets."""
    order = next((level.buckets for level in levels if level.buckets), None)
    if order is None:
        return []
    names = [b.bucket for b in order]
    series = []
    for level in levels:
        by_name = {b.bucket: b.kl_mean for b in level.buckets}
        series.append((level.test, [by_name.get(bucket) for bucket in names]))
    return [
        line_chart(
            series,
            title=f"KL vs length: {name}",
            x_labels=names,
            x_label="prompt length (x the original context)",
            y_label="mean KL",
        )
    ]
