"""pytest-html on real runs of the tiny models: sortable columns whose numbers equal the JUnit
properties, each item's detail, the summary; under -n 2; and a run with pytest-html blocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.htmldom import Node, parse

from .helpers import ADDITION, junit_properties, suite_jsonl

SCRIPT = "<script>alert(1)</script>"
CHECKS = """\
  - sweep: {baseline: bf16, models: [q8, q4]}
    max_kl: 0.001
  - compare: {baseline: bf16, test: q4}
    max_kl: 10.0
"""


def report_parts(path: Path) -> tuple[Node, dict[str, Any]]:
    """The parsed page and pytest-html's test data (row cells and extras are HTML strings in
    a JSON attribute, rendered by its script)."""
    page = parse(path.read_text(encoding="utf-8"))
    (container,) = [n for n in page.iter("div") if n.attrs.get("id") == "data-container"]
    return page, json.loads(container.attrs["data-jsonblob"])["tests"]


def cell(row: list[str], column: str) -> Node:
    (html,) = [c for c in row if f'class="col-{column}"' in c]
    return parse(html).one("td")


@pytest.fixture
def hostile_suite(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix(CHECKS)
    rows = [*ADDITION[:4], ("x01", f"{SCRIPT}1+2=", "3")]
    pytester.makefile(".jsonl", addition=suite_jsonl(rows))


def check_report(pytester: pytest.Pytester) -> None:
    page, tests = report_parts(pytester.path / "report.html")
    (head,) = [n for n in page.iter("thead") if n.attrs.get("id") == "results-table-head"]
    sortable = [th.attrs.get("data-column-type") for th in head.all("th", "sortable")]
    assert sortable[2:5] == ["icklmean", "icflip", "icsimilarity"]
    props = junit_properties(pytester.path / "out.xml")
    prompt_rows = 0
    for nodeid, (test, *_) in tests.items():
        name = nodeid.split("::")[-1]
        detail = parse("".join(e["content"] for e in test["extras"]))
        assert not detail.all("script")
        assert test["result"] in ("Passed", "Failed")
        assert ("open" in detail.one("details").attrs) == (test["result"] == "Failed")
        if name in ("aggregate", "self-check"):
            continue
        prompt_rows += 1
        shown = cell(test["resultsTableRow"], "icklmean")
        assert shown.children[-1] == format(float(props[name]["infercheck_kl_mean"]), ".4g")
        assert shown.one("span").attrs == {"hidden": ""}
        assert detail.all("svg")  # the per-position KL chart
        if name.startswith("x01"):
            assert SCRIPT in detail.all("pre", "ic-text")[0].text()
    assert prompt_rows == 15  # 5 prompts x (q8, q4) in the sweep + 5 in the compare
    summary = page.one("section", "ic-summary")
    assert not summary.all("script")
    (matrix,) = [n for n in summary.iter("table") if n.attrs.get("id") == "infercheck-verdicts"]
    # rows and columns in the order the aggregates reported (under xdist: as they finished)
    header = [th.text() for th in matrix.one("thead").all("th")]
    assert header[:2] == ["check", "suite"] and sorted(header[2:]) == ["q4@local", "q8@local"]
    checks = [tr.all("th")[0].text() for tr in matrix.one("tbody").all("tr")]
    assert sorted(checks) == ["compare(bf16-vs-q4)", "sweep(bf16)"]
    titles = [h.text() for h in summary.all("h3")]
    assert "sweep(bf16) · addition" in titles and "compare(bf16-vs-q4) · addition" in titles
    nodes = [c for c in summary.children if isinstance(c, Node)]
    at = [n.text() for n in nodes].index("sweep(bf16) · addition")
    sweep_table = nodes[at + 1]
    header = [th.text() for th in sweep_table.one("thead").all("th")]
    assert header == ["measure", "q8@local", "q4@local"]
    charts = [t.text() for t in summary.iter("title")]
    assert "degradation: sweep(bf16) · addition" in charts
    assert "flip rate by suite and test side" in charts


def test_html_report(pytester: pytest.Pytester, hostile_suite: None) -> None:
    result = pytester.runpytest(
        "-q", "--html=report.html", "--self-contained-html", "--junitxml=out.xml"
    )
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= 1 and outcomes["passed"] >= 1
    check_report(pytester)


def test_html_report_under_xdist(pytester: pytest.Pytester, hostile_suite: None) -> None:
    result = pytester.runpytest_subprocess(
        "-q", "-n", "2", "--html=report.html", "--self-contained-html", "--junitxml=out.xml"
    )
    assert result.parseoutcomes()["passed"] >= 1
    check_report(pytester)


def test_runs_with_pytest_html_blocked(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix("  - compare: {baseline: bf16, test: bf16}\n    max_kl: 0.0\n")
    result = pytester.runpytest("-q", "-p", "no:html")
    result.assert_outcomes(passed=9)


def test_standalone_report_of_a_results_file(pytester: pytest.Pytester, write_matrix: Any) -> None:
    from pytest_infercheck.report.html import render_report
    from pytest_infercheck.report.results import load_results

    write_matrix("  - compare: {baseline: bf16, test: q4}\n    max_kl: 10.0\n")
    pytester.runpytest("-q", "--infercheck-results=run.json").assert_outcomes(passed=9)
    results = load_results(pytester.path / "run.json")
    page = parse(render_report([results]))
    by_node = {i["nodeid"]: i for i in results["items"]}
    table = page.one("table", "ic-results")
    bodies = [c for c in table.children if isinstance(c, Node) and c.tag == "tbody"]
    assert len(bodies) == 9
    for body in bodies:
        cells = body.all("tr")[0].all("td")
        item = by_node[cells[1].text()]
        assert cells[0].text() == item["outcome"] == "passed"
        if item["role"] == "prompt":
            assert cells[2].text() == format(item["data"]["kl_mean"], ".4g")
            assert cells[4].text() == format(item["data"]["similarity"], ".4f")
    (aggregate,) = [i for i in results["items"] if i["role"] == "aggregate"]
    (level,) = aggregate["data"]["levels"]
    summary = page.one("section", "ic-summary").all("table", "ic-table")[0]
    measured = {
        tr.all("th")[0].text(): [td.text() for td in tr.all("td")] for tr in summary.iter("tr")
    }
    assert measured["mean KL ± SE"] == [f"{level['kl_mean']:.6g} ± {level['kl_se']:.2g}"]
    assert measured["failed items"] == [str(level["n_failed"])]


def test_single_target_kinds_in_the_html_report(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(
        "  - determinism: {target: q4, runs: 2}\n"
        "  - stress: {target: q4, levels: [1, 2], repeats: 1}\n",
        suites="[{suite: addition.jsonl, limit: 2}]",
    )
    pytester.runpytest(
        "-q", "--html=report.html", "--self-contained-html", "--infercheck-results=run.json"
    ).assert_outcomes(passed=6)
    results = json.loads((pytester.path / "run.json").read_text())
    page, tests = report_parts(pytester.path / "report.html")
    summary = page.one("section", "ic-summary")
    nodes = [c for c in summary.children if isinstance(c, Node)]
    tables = {n.text(): nodes[k + 1] for k, n in enumerate(nodes) if n.tag == "h3"}
    data = {i["kind"]: i["data"] for i in results["items"] if i["role"] == "aggregate"}
    det = {
        tr.all("th")[0].text(): tr.all("td")
        for tr in tables["determinism(q4) · addition"].iter("tr")
    }
    score = data["determinism"]
    assert det["determinism score [CI]"][0].text() == (
        f"{score['score']:.3f} [{score['score_low']:.3f}, {score['score_high']:.3f}]"
    )
    stress = {
        tr.all("th")[0].text(): tr.all("td") for tr in tables["stress(q4) · addition"].iter("tr")
    }
    assert [td.text() for td in stress["requests"]] == [
        str(level["requests"]) for level in data["stress"]["levels"]
    ]
    assert "latency: stress(q4) · addition" in [t.text() for t in summary.iter("title")]
    for test, *_ in tests.values():
        detail = parse("".join(e["content"] for e in test["extras"]))
        assert "in the detail view" not in detail.text()  # no view fell back on an error


def test_title_engines_banner_and_job_summary(
    pytester: pytest.Pytester, hostile_suite: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The matrix's ``title`` heads the HTML report (escaped) and the job summary; the
    environment table names mlx and mlx-lm with their versions; the banner's counts are the
    run's; the job summary is appended to the file GITHUB_STEP_SUMMARY names, escaped."""
    from importlib.metadata import version

    matrix = pytester.path / "infercheck.yaml"
    matrix.write_text(matrix.read_text() + f'\nsettings:\n  title: "{SCRIPT} tiny"\n')
    summary_file = pytester.path / "step-summary.md"
    summary_file.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    result = pytester.runpytest("-q", "-rf", "--html=report.html", "--self-contained-html")
    outcomes = result.parseoutcomes()
    failing = [line.split()[1] for line in result.outlines if line.startswith("FAILED ")]
    assert failing and len(failing) == outcomes["failed"], "\n".join(result.outlines[-30:])
    checks_failed = len({nodeid.split("::")[1] for nodeid in failing})
    items_failed = [n for n in failing if not n.endswith("::aggregate")]
    items = outcomes["failed"] + outcomes["passed"] - 2  # the sweep's and compare's aggregates
    page = parse((pytester.path / "report.html").read_text(encoding="utf-8"))
    assert page.one("h1").text() == f"{SCRIPT} tiny" and not page.one("h1").all("script")
    (container,) = [n for n in page.iter("div") if n.attrs.get("id") == "data-container"]
    environment = json.loads(container.attrs["data-jsonblob"])["environment"]
    assert environment["Engines"] == {"mlx": version("mlx"), "mlx-lm": version("mlx-lm")}
    (banner,) = [n for n in page.iter("div") if n.attrs.get("id") == "infercheck-banner"]
    text = " ".join(banner.text().split())
    counts = f"{checks_failed} of 2 checks failed, {len(items_failed)} of {items} items failed"
    assert text.startswith(f"FAIL: {counts} worst finding: "), text
    written = summary_file.read_text(encoding="utf-8")
    assert written.startswith("earlier step\n## &lt;script&gt;alert(1)&lt;/script&gt; tiny: FAIL\n")
    assert "<script" not in written and "| check | suite |" in written
    assert f"### Failed items ({len(items_failed)})" in written


def test_the_title_option_and_a_passing_job_summary(
    pytester: pytest.Pytester, write_matrix: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_matrix("  - compare: {baseline: bf16, test: bf16}\n    max_kl: 0.0\n")
    summary_file = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    result = pytester.runpytest("-q", "--infercheck-title=nightly bf16", "-p", "no:html")
    result.assert_outcomes(passed=9)
    lines = summary_file.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["## nightly bf16: PASS", "", "0 of 1 check failed, 0 of 8 items failed."]
    assert lines[4:6] == ["| check | suite | bf16@local |", "|---|---|---|"]
    assert lines[6].startswith("| compare(bf16-vs-bf16) | addition | ✅ PASS: mean KL 0 ")
    assert "Failed items" not in "\n".join(lines)
