"""Failure text in words: counts are said, never printed as Python dicts; an aggregate names
its failed items, the first five, then how many more; the comparison's terminal table is
grouped under a line per check x suite and its prose lines are wrapped under 100 columns."""

from __future__ import annotations

from pytest_infercheck.checks.comparison.terminal import grouped_table, wrapped
from pytest_infercheck.checks.framework.items import failed_items
from pytest_infercheck.checks.framework.summary import RecordedItem
from pytest_infercheck.render.text import counted


def test_counts_in_words_in_order_zeros_left_out() -> None:
    assert counted({"correct_to_wrong": 3, "unchanged": 0, "near-tie": 1}) == (
        "3 correct to wrong, 1 near-tie"
    )
    assert counted({"near-tie": 0, "decisive": 0}) == "none"
    assert counted({}) == "none"


def test_failed_items_named_first_five_then_how_many_more() -> None:
    items = [RecordedItem("prompt", f"p{i}", {}, violations=(f"v{i}",)) for i in range(7)]
    (said,) = failed_items(items)
    assert said == ("7 of 7 items failed: p0 (v0), p1 (v1), p2 (v2), p3 (v3), p4 (v4), and 2 more")


def test_grouped_table_and_wrapped_prose() -> None:
    columns = (("check", "<"), ("suite", "<"), ("test", "<"), ("verdict", "<"))
    rows = [
        ["sweep(bf16)", "s", "q8@local", "PASS"],
        ["sweep(bf16)", "s", "q4@local", "FAIL"],
        ["compare(a-vs-b)", "s", "b@x", "FAIL"],
    ]
    assert grouped_table(rows, columns) == [
        "  test      verdict",
        "sweep(bf16) s:",
        "  q8@local  PASS",
        "  q4@local  FAIL",
        "compare(a-vs-b) s:",
        "  b@x       FAIL",
    ]
    line = "word " * 40
    lines = wrapped(line.strip())
    assert all(len(x) <= 99 for x in lines) and lines[1].startswith("    word")
    assert " ".join(x.strip() for x in lines) == line.strip()
