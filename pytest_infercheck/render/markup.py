"""HTML building blocks shared by the report fragments: escaping, numbers, tables, styles.

Everything that reaches the page goes through :func:`esc` (model output, prompts, names from
the matrix, engine identities): an output containing ``<script>`` is shown as text.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

MAX_VALUE_CHARS = 2000
"""Longest text shown for one value of a generic key/value table."""


def esc(value: Any) -> str:
    """``value`` as text safe in HTML content and in quoted attributes."""
    return escape(str(value), quote=True)


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one (records are read defensively)."""
    return value if isinstance(value, Mapping) else {}


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def num(value: Any, fmt: str = ".4g") -> str:
    """A number formatted with ``fmt``; ``-`` for None, NaN and anything not a number."""
    if not is_number(value) or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def rate(count: Any, total: Any) -> str:
    """``3/20``; ``-`` when either is missing."""
    return f"{count}/{total}" if is_number(count) and is_number(total) else "-"


def interval(value: Any, low: Any, high: Any, fmt: str = ".3f") -> str:
    """``0.050 [0.009, 0.236]``."""
    if not is_number(value):
        return "-"
    if is_number(low) and is_number(high):
        return f"{num(value, fmt)} [{num(low, fmt)}, {num(high, fmt)}]"
    return num(value, fmt)


def sort_key(value: Any) -> str:
    """An order-preserving string key of a number (16 hex digits of its IEEE 754 bits, sign
    bit flipped for positives and all bits flipped for negatives), so that string comparison
    sorts numbers numerically; ``""`` (first) for None, NaN and non-numbers."""
    if not is_number(value) or math.isnan(value):
        return ""
    bits: int = struct.unpack(">Q", struct.pack(">d", float(value)))[0]
    key = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits >> 63 else bits | 1 << 63
    return f"{key:016x}"


def clip(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters with a note of how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def plain(value: Any) -> str:
    """A value of any JSON type as escaped text (containers as compact JSON)."""
    if isinstance(value, dict | list | tuple):
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    elif isinstance(value, float):
        text = num(value)
    else:
        text = str(value)
    return esc(clip(text))


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "ic-table") -> str:
    """A table from already-escaped header and cell HTML."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys: ``{"flips": {"max_rate": 0.05}}`` ->
    ``{"flips.max_rate": 0.05}``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def kv_table(data: Mapping[str, Any], cls: str = "ic-kv") -> str:
    """Keys and values (any JSON type, nested mappings flattened), escaped; empty: a dash."""
    if not data:
        return '<p class="ic-none">-</p>'
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{plain(v)}</td></tr>" for k, v in flatten(data).items()
    )
    return f'<table class="{cls}"><tbody>{rows}</tbody></table>'


def violations_list(violations: Any) -> str:
    """The broken thresholds as a list, or a note that none was broken."""
    if not violations:
        return '<p class="ic-ok">no threshold broken</p>'
    items = "".join(f"<li>{esc(v)}</li>" for v in violations)
    return f'<ul class="ic-violations">{items}</ul>'


CSS = """
.ic-detail{font-family:sans-serif;font-size:13px;margin:4px 0}
.ic-detail summary{cursor:pointer;font-weight:bold}
.ic-side{display:grid;grid-template-columns:1fr 1fr;gap:8px}
.ic-side h4,.ic-detail h4{margin:6px 0 2px}
.ic-text{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;border:1px solid #ddd;
 padding:4px;margin:0;font-family:monospace;font-size:12px}
.ic-div{background:#ffd6d6;color:#900}
.ic-table,.ic-kv,.ic-results,.ic-verdicts{border-collapse:collapse;margin:4px 0}
.ic-table td,.ic-table th,.ic-kv td,.ic-kv th,.ic-results td,.ic-results th,.ic-verdicts td,
.ic-verdicts th{
 border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top;font-size:12px}
.ic-table th,.ic-kv th,.ic-results th,.ic-verdicts th{background:#eee}
.ic-verdicts{font-size:14px}.ic-verdicts td.ic-fail{background:#fde8e8}
.ic-verdicts td.ic-pass{background:#e8f6e8}.ic-deciding{color:#333}
.ic-violations{color:#b00;margin:2px 0}
.ic-ok{color:#070;margin:2px 0}
.ic-flip{color:#b00;font-weight:bold}
.ic-fail,.ic-failed,.ic-error{color:#b00}
.ic-pass,.ic-passed{color:#070}
.ic-summary h3{margin:12px 0 4px}
.ic-charts{display:flex;flex-wrap:wrap;gap:8px}
.ic-chart{background:#fff;border:1px solid #ddd}
.ic-chart text{font-family:sans-serif;font-size:10px;fill:#333}
.ic-chart .ic-chart-title{font-size:11px;font-weight:bold}
.ic-chart .ic-legend{font-weight:bold}
.ic-grid{stroke:#eee}.ic-axis{stroke:#999}.ic-line{stroke-width:1.5}
.ic-err{stroke:#000;stroke-width:1.5}
th.sortable{cursor:pointer}
.ic-banner{font-family:sans-serif;border:2px solid;border-radius:4px;padding:6px 12px;
 margin:8px 0;font-size:15px}
.ic-banner p{margin:2px 0}.ic-banner-head{font-size:17px}.ic-worst-text{font-weight:bold}
.ic-banner-fail{border-color:#b00;background:#fde8e8}
.ic-banner-pass{border-color:#070;background:#e8f6e8}
.ic-banner-fail strong{color:#b00}.ic-banner-pass strong{color:#070}
.ic-also{margin:2px 0;padding-left:16px;color:#600}
.ic-failed-items{font-size:11px;margin-top:2px}.ic-failed-items a{margin-right:4px}
.ic-note{background:#fff3c4;border:1px solid #d9a400;border-radius:3px;padding:0 3px;
 font-size:11px}
.ic-notes{margin:2px 0 8px;font-size:13px}
"""

TO_TOP_SCRIPT = (
    "<script>(function () {"
    ' var b = document.getElementById("infercheck-banner"),'
    ' t = document.getElementById("title");'
    " if (!b) { return; }"
    " if (t) { t.after(b); } else { document.body.prepend(b); }"
    "})();</script>"
)
"""Moves the banner (:func:`..report.overview.banner_html`) under the page's title: pytest-html
gives a plugin a place in its summary only, below its environment table."""

SORT_SCRIPT = """
document.querySelectorAll("table.ic-results th.sortable").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), i = th.cellIndex, asc = th.dataset.dir !== "asc";
    th.dataset.dir = asc ? "asc" : "desc";
    Array.from(table.tBodies).sort(function (a, b) {
      var x = a.rows[0].cells[i].dataset.sort || "", y = b.rows[0].cells[i].dataset.sort || "";
      return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
    }).forEach(function (body) { table.appendChild(body); });
  });
});
"""
