"""HTML fragments and the standalone report, parsed back: tables, numbers, the highlighted
divergence, sortable headers, escaping, robustness to unknown or missing keys, size."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pytest_infercheck.render.markup import sort_key
from pytest_infercheck.render.views import first_difference
from pytest_infercheck.report.html import render_report, result_cells
from pytest_infercheck.report.summary import RunView, summary_html
from pytest_infercheck.report.views import item_detail
from tests.htmldom import Node, parse

SCRIPT = "<script>alert(1)</script>"

PROMPT: dict[str, Any] = {
    "check": "compare(bf16-vs-q4)",
    "kind": "compare",
    "suite": "addition",
    "role": "prompt",
    "name": "s01",
    "thresholds": {"max_kl": 0.05, "flips": {"fail_item_on": "correct_to_wrong"}},
    "violations": ["answer flipped correct_to_wrong"],
    "data": {
        "prompt_id": "s01",
        "prompt_text": "12+34=",
        "baseline": "bf16@local",
        "test": "q4@local",
        "method": "teacher-forced",
        "base_text": "The sum is 46.",
        "test_text": "The sum is 47.",
        "base_ids": [1, 2, 3, 4, 5],
        "test_ids": [1, 2, 3, 4, 6],
        "base_finish": "stop",
        "test_finish": "stop",
        "first_divergence": 4,
        "similarity": 0.9285714,
        "severity": "minor",
        "kl_per_position": [0.0, 0.01, 0.5, 0.02],
        "same_top": [True, True, False, True],
        "answer_kind": "number",
        "reference": "46",
        "base_answer": "46",
        "test_answer": "47",
        "flip": "correct_to_wrong",
        "kl_mean": 0.1325,
        "kl_max": 0.5,
        "same_top_rate": 0.75,
        "is_flip": True,
    },
}

LEVEL = {
    "baseline": "bf16@local",
    "test": "q4@local",
    "n_prompts": 20,
    "n_failed": 3,
    "kl_n": 100,
    "kl_mean": 0.0123,
    "kl_se": 0.0021,
    "kl_median": 0.001,
    "kl_p90": 0.02,
    "kl_p99": 0.3,
    "kl_max": 0.5,
    "same_top_rate": 0.97,
    "delta_p_mean": -0.01,
    "delta_p_rms": 0.05,
    "n_answered": 20,
    "flips": {"correct_to_wrong": 2, "unchanged": 18},
    "n_flips": 2,
    "flip_rate": 0.1,
    "flip_rate_low": 0.0279,
    "flip_rate_high": 0.301,
    "mcnemar_p": 0.5,
    "severities": {"minor": 2, "identical": 18},
    "methods": {"teacher-forced": 20},
}

AGGREGATE: dict[str, Any] = {
    "check": "compare(bf16-vs-q4)",
    "kind": "compare",
    "suite": "addition",
    "role": "aggregate",
    "name": "aggregate",
    "thresholds": {"flips": {"max_rate": 0.05, "confidence": 0.9}},
    "violations": ["flip rate 2/20: upper 90% Wilson bound 0.3010 > max_rate 0.05"],
    "data": {
        "check": "compare(bf16-vs-q4)",
        "suite": "addition",
        "levels": [LEVEL],
        "engines": {"q4@local": {"kind": "mlx-lm", "model": "/m/q4"}},
    },
}


def results(run_id: str, kl_mean: float, engine: str) -> dict[str, Any]:
    aggregate = copy.deepcopy(AGGREGATE)
    aggregate["data"]["levels"][0]["kl_mean"] = kl_mean
    return {
        "schema": "pytest-infercheck-results",
        "version": 1,
        "run": {"run_id": run_id, "duration_s": 1.5, "exitstatus": 1, "argv": ["-q"]},
        "engines": {"q4@local": {"kind": engine}},
        "items": [
            {
                "nodeid": "infercheck.yaml::compare(bf16-vs-q4)::addition::s01",
                "outcome": "failed",
                "duration_s": 0.25,
                **PROMPT,
            },
            {
                "nodeid": "infercheck.yaml::compare(bf16-vs-q4)::addition::aggregate",
                "outcome": "failed",
                "duration_s": 0.01,
                **aggregate,
            },
        ],
    }


def rows(table: Node) -> dict[str, list[str]]:
    """First cell's text -> the other cells' texts, for each row of ``table``."""
    out = {}
    for tr in table.iter("tr"):
        cells = [c.text() for c in tr.children if isinstance(c, Node) and c.tag in ("th", "td")]
        out[cells[0]] = cells[1:]
    return out


def assert_no_injection(root: Node) -> None:
    assert not root.all("script") and not root.all("b") and not root.all("i")


def test_first_difference() -> None:
    assert first_difference("abc", "abd") == 2
    assert first_difference("ab", "abc") == 2
    assert first_difference("abc", "abc") is None
    assert first_difference("", "x") == 0


def test_comparison_item_side_by_side_with_the_divergence_marked() -> None:
    root = parse(item_detail(PROMPT, "failed"))
    details = root.one("details")
    assert "open" in details.attrs  # failed: shown open
    base, test = root.all("pre", "ic-text")[1:3]  # [0] is the prompt
    marks = root.all("mark", "ic-div")
    assert [m.text() for m in marks] == ["6.", "7."]  # from the first differing character
    assert base.text() == "The sum is 46." and test.text() == "The sum is 47."
    caption = root.one("p", "ic-caption").text()
    assert "first divergent token: index 4" in caption and "character 12" in caption
    answers = rows(root.all("table", "ic-table")[1])
    assert answers["number"] == ["46", "46", "47", "correct_to_wrong"]
    assert root.one("span", "ic-flip").text() == "correct_to_wrong"
    (line,) = root.all("polyline")
    assert len(line.attrs["points"].split()) == 4  # one point per KL_t
    thresholds = rows(root.one("table", "ic-kv"))
    assert thresholds == {"max_kl": ["0.05"], "flips.fail_item_on": ["correct_to_wrong"]}
    assert root.one("ul", "ic-violations").text() == "answer flipped correct_to_wrong"


def test_passed_items_are_collapsed() -> None:
    root = parse(item_detail({**PROMPT, "violations": []}, "passed"))
    assert "open" not in root.one("details").attrs
    assert root.one("p", "ic-ok").text() == "no threshold broken"


def test_model_output_and_prompt_are_escaped_everywhere() -> None:
    record = copy.deepcopy(PROMPT)
    record["data"].update(
        prompt_text=SCRIPT, base_text=SCRIPT, test_text=f"<b>{SCRIPT}", base_answer="<i>x</i>"
    )
    record["name"] = SCRIPT
    root = parse(item_detail(record, "failed"))
    assert_no_injection(root)
    assert SCRIPT in root.all("pre", "ic-text")[0].text()
    assert root.one("summary").text().endswith(SCRIPT)
    assert root.all("pre", "ic-text")[2].text() == f"<b>{SCRIPT}"
    results_file = results("r1", 0.01, SCRIPT)
    results_file["items"][0].update(record)
    page = parse(render_report([results_file]))
    (script,) = page.all("script")  # the table sorter only
    assert "alert" not in script.text()
    assert not page.all("b") and not page.all("i")


@pytest.mark.parametrize(
    "record",
    [
        {},
        {"kind": "compare", "role": "prompt"},
        {"kind": "compare", "role": "prompt", "data": {"kl_per_position": None}},
        {"kind": "compare", "role": "aggregate", "data": {"levels": [{}]}},
        {"kind": "sweep", "role": "self-check", "data": {"problems": ["s01: token ids differ"]}},
        {"kind": "determinism", "role": "prompt", "data": {"outputs": [{"text": "a"}, {}]}},
        {"kind": "stress", "role": "level", "data": {"mismatches": [{}], "errors": {"5xx": 1}}},
        {"kind": "batch-invariance", "role": "prompt", "data": {"trials": [{"match": False}]}},
        {"kind": "stream-parity", "role": "prompt", "data": {"answers": ["1"], "flip": True}},
        {"kind": "cache-pollution", "role": "hostile", "data": {"changed": [{"before": "x"}]}},
        {"kind": "stress", "role": "aggregate", "data": {"levels": [{"level": 1}, {}]}},
        {"kind": "compare", "role": "prompt", "data": {"base_text": 3, "first_divergence": "x"}},
    ],
)
def test_missing_keys_never_crash(record: dict[str, Any]) -> None:
    root = parse(item_detail(record))
    assert root.one("details")


def test_unknown_kind_is_an_escaped_key_value_table() -> None:
    record = {"kind": "future-check", "role": "prompt", "data": {"<b>key</b>": SCRIPT, "n": 3}}
    root = parse(item_detail(record, "passed"))
    assert_no_injection(root)
    table = rows(root.all("table", "ic-kv")[0])
    assert table == {"<b>key</b>": [SCRIPT], "n": ["3"]}


def test_single_target_views_show_their_outputs() -> None:
    determinism = {
        "kind": "determinism",
        "role": "prompt",
        "data": {
            "prompt_id": "d1",
            "target": "q4@local",
            "runs": 5,
            "modal_share": 0.8,
            "distinct": 2,
            "errors": 0,
            "error_messages": [],
            "first_divergences": [None, 1, None, None, None],
            "max_logprob_drift": None,
            "outputs": [
                {"text": "46", "token_ids": None, "count": 1},
                {"text": "45", "token_ids": None, "count": 4},
            ],
        },
    }
    root = parse(item_detail(determinism))
    assert "output 1: 4 of 5 runs (modal)" in root.text()
    assert [m.text() for m in root.all("mark")] == ["5", "6"]
    parity = {
        "kind": "stream-parity",
        "role": "prompt",
        "data": {
            "prompt_id": "s01",
            "target": "adder@llama",
            "reference": {
                "mode": "non-streamed",
                "text": "46",
                "token_ids": [55, 57, 2],
                "finish_reason": "stop",
            },
            "other": {
                "mode": "streamed",
                "text": "4",
                "token_ids": [55, 2],
                "finish_reason": "stop",
            },
            "match": False,
            "first_divergence": 1,
            "divergence_unit": "token",
            "similarity": 0.6667,
            "answers": ["46", "4"],
            "flip": "correct_to_wrong",
            "logprob_drift": None,
        },
    }
    root = parse(item_detail(parity))
    assert [h.text() for h in root.all("h4")][:3] == ["violations", "non-streamed", "streamed"]
    assert rows(root.all("table", "ic-table")[-1])["46"] == ["4", "correct_to_wrong"]


def test_result_cells_and_numeric_sort_keys() -> None:
    cells = result_cells(PROMPT)
    assert cells["icklmean"] == (sort_key(0.1325), "0.1325")
    assert cells["icflip"][1] == '<span class="ic-flip">correct_to_wrong</span>'
    assert cells["icsimilarity"][1] == "0.9286"
    assert result_cells(AGGREGATE)["icklmean"] == ("", "")
    values = [-2.0, -0.5, 0.0, 1e-9, 0.01, 0.5, 3.0, 1e6]
    keys = [sort_key(v) for v in values]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert sort_key(None) == "" == sort_key(float("nan"))
    flips = ["unchanged", "correct_to_wrong", "wrong_to_correct"]
    ordered = sorted(flips, key=lambda f: result_cells({"data": {"flip": f}})["icflip"][0])
    assert ordered == ["correct_to_wrong", "wrong_to_correct", "unchanged"]


def test_summary_table_numbers_equal_the_aggregate() -> None:
    item = {**AGGREGATE, "outcome": "failed", "nodeid": "x::aggregate"}
    root = parse(summary_html([RunView("this run", [item, {**PROMPT, "outcome": "failed"}])]))
    table = rows(root.all("table", "ic-table")[0])
    assert table["measure"] == ["q4@local"]
    assert table["prompts"] == ["20"] and table["failed items"] == ["3"]
    assert table["flips"] == ["2/20"]
    assert table["flip rate [90% CI]"] == ["0.100 [0.028, 0.301]"]
    assert table["mean KL ± SE"] == ["0.0123 ± 0.0021"]
    assert table["same-top rate"] == ["0.97"]
    assert table["verdict"][0].startswith("FAIL: flip rate 2/20")
    titles = [t.text() for t in root.iter("title")]
    assert "flip rate by suite and test side" in titles
    assert any(t.startswith("per-prompt mean KL") for t in titles)
    assert "/m/q4" in root.text()  # engine identity


def test_two_runs_side_by_side() -> None:
    page = parse(
        render_report([results("old", 0.01, "engine-a"), results("new", 0.02, "engine-b")])
    )
    runs = rows(page.one("table", "ic-runs"))
    assert runs["run_id"] == ["old", "new"] and runs["failed"] == ["2", "2"]
    summary = page.one("section", "ic-summary")
    table = rows(summary.all("table", "ic-table")[0])
    assert table["measure"] == ["run 1 (old): q4@local", "run 2 (new): q4@local"]
    assert table["mean KL ± SE"] == ["0.01 ± 0.0021", "0.02 ± 0.0021"]
    text = summary.text()
    assert "engine-a" in text and "engine-b" in text


def test_standalone_results_table_is_sortable() -> None:
    page = parse(render_report([results("r", 0.01, "e")]))
    table = page.one("table", "ic-results")
    sortable = {th.attrs["data-column-type"]: th.text() for th in table.all("th", "sortable")}
    assert sortable["icklmean"] == "KL mean" and "icflip" in sortable and "icsimilarity" in sortable
    first = table.all("tbody")[0].all("tr")[0].all("td")
    assert first[0].text() == "failed"
    assert first[2].attrs["data-sort"] == sort_key(0.1325) and first[2].text() == "0.1325"


def test_detail_of_a_long_item_stays_small() -> None:
    record = copy.deepcopy(PROMPT)
    record["data"].update(
        base_text="a" * 50_000 + "b",
        test_text="a" * 50_000 + "c",
        kl_per_position=[float(i % 13) for i in range(8192)],
    )
    html = item_detail(record, "failed")
    assert len(html) < 25_000
    assert [m.text()[:1] for m in parse(html).all("mark")] == ["b", "c"]
