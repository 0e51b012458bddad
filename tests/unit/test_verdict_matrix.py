"""The verdicts of a comparison's sides and the HTML verdict matrix, on hand-made records."""

from __future__ import annotations

import dataclasses

from pytest_infercheck.checks.comparison.aggregate import ComparisonAggregateRecord, aggregate
from pytest_infercheck.checks.comparison.present import side_verdicts
from pytest_infercheck.checks.comparison.terminal import summary_rows
from pytest_infercheck.checks.framework.kind import Verdict
from pytest_infercheck.checks.framework.outcome import Outcome
from pytest_infercheck.records import plain_data
from pytest_infercheck.report.verdicts import Row, verdict_matrix, verdicts_of
from pytest_infercheck.specs import Thresholds
from tests.htmldom import parse

from .factories import prompt_comparison

GATE = Thresholds(max_mean_kl=0.15)


def _side(test: str, kl: list[float]) -> list:
    return [
        dataclasses.replace(prompt_comparison(pid, [k], flip="unchanged"), test=test)
        for pid, k in zip("ab", kl, strict=True)
    ]


def _sweep(errored: list[str] | None = None) -> dict:
    """q8 (mean KL (0.1 + 0.1) / 2 = 0.1, within 0.15) and q4 ((0.1 + 0.3) / 2 = 0.2, above)."""
    q8 = aggregate(_side("q8@local", [0.1, 0.1]), GATE)
    q4 = aggregate(_side("q4@local", [0.1, 0.3]), GATE)
    record = ComparisonAggregateRecord(
        "sweep", "s", [q8, q4], {}, tests=["q8@local", "q4@local"], errored=errored or []
    )
    return plain_data(record)


def test_a_level_fails_for_its_own_gates_only() -> None:
    data = _sweep()
    assert data["levels"][0]["violations"] == []
    assert data["levels"][1]["violations"] == ["mean KL 0.2 > max_mean_kl 0.15"]
    assert side_verdicts(data, False, []) == [
        Verdict("q8@local", "pass", "mean KL 0.1 ± 0"),
        Verdict(
            "q4@local",
            "fail",
            "mean KL 0.2 > max_mean_kl 0.15",
            ("mean KL 0.2 > max_mean_kl 0.15",),
        ),
    ]
    rows = summary_rows([("m.yaml::sweep(bf16)::s::aggregate", False, data)])
    assert [row[-1] for row in rows] == ["PASS", "FAIL"]


def test_errored_items_fail_every_side_and_old_records_follow_the_aggregate() -> None:
    errored = _sweep(["1 of 5 items errored: a[q8] (HTTP 500)"])
    assert [v.verdict for v in side_verdicts(errored, False, [])] == ["fail", "fail"]
    assert side_verdicts(errored, False, [])[0].deciding.startswith("1 of 5 items errored")
    old = _sweep()
    for level in old["levels"]:
        del level["violations"]  # a results file written before sides carried their gates
    assert [v.verdict for v in side_verdicts(old, False, [])] == ["fail", "fail"]
    assert [v.verdict for v in side_verdicts(old, True, [])] == ["pass", "pass"]


def test_the_matrix_escapes_and_links() -> None:
    evil = "<script>alert(1)</script>"
    html = verdict_matrix(
        [Row(f"compare({evil})", evil, "ic-check-0", [Verdict(evil, "fail", f"{evil} > 1")])]
    )
    page = parse(html)
    assert not page.all("script")
    (table,) = page.all("table")
    assert table.attrs["id"] == "infercheck-verdicts"
    assert [th.text() for th in table.one("thead").all("th")] == ["check", "suite", evil]
    cell = table.one("tbody").all("td")[-1]
    assert cell.classes == ["ic-fail"] and cell.text() == f"FAIL {evil} > 1"
    assert {a.attrs["href"] for a in page.all("a")} == {"#ic-check-0"}


def test_a_kind_without_cells_of_its_own_shows_its_target_and_first_violation() -> None:
    item = {
        "kind": "determinism",
        "outcome": "failed",
        "violations": ["determinism score 0.5 < min_determinism 1"],
        "data": {"target": "q4@local", "score": 0.5},
    }
    reason = "determinism score 0.5 < min_determinism 1"
    assert verdicts_of(item) == [Verdict("q4@local", "fail", reason, (reason,))]


def test_a_failure_report_starts_with_what_failed() -> None:
    text = Outcome(["q4@local: mean KL 0.2 > max_mean_kl 0.15", "x"], "q8 vs bf16").failure_report()
    assert text.splitlines()[0] == "q4@local: mean KL 0.2 > max_mean_kl 0.15 (+1 more)"
    assert text.splitlines()[2] == "q8 vs bf16"


def _summary_rows(item: dict) -> dict[str, list[str]]:
    from pytest_infercheck.report.summary import RunView, summary_html

    page = parse(summary_html([RunView("r", [item])]))
    table = page.one("section", "ic-summary").all("table", "ic-table")[0]
    header = {"measure": [th.text() for th in table.one("thead").all("th")][1:]}
    return header | {
        tr.all("th")[0].text(): [td.text() for td in tr.all("td")]
        for tr in table.one("tbody").iter("tr")
    }


def test_the_tokenization_table_is_headed_by_the_target_tested() -> None:
    from pytest_infercheck.checks.tokenization import SideCounts, TokenizationAggregate

    record = TokenizationAggregate(
        target="ref@local",
        items=4,
        identical=3,
        count_only=0,
        differing=1,
        allowed=0,
        by_cause={"special tokens": 1},
        n_errors=0,
        errors={},
        failed=["p1[tested]"],
        sides={"tested@llama": SideCounts(4, 3, 0, 1, 0)},
        engines={},
    )
    item = {
        "kind": "tokenization",
        "check": "tokenization(ref)",
        "suite": "s",
        "role": "aggregate",
        "outcome": "failed",
        "violations": ["p1[tested]: token ids differ"],
        "data": plain_data(record),
    }
    table = _summary_rows(item)
    assert table["measure"] == ["tested@llama"]
    assert table["against reference"] == ["ref@local"]
    assert table["identical"] == ["3/4"] and table["differing"] == ["1/4"]
    reason = "p1[tested]: token ids differ"
    assert verdicts_of(item) == [Verdict("tested@llama", "fail", reason, (reason,))]


def test_raw_field_names_get_readable_titles() -> None:
    from pytest_infercheck.checks.parity import ParityAggregate

    record = ParityAggregate("q4@local", 5, 4, 1, 1, 0, 0, {}, ["p1"], {})
    item = {
        "kind": "stream-parity",
        "check": "stream-parity(q4)",
        "suite": "s",
        "role": "aggregate",
        "outcome": "passed",
        "violations": [],
        "data": plain_data(record),
    }
    table = _summary_rows(item)
    assert table["matching"] == ["4"] and table["mismatching"] == ["1"]
    assert "n match" not in table
