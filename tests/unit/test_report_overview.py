"""The run at a glance (report/overview.py), every broken gate and the sweep's cliff in the
verdict matrix, the matrix's links to the failing items, and the GitHub job summary
(report/step_summary.py), on hand-made records."""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_infercheck.checks.comparison.aggregate import ComparisonAggregateRecord, aggregate
from pytest_infercheck.checks.comparison.present import side_verdicts, sweep_notes
from pytest_infercheck.records import plain_data
from pytest_infercheck.report.html import render_report
from pytest_infercheck.report.overview import failing_by_cell, item_anchor, overview
from pytest_infercheck.report.pytest_html import engine_versions
from pytest_infercheck.report.step_summary import markdown, md
from pytest_infercheck.report.summary import RunView, summary_html
from pytest_infercheck.specs import FlipThresholds, Thresholds
from tests.htmldom import parse

from .factories import prompt_comparison

SCRIPT = "<script>alert(1)</script>"
GATES = Thresholds(max_kl=0.2, max_mean_kl=0.15, flips=FlipThresholds(max_rate=0.1))


def _compare() -> dict[str, Any]:
    """q4 against bf16 on two prompts: ``a`` (KL 0.1, unchanged) and ``b`` (KL 0.3 > max_kl
    0.2, its right answer turned wrong). Mean KL (0.1 + 0.3) / 2 = 0.2 > 0.15; flips 1 of 2,
    whose Wilson upper bound is above 0.1: the side breaks both suite gates and has 1 failed
    item."""
    results = [
        prompt_comparison("a", [0.1], flip="unchanged"),
        prompt_comparison("b", [0.3], flip="correct_to_wrong"),
    ]
    level = aggregate(results, GATES)
    record = ComparisonAggregateRecord("compare", "s", [level], {}, tests=["q4@local"])
    return plain_data(record)


def _items() -> list[dict[str, Any]]:
    agg = {
        "nodeid": "m.yaml::compare(bf16-vs-q4)::s::aggregate",
        "check": "compare(bf16-vs-q4)",
        "kind": "compare",
        "suite": "s",
        "role": "aggregate",
        "name": "aggregate",
        "outcome": "failed",
        "violations": ["1 of 2 items failed: b"],
        "data": _compare(),
    }
    prompt = {
        "check": "compare(bf16-vs-q4)",
        "kind": "compare",
        "suite": "s",
        "role": "prompt",
    }
    a = {**prompt, "nodeid": "m.yaml::compare(bf16-vs-q4)::s::a", "name": "a", "outcome": "passed"}
    b = {
        **prompt,
        "nodeid": "m.yaml::compare(bf16-vs-q4)::s::b",
        "name": "b",
        "outcome": "failed",
        "violations": ["answer flip correct_to_wrong", "mean KL 0.3 > max_kl 0.2"],
        "data": {"flip": "correct_to_wrong", "test": "q4@local"},
    }
    other = {
        "nodeid": "m.yaml::determinism(q4)::s::d1",
        "check": "determinism(q4)",
        "kind": "determinism",
        "suite": "s",
        "role": "prompt",
        "name": "d1",
        "outcome": "error",
        "longrepr": "BackendError: HTTP 500\nserver said: boom",
    }
    return [a, b, agg, other]


def test_a_cell_shows_every_broken_gate_and_its_failed_items() -> None:
    (cell,) = side_verdicts(_compare(), False, [])
    assert cell.verdict == "fail"
    # the gates in the order declared (mean KL, flip rate), then the failed items
    assert cell.reasons[0] == "mean KL 0.2 > max_mean_kl 0.15"
    assert cell.reasons[1].startswith("flip rate (upper 95% Wilson bound, 1/2 answered) ")
    assert cell.reasons[2] == "1/2 items failed" and cell.deciding == cell.reasons[0]
    page = parse(summary_html([RunView("r", _items())]))
    td = page.one("table", "ic-verdicts").one("tbody").all("tr")[0].all("td")[-1]
    assert td.one("span", "ic-deciding").text() == cell.reasons[0]
    assert [li.text() for li in td.one("ul", "ic-also").all("li")] == list(cell.reasons[1:])
    (link,) = td.one("div", "ic-failed-items").all("a")
    assert link.text() == "b" and link.attrs["href"] == "#" + item_anchor(_items()[1]["nodeid"])
    verdict_link = td.all("a")[0]
    assert verdict_link.attrs["href"] == link.attrs["href"]  # the cell's first failing item


def test_a_sweep_names_its_cliff_in_the_cell_and_under_the_matrix() -> None:
    data = _compare()
    data.update(cliff="q4@local", cliff_alpha=0.05, cliff_steps=[], check="sweep")
    (cell,) = side_verdicts(data, False, [])
    assert cell.note == "degradation cliff"
    assert sweep_notes(data) == ["degradation cliff: q4@local"]
    assert sweep_notes(_compare()) == []
    item = {**_items()[2], "kind": "sweep", "check": "sweep(bf16)", "data": data}
    page = parse(summary_html([RunView("r", [item])]))
    assert page.one("span", "ic-note").text() == "degradation cliff"
    assert page.one("ul", "ic-notes").text() == "sweep(bf16) · s: degradation cliff: q4@local"


def test_the_overview_counts_checks_and_items_and_names_the_worst_finding() -> None:
    found = overview(_items())
    # checks: compare x s (failed), determinism x s (errored); items: a, b, d1 (b, d1 failed)
    assert (found.checks, found.checks_failed, found.items, found.items_failed) == (2, 2, 3, 2)
    assert found.counts() == "2 of 2 checks failed, 2 of 3 items failed"
    # a right answer turned wrong comes before an errored item
    assert found.worst == "q4@local turned 1 right answer wrong in compare(bf16-vs-q4) · s: b"
    without_flip = [i for i in _items() if i.get("name") != "b"]
    assert overview(without_flip).worst == (
        "1 item errored (not measured): determinism(q4) · s · d1: server said: boom"
    )
    only_aggregate = [i for i in _items() if i.get("name") == "aggregate"]
    assert overview(only_aggregate).worst == "compare(bf16-vs-q4) · s: 1 of 2 items failed: b"
    passed = [i for i in _items() if i.get("name") == "a"]
    assert overview(passed).passed and overview(passed).worst is None


def test_failing_items_are_placed_in_their_cell() -> None:
    (cell,) = side_verdicts(_compare(), False, [])
    placed = failing_by_cell(_items(), "compare(bf16-vs-q4)", "s", [cell])
    assert {k: [i["name"] for i in v] for k, v in placed.items()} == {"q4@local": ["b"]}
    # a stress check's levels: placed by the item's name
    stress = [cell._replace(column=c) for c in ("q4@local c1", "q4@local c4")]
    level = {**_items()[1], "name": "c4", "data": {}}
    assert list(failing_by_cell([level], "compare(bf16-vs-q4)", "s", stress)) == ["q4@local c4"]


def test_the_banner_opens_the_standalone_report_and_every_link_lands() -> None:
    items = _items()
    items[1] = {**items[1], "name": SCRIPT, "violations": [SCRIPT]}
    html = render_report([{"run": {}, "items": items}])
    page = parse(html)
    (script,) = page.all("script")  # the table sorter only
    assert "alert" not in script.text()
    section = page.one("section", "ic-summary")
    banner = next(n for n in section.children if not isinstance(n, str))  # before its heading
    assert banner.attrs["id"] == "infercheck-banner"
    assert "FAIL: 2 of 2 checks failed, 2 of 3 items failed" in " ".join(banner.text().split())
    assert SCRIPT in banner.text()
    ids = {n.attrs["id"] for n in page.iter() if "id" in n.attrs}
    hrefs = [a.attrs["href"] for a in page.one("table", "ic-verdicts").all("a")]
    assert hrefs and all(h.removeprefix("#") in ids for h in hrefs)
    ident = item_anchor(items[1]["nodeid"])
    detail = next(n for n in page.iter("details") if n.attrs.get("id") == ident)
    assert detail.all("h4")[0].text() == "violations"  # violations first


def test_engine_versions_are_named_and_escaped() -> None:
    versions = engine_versions(
        [
            {"kind": "mlx-lm", "name": "local", "mlx": "0.32.4", "mlx-lm": "0.32.2"},
            {"kind": "mlx-lm", "name": "other", "mlx": "0.32.4", "mlx-lm": "0.32.2"},
            {"kind": "llama-server", "name": "llama", "build_info": f"b1-{SCRIPT}"},
            {"kind": "vllm", "name": "v", "version": "0.32.0"},
            {"kind": "openai", "name": "api"},
        ]
    )
    assert versions == {
        "mlx": "0.32.4",
        "mlx-lm": "0.32.2",
        "llama.cpp build": "b1-&lt;script&gt;alert(1)&lt;/script&gt;",
        "vllm": "0.32.0",
        "openai (api)": "not reported",
    }


def test_the_job_summary_is_escaped_markdown() -> None:
    assert md("a|b <i>x</i> *y*\nz") == r"a\|b &lt;i&gt;x&lt;/i&gt; \*y\* z"
    items = _items()
    items[1] = {**items[1], "violations": [f"{SCRIPT} | [link](http://x)"]}
    text = markdown(items, "my <title>")
    lines = text.splitlines()
    assert lines[0] == r"## my &lt;title&gt;: FAIL"
    assert lines[2] == "2 of 2 checks failed, 2 of 3 items failed."
    assert "<" not in text and r"\[link\](http://x)" in text  # no tag, no link
    header = next(line for line in lines if line.startswith("| check"))
    assert header == r"| check | suite | q4@local |"
    (row,) = [line for line in lines if line.startswith("| compare")]
    assert row.count(" | ") == 2  # every pipe inside a cell is escaped
    assert "mean KL 0.2 &gt; max\\_mean\\_kl 0.15" in row and "1/2 items failed" in row
    failed = lines[lines.index("### Failed items (2)") + 2 :]
    assert failed[0].startswith("- `m.yaml::compare(bf16-vs-q4)::s::b`: &lt;script&gt;")
    assert (
        failed[1] == "- `m.yaml::determinism(q4)::s::d1`: BackendError: HTTP 500 server said: boom"
    )


def test_the_flip_matrix_counts_correct_and_wrong_before_and_after() -> None:
    from pytest_infercheck.checks.comparison.aggregate import answer_matrix
    from pytest_infercheck.metrics.answers import judge_answers
    from pytest_infercheck.render.views import flip_matrix, flip_matrix_line

    assert judge_answers("number", "4", "4", "5").base_correct is True
    assert judge_answers("number", "4", "3", "3").base_correct is False
    assert judge_answers("number", "4", "no answer", "4").base_correct is False
    assert judge_answers("number", None, "4", "5").base_correct is None

    def comparison(pid: str, flip: str, base_correct: bool | None) -> Any:
        record = prompt_comparison(pid, [0.0], flip=flip)
        return dataclasses.replace(record, base_correct=base_correct)

    results = [
        comparison("a", "unchanged", True),  # correct -> correct
        comparison("b", "unchanged", True),
        comparison("c", "correct_to_wrong", True),
        comparison("d", "unchanged", False),  # the same wrong answer
        comparison("e", "wrong_to_wrong", False),
        comparison("f", "wrong_to_correct", False),
        comparison("g", "changed", None),  # no reference: not counted
    ]
    counts = answer_matrix(results)
    assert counts == {
        "correct_to_correct": 2,
        "correct_to_wrong": 1,
        "wrong_to_correct": 1,
        "wrong_to_wrong": 2,
    }
    assert answer_matrix(results[-1:]) == {}
    table = parse(flip_matrix(counts)).one("table")
    rows = [[td.text() for td in tr.all("td")] for tr in table.one("tbody").all("tr")]
    assert rows == [["correct", "2", "1"], ["wrong", "1", "2"]]
    assert [s.text() for s in table.all("span", "ic-flip")] == ["1", "1"]
    assert flip_matrix({}) == "-"
    line = parse(f"<p>{flip_matrix_line(counts)}</p>").one("p")
    assert line.text() == "correct→correct 2, correct→wrong 1wrong→correct 1, wrong→wrong 2"
    assert [s.text() for s in line.all("span", "ic-flip")] == ["correct→wrong 1", "wrong→correct 1"]


def test_an_item_that_failed_without_a_record_is_counted_and_linkable() -> None:
    """An item whose setup failed has only its identity: the banner counts it as errored and
    its pytest-html extra is a view with the id the matrix links to."""
    from pathlib import Path

    import pytest

    from pytest_infercheck.report.overview import entry
    from pytest_infercheck.report.pytest_html import HtmlReport

    nodeid = "m.yaml::compare(bf16-vs-q4)::s::b"
    report = pytest.TestReport(
        nodeid, ("m.yaml", 0, "b"), {}, "failed", f"BackendError: {SCRIPT}", "setup"
    )
    stub = {"check": "compare(bf16-vs-q4)", "kind": "compare", "suite": "s", "role": "prompt"}
    report.infercheck_item = {**stub, "name": "b"}  # type: ignore[attr-defined]
    found = entry(report)
    assert found is not None and found["outcome"] == "error"
    assert found["longrepr"] == f"BackendError: {SCRIPT}"
    plugin = HtmlReport(None, Path("."), Path("."))  # type: ignore[arg-type]
    plugin.pytest_runtest_logreport(report)
    (extra,) = report.extras  # type: ignore[attr-defined]
    view = parse(extra["content"]).one("details")
    assert view.attrs["id"] == item_anchor(nodeid)
    assert (
        view.one("pre").text() == f"BackendError: {SCRIPT}" and "<script>" not in extra["content"]
    )
    assert overview(plugin.items).counts() == "1 of 1 check failed, 1 of 1 item failed"
