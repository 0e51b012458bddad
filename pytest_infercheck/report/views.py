"""The detail view of one item, from its record (``check, kind, suite, role, name,
thresholds, violations, data``; see ``collect.SuiteCollector.record``).

Each kind declares a view per role (:attr:`..checks.framework.kind.CheckKind.views`); anything
else (and any view that meets data it does not expect) falls back to an escaped key/value
table, so a new kind or a missing key never breaks a report. Every view starts with the
thresholds the item broke and ends with the ones it was held to. Passed items are collapsed
(``<details>``), failed ones open; each has an id the verdict matrix links to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checks.framework.outcome import DEFERRED
from ..checks.registry import kind_named
from ..render.markup import esc, kv_table, mapping, violations_list
from ..render.views import VIEW_THRESHOLDS, generic


def degenerate_view(scan: Any) -> str:
    """An item's degenerate findings (its scan's ``found``) or an aggregate's count (its
    ``items``), escaped; nothing when none were found."""
    scan = mapping(scan)
    if not scan.get("found"):
        return ""
    if isinstance(scan["found"], list):  # an item's scan
        texts = [mapping(f).get("text") for f in scan["found"]]
        head = f"{len(texts)} of {scan.get('generations')} generations"
    else:  # an aggregate's count
        texts = list(scan.get("items") or [])
        head = f"{scan['found']} of {scan.get('generations')} generations"
    rows = "".join(f"<li>{esc(t)}</li>" for t in texts)
    return f"<h4>degenerate output: {esc(head)}</h4><ul>{rows}</ul>"


def item_detail(
    record: Mapping[str, Any], outcome: str | None = None, anchor: str | None = None
) -> str:
    """The whole detail block of one item, with the id ``anchor`` (the verdict matrix links
    to it); ``outcome`` (passed, failed, ...) decides whether it starts collapsed (passed)
    and colours its title. The broken thresholds come first, then the kind's view, then the
    thresholds the item was held to."""
    data = mapping(record.get("data"))
    kind = kind_named(record.get("kind"))
    view = None if kind is None else kind.present.views.get(str(record.get("role")))
    thresholds = mapping(record.get("thresholds"))
    try:
        body = view({**data, VIEW_THRESHOLDS: thresholds}) if view is not None else generic(data)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        body = f'<p class="ic-none">({esc(type(err).__name__)} in the detail view)</p>'
        body += generic(data)
    deferred = record.get("gates_deferred_to")
    if deferred:
        body += f"<p><b>{esc(DEFERRED.format(shard=deferred))}</b></p>"
    body += degenerate_view(record.get("degenerate"))
    head = "<h4>violations</h4>" + violations_list(record.get("violations"))
    tail = "<h4>thresholds</h4>" + kv_table(thresholds)
    title = " · ".join(
        esc(record.get(key)) for key in ("check", "suite", "name") if record.get(key) is not None
    )
    state = f" ic-{esc(outcome)}" if outcome else ""
    is_open = "" if outcome in ("passed", "skipped") else " open"
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return (
        f'<details{ident} class="ic-detail{state}"{is_open}><summary>{title}</summary>'
        f"{head}{body}{tail}</details>"
    )
