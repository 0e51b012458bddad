"""Pieces of an item's HTML detail view that check kinds share: outputs side by side with
their first difference marked, flips highlighted, scalar facts, engine identities, and the
default view of a single-target aggregate. Every piece escapes what it shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..metrics.answers import FLIP_VALUES
from .markup import clip, esc, is_number, kv_table, plain, table

VIEW_THRESHOLDS = "_thresholds"
"""The key under which a kind's view finds the item's thresholds beside its record's data
(:func:`~pytest_infercheck.report.views.item_detail`; a record never has this key)."""

SIDE_CHARS = 1000
"""Characters of an output shown on each side of the first difference (before and after)."""


def generic(data: Mapping[str, Any]) -> str:
    """Any data as an escaped key/value table."""
    return kv_table(data)


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


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def flip_cell(value: Any) -> str:
    text = esc(value) if value is not None else "-"
    return f'<span class="ic-flip">{text}</span>' if value in FLIP_VALUES or value is True else text


def facts(data: Mapping[str, Any], skip: tuple[str, ...]) -> str:
    """The scalar entries of ``data`` not in ``skip`` as one key/value table."""
    return kv_table(
        {k: v for k, v in data.items() if k not in skip and not isinstance(v, dict | list)}
    )


def engines(identities: Any) -> str:
    """Each engine's identity (build, model path, capabilities) as a key/value table."""
    if not isinstance(identities, Mapping) or not identities:
        return ""
    return "<h4>engines</h4>" + "".join(
        f"<h4>{esc(label)}</h4>" + kv_table(ident if isinstance(ident, Mapping) else {"": ident})
        for label, ident in identities.items()
    )


def target_aggregate(data: Mapping[str, Any]) -> str:
    """A single-target aggregate: its scalar numbers, stress levels as a table, engines."""
    parts = [facts(data, ("engines",))]
    levels = [lv for lv in data.get("levels") or [] if isinstance(lv, Mapping)]
    if levels:
        keys = [k for k in levels[0] if not isinstance(levels[0][k], dict | list)]
        parts.append(
            table([esc(k) for k in keys], [[plain(lv.get(k)) for k in keys] for lv in levels])
        )
    return "".join(parts) + engines(data.get("engines"))


def flip_matrix(counts: Any) -> str:
    """A comparison's flip matrix (``{correct_to_wrong: n, ...}``, see
    :func:`~pytest_infercheck.checks.comparison.aggregate.answer_matrix`) as a 2 x 2 table:
    a row per baseline answer (correct, wrong), a column per test answer; the cells that
    changed correctness are marked. ``-`` without counts."""
    if not isinstance(counts, Mapping) or not counts:
        return "-"
    rows = []
    for before in ("correct", "wrong"):
        cells = []
        for after in ("correct", "wrong"):
            n = counts.get(f"{before}_to_{after}", 0)
            text = esc(n)
            if before != after and n:
                text = f'<span class="ic-flip">{text}</span>'
            cells.append(text)
        rows.append([f"<b>{before}</b>", *cells])
    return table(["baseline \\ test", "correct", "wrong"], rows, cls="ic-table ic-flip-matrix")


def flip_matrix_line(counts: Any) -> str:
    """The flip matrix (:func:`flip_matrix`) in one table cell: ``correct->correct 49,
    correct->wrong 1 / wrong->correct 0, wrong->wrong 10``, the changes of correctness
    marked. ``-`` without counts."""
    if not isinstance(counts, Mapping) or not counts:
        return "-"
    rows = []
    for before in ("correct", "wrong"):
        cells = []
        for after in ("correct", "wrong"):
            n = counts.get(f"{before}_to_{after}", 0)
            text = f"{before}→{after} {esc(n)}"
            cells.append(f'<span class="ic-flip">{text}</span>' if before != after and n else text)
        rows.append(", ".join(cells))
    return "<br>".join(rows)
