"""The detail view of one item, from its record (``check, kind, suite, role, name,
thresholds, violations, data``; see ``collect.SuiteCollector.record``).

Each kind x role has a view; anything else (and any view that meets data it does not
expect) falls back to an escaped key/value table, so a new kind or a missing key never
breaks a report. Every view ends with the thresholds the item was held to and the ones it
broke. Passed items are collapsed (``<details>``), failed ones open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..kinds import COMPARISON_KINDS, TARGET_KINDS
from .charts import line_chart
from .markup import (
    clip,
    esc,
    interval,
    is_number,
    kv_table,
    mapping,
    num,
    plain,
    rate,
    table,
    violations_list,
)

SIDE_CHARS = 1000
"""Characters of an output shown on each side of the first difference (before and after)."""
FLIPS = ("correct_to_wrong", "wrong_to_correct", "changed")


def item_detail(record: Mapping[str, Any], outcome: str | None = None) -> str:
    """The whole detail block of one item; ``outcome`` (passed, failed, ...) decides
    whether it starts collapsed (passed) and colours its title."""
    data = mapping(record.get("data"))
    view = _VIEWS.get((_family(record.get("kind")), record.get("role")))
    try:
        body = view(data) if view is not None else generic(data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        body = f'<p class="ic-none">({esc(type(err).__name__)} in the detail view)</p>'
        body += generic(data)
    thresholds = record.get("thresholds")
    tail = (
        "<h4>thresholds</h4>"
        + kv_table(mapping(thresholds))
        + "<h4>violations</h4>"
        + violations_list(record.get("violations"))
    )
    title = " · ".join(
        esc(record.get(key)) for key in ("check", "suite", "name") if record.get(key) is not None
    )
    state = f" ic-{esc(outcome)}" if outcome else ""
    is_open = "" if outcome in ("passed", "skipped") else " open"
    return (
        f'<details class="ic-detail{state}"{is_open}><summary>{title}</summary>'
        f"{body}{tail}</details>"
    )


def _family(kind: Any) -> Any:
    return "comparison" if kind in COMPARISON_KINDS else kind


def generic(data: Mapping[str, Any]) -> str:
    """Any data as an escaped key/value table."""
    return kv_table(data)


# -- texts -------------------------------------------------------------------------------------
def first_difference(a: str, b: str) -> int | None:
    """Index of the first character where ``a`` and ``b`` differ (the shorter one's length
    when one is a prefix of the other); None when they are equal."""
    if a == b:
        return None
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def marked_text(text: str, start: int | None) -> str:
    """``text`` in a ``<pre>``, from character ``start`` on inside ``<mark class="ic-div">``;
    at most :data:`SIDE_CHARS` characters on each side of ``start`` are shown."""
    if start is None:
        return f'<pre class="ic-text">{esc(clip(text, 2 * SIDE_CHARS))}</pre>'
    head, rest = text[:start], text[start:]
    if len(head) > SIDE_CHARS:
        head = f"…({len(head) - SIDE_CHARS} characters) " + head[-SIDE_CHARS:]
    return (
        f'<pre class="ic-text">{esc(head)}<mark class="ic-div">'
        f"{esc(clip(rest, SIDE_CHARS))}</mark></pre>"
    )


def side_by_side(
    left_title: str, left: str, right_title: str, right: str, token_index: Any = None
) -> str:
    """Two outputs next to each other, each highlighted from the first differing character;
    the caption gives the first divergent token's index (over token ids), since the
    character offset of a token is not known exactly."""
    start = first_difference(left, right)
    if start is None:
        caption = "identical text"
    else:
        caption = f"texts differ from character {start}"
        if is_number(token_index):
            caption = f"first divergent token: index {token_index}; " + caption
    if start is None and is_number(token_index):
        caption = f"first divergent token: index {token_index} (same text)"
    return (
        f'<p class="ic-caption">{esc(caption)}</p><div class="ic-side">'
        f"<div><h4>{esc(left_title)}</h4>{marked_text(left, start)}</div>"
        f"<div><h4>{esc(right_title)}</h4>{marked_text(right, start)}</div></div>"
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _flip(value: Any) -> str:
    text = esc(value) if value is not None else "-"
    return f'<span class="ic-flip">{text}</span>' if value in FLIPS or value is True else text


# -- comparisons -------------------------------------------------------------------------------
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
        f'<pre class="ic-text">{esc(clip(_text(data.get("prompt_text"))))}</pre>',
        side_by_side(
            f"baseline: {data.get('baseline', '-')}",
            _text(data.get("base_text")),
            f"test: {data.get('test', '-')}",
            _text(data.get("test_text")),
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
                        _flip(data.get("flip")),
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


def engines(identities: Any) -> str:
    """Each engine's identity (build, model path, capabilities) as a key/value table."""
    if not isinstance(identities, Mapping) or not identities:
        return ""
    return "<h4>engines</h4>" + "".join(
        f"<h4>{esc(label)}</h4>" + kv_table(ident if isinstance(ident, Mapping) else {"": ident})
        for label, ident in identities.items()
    )


# -- single-target kinds -----------------------------------------------------------------------
def _facts(data: Mapping[str, Any], skip: tuple[str, ...]) -> str:
    """The scalar entries of ``data`` not in ``skip`` as one key/value table."""
    return kv_table(
        {k: v for k, v in data.items() if k not in skip and not isinstance(v, dict | list)}
    )


def determinism_prompt(data: Mapping[str, Any]) -> str:
    """Run counts and each distinct output, the modal one first, against the modal one."""
    outputs = [o for o in data.get("outputs") or [] if isinstance(o, Mapping)]
    outputs.sort(key=lambda o: -o["count"] if is_number(o.get("count")) else 0)
    parts = [_facts(data, ())]
    modal = _text(outputs[0].get("text")) if outputs else ""
    for k, out in enumerate(outputs):
        title = f"output {k + 1}: {out.get('count', '?')} of {data.get('runs', '?')} runs"
        if k == 0:
            parts.append(f"<h4>{esc(title)} (modal)</h4>")
            parts.append(marked_text(modal, None))
        else:
            parts.append(side_by_side("modal output", modal, title, _text(out.get("text"))))
    for key in ("first_divergences", "error_messages"):
        if data.get(key):
            parts.append(f"<h4>{esc(key.replace('_', ' '))}</h4>{plain(data[key])}")
    return "".join(parts)


def stress_level(data: Mapping[str, Any]) -> str:
    """The level's numbers and the outputs that differed from the reference."""
    parts = [_facts(data, ())]
    if data.get("errors"):
        parts.append("<h4>errors</h4>" + kv_table(data["errors"]))
    for m in (data.get("mismatches") or [])[:20]:
        if isinstance(m, Mapping):
            parts.append(
                side_by_side(
                    f"reference ({m.get('prompt_id', '?')})",
                    _text(m.get("reference")),
                    f"at concurrency {data.get('level', '?')}",
                    _text(m.get("output")),
                    m.get("first_divergence"),
                )
            )
    return "".join(parts)


def batch_invariance_prompt(data: Mapping[str, Any]) -> str:
    """The prompt alone against each batched trial."""
    alone = mapping(data.get("alone"))
    trials = [t for t in data.get("trials") or [] if isinstance(t, Mapping)]
    rows = [
        [
            esc(t.get("trial", "-")),
            esc(t.get("position", "-")),
            esc(t.get("batch", "-")),
            esc(t.get("match", "-")),
            esc(t.get("first_divergence", "-")),
            num(t.get("max_logprob_diff")),
        ]
        for t in trials
    ]
    parts = [
        _facts(data, ()),
        table(
            ["trial", "position", "batch", "match", "first divergence", "max logprob diff"], rows
        ),
    ]
    for t in trials:
        if t.get("match") is False:
            parts.append(
                side_by_side(
                    "alone",
                    _text(alone.get("text")),
                    f"trial {t.get('trial', '?')} (batch {t.get('batch', '?')})",
                    _text(t.get("text")),
                    t.get("first_divergence"),
                )
            )
            break
    return "".join(parts)


def parity_prompt(data: Mapping[str, Any]) -> str:
    """The two modes or endpoints side by side, their answers and whether they flipped."""
    ref, other = mapping(data.get("reference")), mapping(data.get("other"))

    def label(side: Mapping[str, Any], default: str) -> str:
        return str(side.get("mode") or side.get("endpoint") or default)

    answers = data.get("answers") or []
    parts = [
        _facts(data, ("answers",)),
        side_by_side(
            label(ref, "reference"),
            _text(ref.get("text")),
            label(other, "other"),
            _text(other.get("text")),
            data.get("first_divergence"),
        ),
    ]
    if answers:
        cells = [esc(a) for a in list(answers)[:2]] + [_flip(data.get("flip"))]
        parts.append(table(["reference answer", "other answer", "flip"], [cells]))
    return "".join(parts)


def cache_pollution_hostile(data: Mapping[str, Any]) -> str:
    """The hostile request's fate and every prompt whose output changed after it."""
    parts = [_facts(data, ())]
    for c in (data.get("changed") or [])[:20]:
        if isinstance(c, Mapping):
            parts.append(
                side_by_side(
                    f"before ({c.get('prompt_id', '?')})",
                    _text(c.get("before")),
                    "after the hostile request",
                    _text(c.get("after")),
                    c.get("first_divergence"),
                )
            )
    return "".join(parts)


def target_aggregate(data: Mapping[str, Any]) -> str:
    """A single-target aggregate: its scalar numbers, stress levels as a table, engines."""
    parts = [_facts(data, ("engines",))]
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    if levels:
        keys = [k for k in levels[0] if not isinstance(levels[0][k], dict | list)]
        parts.append(
            table([esc(k) for k in keys], [[plain(lv.get(k)) for k in keys] for lv in levels])
        )
    return "".join(parts) + engines(data.get("engines"))


_VIEWS: dict[tuple[Any, Any], Callable[[Mapping[str, Any]], str]] = {
    ("comparison", "prompt"): comparison_prompt,
    ("comparison", "aggregate"): comparison_aggregate,
    ("comparison", "self-check"): self_check,
    ("determinism", "prompt"): determinism_prompt,
    ("stress", "level"): stress_level,
    ("batch-invariance", "prompt"): batch_invariance_prompt,
    ("stream-parity", "prompt"): parity_prompt,
    ("endpoint-parity", "prompt"): parity_prompt,
    ("cache-pollution", "hostile"): cache_pollution_hostile,
    **{(kind, "aggregate"): target_aggregate for kind in TARGET_KINDS},
}
