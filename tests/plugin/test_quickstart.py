"""The demo's outcome, as the README states it: 8-bit fails one item (1+0) and passes its
suite gates, its aggregate failing for that one item; 4-bit fails 9 items and both suite
gates; the sweep names q4 (not q8) as its degradation cliff and fails q4's 9 items and its
mean-KL gate (its q8 level passes); every aggregate fails for its failed items; the engine
checks (determinism, batch invariance, stress on in-process mlx-lm) pass.

The quickstart runs once per session (``quickstart_run`` in quickstart_run.py, a subprocess
in a copy of ``examples/quickstart``, plus a ``--collect-only`` run for the node ids in
collection order).
Besides the README's outcome, the run is compared with snapshots recorded from it, so a
refactor can show that it changes nothing (or only what it names as a deliberate fix):

- ``snapshots/quickstart/nodeids.txt``: every collected node id, in collection order;
- ``snapshots/quickstart/summary.txt``: the ``infercheck summary`` section of the terminal
  output, with measured timings masked as ``<t>`` (:data:`SUMMARY_TIMING_COLUMNS`); lines are
  compared with runs of spaces reduced to one, so column widths do not matter;
- ``snapshots/quickstart/results.json``: per item of ``--infercheck-results``, the fields of
  :data:`ITEM_FIELDS` with timing and machine-specific keys of ``data`` dropped
  (:data:`DROPPED_DATA_KEYS`) and floats rounded to 6 significant digits; numbers are compared
  with ``rel=1e-5, abs=1e-9``.

To record the snapshots again (after a deliberate change, named in its commit)::

    INFERCHECK_UPDATE_SNAPSHOTS=1 python -m pytest tests/plugin/test_quickstart.py

With ``INFERCHECK_UPDATE_SNAPSHOTS=1`` the snapshot tests rewrite their file and skip instead
of comparing; review the diff of ``tests/plugin/snapshots/quickstart`` before committing it.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from pytest_infercheck.report.html import render_report
from tests.htmldom import Node, parse

from .quickstart_run import QuickstartRun

SNAPSHOTS = Path(__file__).parent / "snapshots" / "quickstart"
UPDATE = os.environ.get("INFERCHECK_UPDATE_SNAPSHOTS") == "1"

# Fields of each results item kept in the snapshot. Left out: ``duration_s`` (wall clock),
# ``worker`` (xdist) and ``longrepr`` (the failure text, a rendering of ``data`` and
# ``violations``, which are kept).
ITEM_FIELDS = (
    "nodeid",
    "outcome",
    "check",
    "kind",
    "suite",
    "role",
    "name",
    "violations",
    "thresholds",
    "data",
)

# Keys dropped from an item's ``data`` at any depth, chosen from the real data of the
# quickstart's items:
# - wall-clock measurements of the stress levels (``c1``.. items and the stress aggregate's
#   ``levels``): latency percentiles, throughput and the time-weighted mean in flight;
#   ``duration_s`` in case an item records its own. ``max_in_flight`` is kept: for in-process
#   mlx-lm a level runs in batches of ``level`` requests that share one interval, so it is
#   the batch size, the same on every run;
# - ``engines`` (aggregates): engine identities, with the mlx / mlx-lm versions and the models'
#   absolute paths.
# Nothing else in the data depends on the clock or the machine: KL values, token ids, texts,
# flips, first divergences, the batch-invariance batches (seeded) and the determinism outputs
# are the same on every run on mlx CPU.
DROPPED_DATA_KEYS = frozenset(
    {
        "duration_s",
        "latency_p50_s",
        "latency_p95_s",
        "tokens_per_s",
        "achieved_concurrency",
        "engines",
        # one batch per CPU core: the sizes depend on the machine (tests/plugin/test_batching.py)
        "base_batch",
        "test_batch",
    }
)

# Columns of the summary's tables that hold wall-clock measurements (the stress table): the
# whole cell is masked. In "in flight" (mean/max) only the mean (achieved concurrency) is timing;
# the max is kept (see ``max_in_flight`` above).
SUMMARY_TIMING_COLUMNS = frozenset({"p50 s", "p95 s", "tok/s"})
SUMMARY_MEAN_SLASH_COLUMNS = frozenset({"in flight"})
MASK = "<t>"

# Timing figures inside violation strings ("latency 0.41 s", "12.5 tok/s", "300 ms"); none
# appear in the quickstart today, the mask is a safeguard for messages a refactor may add.
TIMING_IN_TEXT = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:tok/s|ms|s)\b")

REL, ABS = 1e-5, 1e-9
SIGNIFICANT = 6


@pytest.fixture(autouse=True)
def _inner_ini() -> None:
    """The quickstart is its own pytest project; no pytester ini is written here."""


def test_demo_outcome_is_what_the_readme_says(quickstart_run: QuickstartRun) -> None:
    assert quickstart_run.returncode == 1, quickstart_run.stdout[-3000:]
    items = quickstart_run.results["items"]
    failed = {(i["check"], i["name"]) for i in items if i["outcome"] != "passed"}
    q8 = {name for check, name in failed if check == "compare(bf16-vs-q8)"}
    q4 = {name for check, name in failed if check == "compare(bf16-vs-q4)"}
    assert q8 == {"e11", "aggregate"}  # 1+0: the one flip; the suite gates pass
    assert "aggregate" in q4 and len(q4 - {"aggregate"}) == 9
    sweep = {name for check, name in failed if check == "sweep(bf16)"}
    assert sweep == {f"{name}[q4]" for name in q4 - {"aggregate"}} | {"aggregate"}
    assert {check for check, _ in failed} == {
        "compare(bf16-vs-q8)",
        "compare(bf16-vs-q4)",
        "sweep(bf16)",
    }
    (q4_gates,) = [
        i for i in items if i["check"] == "compare(bf16-vs-q4)" and i["role"] == "aggregate"
    ]
    assert len(q4_gates["violations"]) == 3  # its failed items, flip rate and mean KL
    assert q4_gates["violations"][0].startswith("9 of 60 items failed: ")
    (q8_gates,) = [
        i for i in items if i["check"] == "compare(bf16-vs-q8)" and i["role"] == "aggregate"
    ]
    assert q8_gates["violations"] == [
        "1 of 60 items failed: e11 (answer flip correct_to_wrong (fail_item_on: correct_to_wrong))"
    ]  # and no suite gate
    kinds = {i["kind"] for i in items if i["outcome"] == "passed" and i["role"] == "aggregate"}
    assert kinds == {"determinism", "batch-invariance", "stress"}


def test_the_sweeps_cliff_is_q4_with_its_evidence(quickstart_run: QuickstartRun) -> None:
    """q8 has 1 flip in 60 but no item above max_kl: against the self-check (nothing failed,
    KL exactly 0) b = c = 0, p = 1. q4 has 9 items above max_kl 0.01 and q8 none: b = 9,
    c = 0, p = 2 C(9,0) / 2^9 = 0.00390625 < 0.05; its mean KL 0.0152 crosses max_mean_kl
    0.005 where q8's 0.00028 does not."""
    (sweep,) = [
        i
        for i in quickstart_run.results["items"]
        if i["check"] == "sweep(bf16)" and i["role"] == "aggregate"
    ]
    data = sweep["data"]
    assert data["cliff"] == "q4@local" and data["cliff_alpha"] == 0.05
    first, q8, q4 = data["cliff_steps"]
    assert (first["level"], first["failed"], first["kl_mean"]) == ("self-check", [], 0.0)
    assert (q8["level"], q8["failed"], q8["p_value"], q8["kl_within"]) == (
        "q8@local",
        [],
        1.0,
        True,
    )
    assert (q4["newly_failed"], q4["recovered"], q4["p_value"]) == (9, 0, 2 / 2**9)
    assert q4["failures_rise"] and q4["kl_crosses"] and q4["kl_within"] is False
    failed, gate = sweep["violations"]
    assert failed.startswith("9 of 121 items failed: ")
    assert gate == "q4@local: mean KL 0.0151764 > max_mean_kl 0.005"
    cliff_line = "sweep(bf16) addition: degradation cliff: q4@local: failed items 0 -> 9 of 60"
    assert cliff_line in quickstart_run.stdout


def _sweep_q8_q4(page: Node) -> tuple[Node, Node]:
    """The verdict matrix's sweep row: its q8 and q4 cells."""
    matrix = [n for n in page.iter("table") if n.attrs.get("id") == "infercheck-verdicts"]
    assert len(matrix) == 1
    header = [th.text() for th in matrix[0].one("thead").all("th")]
    (sweep,) = [
        tr for tr in matrix[0].one("tbody").all("tr") if tr.all("th")[0].text() == "sweep(bf16)"
    ]
    cells = [c for c in sweep.children if isinstance(c, Node)]
    return cells[header.index("q8@local")], cells[header.index("q4@local")]


def _infercheck_elements(page: Node) -> list[Node]:
    """The page's elements of an ``ic-`` class that are not inside another one (the banner
    and the summary section), in page order."""

    def top(node: Node) -> bool:
        parent = node.parent
        while parent is not None:
            if any(c.startswith("ic-") for c in parent.classes):
                return False
            parent = parent.parent
        return True

    return [n for n in page.iter() if any(c.startswith("ic-") for c in n.classes) and top(n)]


def _item_ids(html: str, page: Node, report: str) -> dict[str, str]:
    """``{id: summary text}`` of the item detail views: in the page (standalone), or in
    pytest-html's test data, whose script renders them."""
    if report == "standalone":
        views = list(page.iter("details"))
    else:
        (container,) = [n for n in page.iter("div") if n.attrs.get("id") == "data-container"]
        tests = json.loads(container.attrs["data-jsonblob"])["tests"]
        extras = "".join(e["content"] for runs in tests.values() for t in runs for e in t["extras"])
        views = list(parse(extras).iter("details"))
    return {v.attrs["id"]: v.one("summary").text() for v in views if "id" in v.attrs}


@pytest.mark.parametrize("report", ["pytest-html", "standalone"])
def test_the_report_opens_with_the_banner_and_the_verdicts(
    quickstart_run: QuickstartRun, report: str
) -> None:
    """Both reports open with the banner (the quickstart's counts and worst finding), then the
    verdict matrix. The sweep's q8 passes its gates (its mean KL shown); q4 fails its mean-KL
    gate (its value against the threshold) and its 9 failed items, is named the cliff, and
    links to each of its failed items (the verdict to the first); engine tables come after
    the check tables."""
    if report == "pytest-html":
        html = (quickstart_run.work / "report.html").read_text(encoding="utf-8")
    else:
        html = render_report([quickstart_run.results])
    page = parse(html)
    tops = _infercheck_elements(page)
    if report == "pytest-html":  # the banner in pytest-html's summary, the section below
        banner, section = tops[:2]
    else:  # the banner opens the section
        section = tops[0]
        banner = next(c for c in section.children if isinstance(c, Node))
    assert banner.attrs.get("id") == "infercheck-banner"
    assert " ".join(banner.text().split()).endswith(
        "FAIL: 3 of 6 checks failed, 19 of 364 items failed worst finding: q4@local turned 3 "
        "right answers wrong in compare(bf16-vs-q4) · addition: e12, e13, e14"
    )
    assert section.classes == ["ic-summary"]
    after = [c for c in section.children if isinstance(c, Node) and c.tag != "h2"]
    assert next(c for c in after if c is not banner).attrs.get("id") == "infercheck-verdicts"
    q8, q4 = _sweep_q8_q4(page)
    assert "ic-pass" in q8.classes and q8.one("strong").text() == "PASS"
    assert q8.one("span", "ic-deciding").text() == "mean KL 0.0002805 ± 0.0001"
    assert "ic-fail" in q4.classes and q4.one("strong").text() == "FAIL"
    assert q4.one("span", "ic-note").text() == "degradation cliff"
    deciding = q4.one("span", "ic-deciding").text()
    assert deciding == "mean KL 0.0151764 > max_mean_kl 0.005"
    assert [li.text() for li in q4.one("ul", "ic-also").all("li")] == ["9/60 items failed"]
    verdict, *listed = q4.all("a")
    names = ["e01", "e02", "e03", "e12", "e13", "e14", "a25", "a38", "a40"]
    # in the order the items reported (pytest-html) or the results file lists them
    assert sorted(a.text() for a in listed) == sorted(f"{n}[q4]" for n in names)
    assert verdict.attrs["href"] == listed[0].attrs["href"]
    views = _item_ids(html, page, report)
    for a in listed:
        assert views[a.attrs["href"].removeprefix("#")] == f"sweep(bf16) · addition · {a.text()}"
    (note,) = page.one("ul", "ic-notes").all("li")
    assert note.text().startswith("sweep(bf16) · addition: degradation cliff: q4@local: ")
    headings = [h.text() for h in page.one("section", "ic-summary").all("h3")]
    assert headings.index("engines") > headings.index("sweep(bf16) · addition")


def test_only_the_failed_level_of_the_sweep_fails(quickstart_run: QuickstartRun) -> None:
    """Terminal: the sweep's q8 row passes (it failed no item and no gate), its q4 row fails;
    pytest's -rf line of the sweep aggregate starts with its failed items (q4's), and a
    prompt item's with its first violation."""
    rows = grouped_rows(summary_section(quickstart_run.stdout))
    assert rows[("sweep(bf16) addition", "q8@local")] == "PASS"
    assert rows[("sweep(bf16) addition", "q4@local")] == "FAIL"
    lines = quickstart_run.stdout.splitlines()
    aggregate = "FAILED infercheck.yaml::sweep(bf16)::addition::aggregate - "
    (line,) = [x for x in lines if x.startswith(aggregate)]
    assert line.startswith(aggregate + "9 of 121 items failed: ")
    (item,) = [
        i for i in quickstart_run.results["items"] if i["nodeid"].endswith("q8)::addition::e11")
    ]
    (line,) = [x for x in lines if x.startswith(f"FAILED {item['nodeid']} - ")]
    assert line.endswith(f" - {item['violations'][0]}")


# --- snapshots ---------------------------------------------------------------------------


def _write_or_read(name: str, text: str) -> str:
    """The snapshot file's text; with INFERCHECK_UPDATE_SNAPSHOTS=1, ``text`` is written to it
    and the test skips."""
    path = SNAPSHOTS / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        pytest.skip(f"INFERCHECK_UPDATE_SNAPSHOTS=1: rewrote {path.relative_to(REPO)}")
    if not path.exists():
        pytest.fail(f"no snapshot {path}; record it with INFERCHECK_UPDATE_SNAPSHOTS=1")
    return path.read_text()


def _first_line_diff(expected: list[str], actual: list[str], what: str) -> str:
    """A message naming the first differing line, with a unified diff (truncated)."""
    at = next(
        (i for i, (e, a) in enumerate(zip(expected, actual, strict=False)) if e != a),
        min(len(expected), len(actual)),
    )
    first = (
        f"line {at + 1}: expected {expected[at]!r}, got {actual[at]!r}"
        if at < min(len(expected), len(actual))
        else f"{len(expected)} lines expected, {len(actual)} got"
    )
    diff = list(difflib.unified_diff(expected, actual, "snapshot", "this run", lineterm=""))
    shown = "\n".join(diff[:60]) + ("\n..." if len(diff) > 60 else "")
    return f"{what} differs from the snapshot; first at {first}\n{shown}"


def test_quickstart_node_ids_unchanged(quickstart_run: QuickstartRun) -> None:
    nodeids = quickstart_run.nodeids
    # The collect-only listing is complete, and matches the items of the results file.
    assert len(nodeids) == quickstart_run.collected
    assert len(set(nodeids)) == len(nodeids)
    result_ids = [i["nodeid"] for i in quickstart_run.results["items"]]
    assert sorted(result_ids) == sorted(nodeids)

    expected = _write_or_read("nodeids.txt", "".join(f"{n}\n" for n in nodeids)).splitlines()
    if expected != nodeids:
        missing = sorted(set(expected) - set(nodeids), key=expected.index)
        extra = sorted(set(nodeids) - set(expected), key=nodeids.index)
        pytest.fail(
            f"{len(missing)} node ids missing {missing[:5]}, {len(extra)} new {extra[:5]}\n"
            + _first_line_diff(expected, nodeids, "node id list"),
            pytrace=False,
        )


# --- summary ---


def _cells(line: str) -> list[tuple[int, int, str]]:
    """The cells of a table line as (start, end, text): runs separated by two or more spaces
    (the tables of the terminal report join their cells with two spaces)."""
    return [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line)]


def _mask_cell(cell: str, column: str) -> str:
    if column in SUMMARY_TIMING_COLUMNS:
        return MASK
    _, slash, rest = cell.partition("/")
    return MASK + slash + rest


def _separator(line: str) -> str | None:
    """``== title ==`` for a pytest separator line (its width is the terminal's)."""
    m = re.fullmatch(r"=+ (.*?) =+", line.strip())
    return f"== {m.group(1)} ==" if m else None


def summary_section(stdout: str) -> list[str]:
    """The lines of the ``infercheck summary`` section with the timing cells masked: from its
    separator (normalised) to the next ``==`` separator line or ``--`` note (pytest-html's
    ``Generated html report``), excluded."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if _separator(line) == "== infercheck summary =="]
    assert len(starts) == 1, "no (or several) infercheck summary sections:\n" + stdout[-3000:]
    out = ["== infercheck summary =="]
    header: list[str] | None = None  # column names of the current table with timing columns
    for line in lines[starts[0] + 1 :]:
        if line.startswith("==") or re.fullmatch(r"-+ .* -+", line):  # next section, or a note
            break
        cells = _cells(line)
        names = [text for _, _, text in cells]
        if SUMMARY_TIMING_COLUMNS.intersection(names):
            header = names
        elif header is not None and len(cells) == len(header):
            # right to left, so the spans of the cells still to mask stay valid
            for (start, end, text), column in reversed(list(zip(cells, header, strict=True))):
                if column in SUMMARY_TIMING_COLUMNS | SUMMARY_MEAN_SLASH_COLUMNS:
                    masked = _mask_cell(text, column).rjust(end - start)
                    line = line[:start] + masked + line[end:]
        else:
            header = None
        out.append(line.rstrip())
    return out


def grouped_rows(section: list[str]) -> dict[tuple[str, str], str]:
    """``(group line, test side) -> verdict`` of the comparison table: rows are indented under
    a line ``compare(bf16-vs-q4) addition:`` of their check x suite."""
    rows: dict[tuple[str, str], str] = {}
    group: str | None = None
    for line in section:
        if not line.startswith(" "):
            group = line[:-1] if line.endswith(":") else None
        elif group is not None:
            cells = line.split()
            rows[(group, cells[0])] = cells[-1]
    return rows


def test_the_summary_is_under_100_columns_in_one_spelling(quickstart_run: QuickstartRun) -> None:
    """Every line of the terminal summary (comparisons, the sweep and its cliff, determinism,
    batch invariance, stress) is under 100 columns as printed; verdicts are PASS and FAIL,
    the standard error is ±, and no Python dict is printed; the run prints no
    PytestDeprecationWarning (the quickstart's pytest.ini sets the asyncio loop scope)."""
    lines = quickstart_run.stdout.splitlines()
    (start,) = [i for i, line in enumerate(lines) if "infercheck summary" in line]
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("==", "--")))
    section = lines[start + 1 : end]
    assert len(section) > 15
    wide = [line for line in section if len(line) >= 100]
    assert not wide, "\n".join(wide)
    words = {w for line in section for w in line.split()}
    assert {"PASS", "FAIL"} <= words and not {"pass", "fail"} & words
    text = "\n".join(section)
    assert "+-" not in text and "±" in text and "{'" not in text
    assert "PytestDeprecationWarning" not in quickstart_run.stdout


def _squeeze(lines: list[str]) -> list[str]:
    return [" ".join(line.split()) for line in lines]


def test_quickstart_summary_unchanged(quickstart_run: QuickstartRun) -> None:
    section = summary_section(quickstart_run.stdout)
    expected = _write_or_read("summary.txt", "".join(f"{line}\n" for line in section))
    want, got = _squeeze(expected.splitlines()), _squeeze(section)
    if want != got:
        pytest.fail(
            _first_line_diff(want, got, "infercheck summary (spaces squeezed)"), pytrace=False
        )


# --- results ---


def _normalise(value: Any, paths: dict[str, str]) -> Any:
    """``value`` without :data:`DROPPED_DATA_KEYS`, floats rounded to :data:`SIGNIFICANT`
    digits, and the machine's paths (``paths``: prefix -> placeholder) replaced."""
    if isinstance(value, dict):
        return {k: _normalise(v, paths) for k, v in value.items() if k not in DROPPED_DATA_KEYS}
    if isinstance(value, list):
        return [_normalise(v, paths) for v in value]
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{SIGNIFICANT}g}")
    if isinstance(value, str):
        for prefix, placeholder in paths.items():
            value = value.replace(prefix, placeholder)
    return value


def snapshot_items(run: QuickstartRun) -> list[dict[str, Any]]:
    """The results items as recorded in ``results.json``, in collection order."""
    paths = {str(run.work): "<work>"}
    paths.update({str(p): f"<model:{name}>" for name, p in run.models.items()})
    order = {n: i for i, n in enumerate(run.nodeids)}
    items = sorted(run.results["items"], key=lambda i: order.get(i["nodeid"], len(order)))
    out = []
    for item in items:
        kept = {f: _normalise(item.get(f), paths) for f in ITEM_FIELDS}
        kept["violations"] = [TIMING_IN_TEXT.sub(MASK, v) for v in kept["violations"] or []]
        out.append(kept)
    return out


def _dumps(value: Any, indent: str = "") -> str:
    """JSON with sorted keys, one key per line, lists of scalars on one line (readable diffs)."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        body = ",\n".join(
            f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in sorted(value.items())
        )
        return "{\n" + body + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def _walk_diff(expected: Any, actual: Any, path: str) -> Iterator[str]:
    """Every difference as ``path: expected ..., got ...`` (numbers within REL / ABS)."""
    number = (int, float)
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(expected.keys() | actual.keys()):
            at = f"{path}.{key}" if path else key
            if key not in actual:
                yield f"{at}: missing (expected {expected[key]!r})"
            elif key not in expected:
                yield f"{at}: new key (got {actual[key]!r})"
            else:
                yield from _walk_diff(expected[key], actual[key], at)
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            yield f"{path}: {len(expected)} elements expected, {len(actual)} got"
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            yield from _walk_diff(e, a, f"{path}[{i}]")
    elif (
        isinstance(expected, number)
        and isinstance(actual, number)
        and not isinstance(expected, bool)
        and not isinstance(actual, bool)
    ):
        if not math.isclose(expected, actual, rel_tol=REL, abs_tol=ABS):
            yield f"{path}: expected {expected!r}, got {actual!r}"
    elif expected != actual or type(expected) is not type(actual):
        yield f"{path}: expected {expected!r}, got {actual!r}"


def results_diff(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> str | None:
    """None when equal; otherwise a message naming the first differing node id and key path."""
    want = {i["nodeid"]: i for i in expected}
    got = {i["nodeid"]: i for i in actual}
    problems: list[str] = []
    missing = [n for n in want if n not in got]
    new = [n for n in got if n not in want]
    if missing:
        problems.append(f"{len(missing)} items missing from this run: {missing[:5]}")
    if new:
        problems.append(f"{len(new)} items not in the snapshot: {new[:5]}")
    differing: list[tuple[str, list[str]]] = []
    for nodeid, item in want.items():
        if nodeid in got and (diffs := list(_walk_diff(item, got[nodeid], ""))):
            differing.append((nodeid, diffs))
    if differing:
        nodeid, diffs = differing[0]
        shown = "\n".join(f"  {d}" for d in diffs[:10])
        more = f"\n  ... {len(diffs) - 10} more" if len(diffs) > 10 else ""
        others = [n for n, _ in differing[1:6]]
        problems.append(
            f"{len(differing)} items differ; first {nodeid}:\n{shown}{more}"
            + (f"\nother differing items: {others}" if others else "")
        )
    return "\n".join(problems) or None


def test_quickstart_results_unchanged(quickstart_run: QuickstartRun) -> None:
    items = snapshot_items(quickstart_run)
    expected = json.loads(_write_or_read("results.json", _dumps(items) + "\n"))
    problem = results_diff(expected, items)
    if problem:
        pytest.fail(
            "results differ from snapshots/quickstart/results.json\n" + problem, pytrace=False
        )


def test_the_quickstart_is_measured_in_its_own_process(quickstart_run: QuickstartRun) -> None:
    """The quickstart is one run in one process even when this module runs in an xdist worker
    (``-n 2``): each stress level says it was measured by ``main``. Before, the run inherited
    the worker's ``PYTEST_XDIST_WORKER`` and its levels said ``gw0`` or ``gw1``, so
    ``test_quickstart_results_unchanged`` failed under ``-n 2`` only."""
    levels = [i for i in quickstart_run.results["items"] if i["role"] == "level"]
    assert {i["name"] for i in levels} == {"c1", "c4", "c16"}
    assert {i["data"]["measured_by"] for i in levels} == {"main"}


ANNOTATED = [REPO / "docs" / "tutorials" / "quickstart.md", REPO / "README.md"]
"""Pages that show q4's failed item e12 as pytest prints it, with ``# (n)`` notes."""


@pytest.mark.parametrize("page", ANNOTATED, ids=lambda p: str(p.relative_to(REPO)))
def test_the_annotated_failure_is_what_pytest_prints(
    quickstart_run: QuickstartRun, page: Path
) -> None:
    """The sample failure of the docs is the quickstart's own, line for line (the notes
    aside): a change of the failure text that leaves the docs behind fails here."""
    title = "compare(bf16-vs-q4)::addition::e12"
    blocks = re.findall(r"^```text\n(.*?)^```", page.read_text(), re.S | re.M)
    (shown,) = [b for b in blocks if re.match(rf"_+ {re.escape(title)} _+\n", b)]
    shown_lines = [re.sub(r"\s+# \(\d\)$", "", line) for line in shown.splitlines()[1:]]
    printed = quickstart_run.stdout.splitlines()
    start = next(
        i for i, line in enumerate(printed) if re.fullmatch(rf"_+ {re.escape(title)} _+", line)
    )
    end = next(i for i in range(start + 1, len(printed)) if re.match(r"^_{3,} ", printed[i]))
    assert shown_lines == [line.rstrip() for line in printed[start + 1 : end]]
