"""The HTML report: results-table columns, item details and the standalone document.

The same fragments serve pytest-html (``report/pytest_html.py``: extra columns, each item's
detail as an extra, the summary section) and :func:`render_report`, which turns one or more
JSON results files (see ``report/results.py``) into one self-contained page: the verdict
matrix and summary tables with a column per run, charts, the run facts, then each run's items
in a sortable table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.answers import FLIP_VALUES, flip_rank
from ..render.markup import CSS, SORT_SCRIPT, esc, is_number, mapping, num, sort_key
from .summary import RunView, summary_html
from .views import item_detail

COLUMNS = (("icklmean", "KL mean"), ("icflip", "flip"), ("icsimilarity", "similarity"))
"""The sortable result columns: (column type, title)."""

RUN_FACTS = (
    "run_id",
    "started",
    "finished",
    "duration_s",
    "exitstatus",
    "plugin_version",
    "python",
    "platform",
    "hostname",
    "shard",
    "argv",
)


def result_cells(record: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
    """``{column type: (sort key, cell HTML)}`` of :data:`COLUMNS` for an item's record:
    the prompt's mean KL, its flip (flips first when sorted) and its text similarity. Empty
    cells for items without them."""
    data = mapping(record.get("data")) if record is not None else {}
    if record is None or record.get("role") not in ("prompt", None):
        return {col: ("", "") for col, _ in COLUMNS}
    kl = data.get("kl_mean")
    flip = data.get("flip")
    flip_text = "" if flip is None else str(flip)
    rank = 0 if flip is True else flip_rank(flip_text)
    flip_html = esc(flip_text)
    if flip in FLIP_VALUES or flip is True:
        flip_html = f'<span class="ic-flip">{flip_html}</span>'
    sim = data.get("similarity")
    return {
        "icklmean": (sort_key(kl), num(kl, ".4g") if is_number(kl) else ""),
        "icflip": (f"{rank}{flip_text}" if flip_text else "", flip_html),
        "icsimilarity": (sort_key(sim), num(sim, ".4f") if is_number(sim) else ""),
    }


def _outcome(item: Mapping[str, Any]) -> str:
    return str(item.get("outcome", "unknown"))


def items_table(run: RunView) -> str:
    """The run's items: outcome, node id, the sortable columns, duration; each item's detail
    in a second row of its own ``<tbody>`` (so sorting moves both)."""
    heads = "".join(
        f'<th class="sortable" data-column-type="{col}">{esc(title)}</th>'
        for col, title in (("result", "result"), ("testId", "item"), *COLUMNS, ("duration", "s"))
    )
    bodies = []
    for item in run.items:
        outcome = _outcome(item)
        cells = result_cells(item)
        duration = item.get("duration_s")
        row = (
            f'<td class="ic-{esc(outcome)}" data-sort="{esc(outcome)}">{esc(outcome)}</td>'
            f'<td data-sort="{esc(item.get("nodeid", ""))}">{esc(item.get("nodeid", ""))}</td>'
            + "".join(f'<td data-sort="{esc(k)}">{html}</td>' for k, html in cells.values())
            + f'<td data-sort="{sort_key(duration)}">{num(duration, ".3g")}</td>'
        )
        ident = run.anchor(item)
        detail = item_detail(item, outcome, ident) if item.get("kind") is not None else ""
        if not detail and item.get("longrepr"):
            detail = f'<pre id="{esc(ident)}" class="ic-text">{esc(item["longrepr"])}</pre>'
        extra = f'<tr><td colspan="{len(COLUMNS) + 3}">{detail}</td></tr>' if detail else ""
        bodies.append(f"<tbody><tr>{row}</tr>{extra}</tbody>")
    return f'<table class="ic-results"><thead><tr>{heads}</tr></thead>{"".join(bodies)}</table>'


def _label(results: Mapping[str, Any], index: int) -> str:
    run_id = mapping(results.get("run")).get("run_id")
    return f"run {index + 1}" + (f" ({run_id})" if run_id else "")


def runs_table(results: Sequence[Mapping[str, Any]], labels: list[str]) -> str:
    """Run facts with a column per run, and each run's outcome counts."""
    runs = [mapping(r.get("run")) for r in results]
    head = "<th></th>" + "".join(f"<th>{esc(label)}</th>" for label in labels)
    rows = []
    for fact in RUN_FACTS:
        cells = "".join(f"<td>{esc(_fact(run.get(fact)))}</td>" for run in runs)
        rows.append(f"<tr><th>{esc(fact)}</th>{cells}</tr>")
    for outcome in ("passed", "failed", "skipped", "error"):
        counts = [sum(1 for i in r.get("items") or [] if _outcome(i) == outcome) for r in results]
        rows.append(f"<tr><th>{outcome}</th>" + "".join(f"<td>{n}</td>" for n in counts) + "</tr>")
    body = "".join(rows)
    return (
        f'<table class="ic-table ic-runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        "</table>"
    )


def _fact(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value))
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, float):
        return num(value, ".4g")
    return "-" if value is None else str(value)


def render_report(results: list[dict[str, Any]]) -> str:
    """One self-contained HTML document for one or more results files (version 1): runs
    side by side in the verdict matrix, the summary and run facts tables, then each run's
    items."""
    labels = [_label(r, k) for k, r in enumerate(results)]
    runs = [
        RunView(
            label,
            [i for i in r.get("items") or [] if isinstance(i, Mapping)],
            mapping(r.get("engines")),
            label if len(results) > 1 else "",
        )
        for label, r in zip(labels, results, strict=True)
    ]
    sections = [
        summary_html(runs),
        "<h2>runs</h2>",
        runs_table(results, labels),
        *(f"<h2>items: {esc(run.label)}</h2>{items_table(run)}" for run in runs),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>pytest-infercheck report</title>"
        f"<style>{CSS}</style></head><body><h1>pytest-infercheck report</h1>"
        + "".join(sections)
        + f"<script>{SORT_SCRIPT}</script></body></html>\n"
    )
