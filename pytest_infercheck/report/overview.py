"""The run at a glance: the overall verdict (the banner that opens the HTML report, the head of
the GitHub job summary), the worst finding in words, and which failing items belong to which
cell of the verdict matrix (the cells link to them).

Everything here reads items as the reports see them: mappings with the record's keys
(``check, kind, suite, role, name, violations, data``) plus ``nodeid`` and ``outcome``
(``passed``, ``failed``, ``error``, ``skipped``). An item whose record was never made (it
errored before its call) has its identity only.

- A *check* is a check x suite (the rows of the verdict matrix); it failed when any of its
  items (its aggregate included) failed or errored.
- An *item* is any item but an aggregate; failed counts the failed and the errored ones.
- The *worst finding* is the first that exists of: right answers turned wrong (a prompt item
  that failed with the flip ``correct_to_wrong``; the check x test side with the most of
  them, named with its first prompts), items that errored (the instrument could not
  measure), the first failed prompt item's first violation, the first failed aggregate's
  first violation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from ..checks.framework.kind import Distribution, Verdict
from ..checks.registry import kind_named
from ..render.markup import esc, mapping

FAILING = ("failed", "error")
"""The outcomes that fail an item."""
NAMED = 3
"""Items named in a finding before ``and N more``."""


def item_anchor(nodeid: Any, run: str = "") -> str:
    """The HTML id of an item's detail view: ``ic-item-`` and 12 hex digits of the SHA-1 of its
    node id (node ids hold ``::``, brackets and spaces; this is a valid, stable fragment),
    after ``run`` (a run's label, when a page shows several runs)."""
    key = f"{run}\n{nodeid}" if run else str(nodeid)
    return "ic-item-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def is_failing(item: Mapping[str, Any]) -> bool:
    return item.get("outcome") in FAILING


def _key(item: Mapping[str, Any]) -> tuple[str, str]:
    return str(item.get("check", "?")), str(item.get("suite", "?"))


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


@dataclass(frozen=True)
class Overview:
    """The counts and the worst finding of a run (see the module docstring)."""

    checks: int
    checks_failed: int
    items: int
    items_failed: int
    worst: str | None
    """The worst finding in words; None when nothing failed."""

    @property
    def passed(self) -> bool:
        return self.checks_failed == 0 and self.items_failed == 0

    def counts(self) -> str:
        """``3 of 6 checks failed, 19 of 364 items failed``."""
        return (
            f"{self.checks_failed} of {self.checks} check{'s' if self.checks != 1 else ''} "
            f"failed, {self.items_failed} of {self.items} item{'s' if self.items != 1 else ''} "
            "failed"
        )


def worst_finding(items: Sequence[Mapping[str, Any]]) -> str | None:
    """The worst finding among ``items`` in words (see the module docstring)."""
    failing = [i for i in items if is_failing(i)]
    turned: dict[tuple[str, str, str], list[str]] = {}
    for item in failing:
        data = mapping(item.get("data"))
        if item.get("role") != "aggregate" and data.get("flip") == "correct_to_wrong":
            side = str(data.get("test", data.get("target", "the test side")))
            turned.setdefault((*_key(item), side), []).append(str(item.get("name", "?")))
    if turned:
        (check, suite, side), names = max(turned.items(), key=lambda kv: len(kv[1]))
        answers = "right answer" if len(names) == 1 else "right answers"
        return f"{side} turned {len(names)} {answers} wrong in {check} · {suite}: {_named(names)}"
    errored = [i for i in failing if i.get("outcome") == "error"]
    if errored:
        first = errored[0]
        what = "item errored" if len(errored) == 1 else "items errored"
        return f"{len(errored)} {what} (not measured): {_where(first)}" + _first_violation(first)
    for role in ("prompt-like", "aggregate"):
        for item in failing:
            if (item.get("role") == "aggregate") == (role == "aggregate"):
                return _where(item) + _first_violation(item)
    return None


def _where(item: Mapping[str, Any]) -> str:
    check, suite = _key(item)
    name = item.get("name")
    return f"{check} · {suite}" + (f" · {name}" if name not in (None, "aggregate") else "")


def _first_violation(item: Mapping[str, Any]) -> str:
    violations = item.get("violations") or []
    if violations:
        return f": {violations[0]}"
    text = str(item.get("longrepr") or "").strip().splitlines()
    return f": {text[-1]}" if text else ""


def overview(items: Sequence[Mapping[str, Any]]) -> Overview:
    """The :class:`Overview` of one run's items."""
    checks: dict[tuple[str, str], bool] = {}
    for item in items:
        key = _key(item)
        checks[key] = checks.get(key, False) or is_failing(item)
    members = [i for i in items if i.get("role") != "aggregate"]
    return Overview(
        checks=len(checks),
        checks_failed=sum(checks.values()),
        items=len(members),
        items_failed=sum(1 for i in members if is_failing(i)),
        worst=worst_finding(items),
    )


def banner_html(summary: Overview, title: str | None = None) -> str:
    """The banner (element id ``infercheck-banner``): FAIL or PASS, the counts, the worst
    finding; escaped."""
    verdict = "PASS" if summary.passed else "FAIL"
    cls = "ic-banner-pass" if summary.passed else "ic-banner-fail"
    head = f"{esc(title)}: " if title else ""
    worst = ""
    if summary.worst:
        text = f'<span class="ic-worst-text">{esc(summary.worst)}</span>'
        worst = f'<p class="ic-worst">worst finding: {text}</p>'

    return (
        f'<div id="infercheck-banner" class="ic-banner {cls}">'
        f'<p class="ic-banner-head">{head}<strong>{verdict}</strong>: '
        f'<span class="ic-counts">{esc(summary.counts())}</span></p>\n{worst}</div>'
    )


def failing_by_cell(
    items: Iterable[Mapping[str, Any]], check: str, suite: str, cells: Sequence[Verdict]
) -> dict[str | None, list[Mapping[str, Any]]]:
    """The failing items (aggregates left out) of one check x suite by the column of the
    verdict matrix they belong to: the column named by the item's ``test`` or ``target``
    (a comparison's test side), else the one whose title ends with the item's name (a stress
    level ``c4`` in ``q4@local c4``), else the only column; None: the row's (not placed)."""
    titles = [c.column for c in cells]
    out: dict[str | None, list[Mapping[str, Any]]] = {}
    for item in items:
        if _key(item) != (check, suite) or not is_failing(item) or item.get("role") == "aggregate":
            continue
        data = mapping(item.get("data"))
        name = str(item.get("name", ""))
        found = [t for t in (data.get("test"), data.get("target")) if t in titles]
        if not found:
            found = [t for t in titles if name and t.endswith(f" {name}")]
        if not found and len(titles) == 1:
            found = titles
        out.setdefault(found[0] if found else None, []).append(item)
    return out


KEPT_DATA = ("flip", "test", "target")
"""What the banner and the matrix's links read of an item's data (:mod:`.overview`)."""


def slim(record: Mapping[str, Any], dist: Distribution | None) -> dict[str, Any]:
    """What the summary needs of an item that is not an aggregate: its identity, violations
    and :data:`KEPT_DATA`, and the value and group of the distribution its kind draws, so a
    run of many prompts does not keep every output in memory until the end."""
    data = mapping(record.get("data"))
    keep = (*KEPT_DATA, *((dist.group, dist.value) if dist is not None else ()))
    return {
        **{k: record.get(k) for k in ("check", "kind", "suite", "role", "name", "violations")},
        "data": {k: data[k] for k in keep if k in data},
    }


def entry(report: pytest.TestReport) -> dict[str, Any] | None:
    """The summary's entry of an infercheck item's report (None for other reports): the
    whole record of an aggregate, a :func:`slim` one of any other item (its call report);
    the identity of an item that failed without a record (``error`` in its setup, ``failed``
    in its call), with the last line of its failure."""
    record = getattr(report, "infercheck", None)
    if report.when == "call" and isinstance(record, Mapping):
        kind = kind_named(record.get("kind"))
        dist = None if kind is None else kind.present.distribution
        kept = dict(record) if record.get("role") == "aggregate" else slim(record, dist)
        return {**kept, "nodeid": report.nodeid, "outcome": report.outcome}
    stub = getattr(report, "infercheck_item", None)
    if report.when in ("setup", "call") and report.failed and isinstance(stub, Mapping):
        outcome = "error" if report.when == "setup" else "failed"
        return {**stub, "nodeid": report.nodeid, "outcome": outcome, "longrepr": _last(report)}
    return None


def _last(report: pytest.TestReport) -> str:
    lines = str(report.longrepr or "").strip().splitlines()
    return lines[-1] if lines else ""
