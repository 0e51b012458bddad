"""Tie-aware divergences on real runs of the tiny adder against its 8-bit and 4-bit copies
(the quickstart's boundary prompts, where they diverge): every divergent item carries
margins and a label (JSON, JUnit), the aggregate counts the labels, and ``fail_on:
decisive`` turns only the near-tie items from failed to passed.

Measured (bf16 logprobs move in steps of 1/32): q8 parts from bf16 on e11 with margins
0.03125 / 0.03125 nats, q4 on e07 (0.156 / 0.094), e12 (4.5 / 1.25), e13 (0.25 / 0.25) and
e14 (3.125 / 0.5). At ``tie_margin: 0.1`` the first is a near-tie, the others decisive."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .helpers import junit_properties, suite_jsonl

PROMPTS = [
    ("s01", "12+34=", "46"),
    ("e07", "2+0=", "2"),
    ("e11", "1+0=", "1"),
    ("e12", "6+63=", "69"),
    ("e13", "19+11=", "30"),
    ("e14", "55+5=", "60"),
]
CHECKS = """\
  - compare: {{baseline: bf16, test: q8}}
    min_similarity: 1.0
    flips: {{fail_item_on: never}}
    tie_margin: 0.1
    fail_on: {fail_on}
  - compare: {{baseline: bf16, test: q4}}
    min_similarity: 1.0
    flips: {{fail_item_on: never}}
    tie_margin: 0.1
    fail_on: {fail_on}
"""


def _run(pytester: pytest.Pytester, write_matrix: Any, fail_on: str) -> dict[str, Any]:
    """Item name (``q8:e11``) -> its outcome, record and JUnit properties."""
    write_matrix(CHECKS.format(fail_on=fail_on))
    pytester.makefile(".jsonl", addition=suite_jsonl(PROMPTS))
    xml, results = f"junit-{fail_on}.xml", f"results-{fail_on}.json"
    pytester.runpytest("-q", f"--junitxml={xml}", f"--infercheck-results={results}")
    junit = junit_properties(pytester.path / xml)
    out = {}
    for item in json.loads((pytester.path / results).read_text())["items"]:
        side = "q8" if "bf16-vs-q8" in item["nodeid"] else "q4"
        name = item["nodeid"].split("::")[-1]
        props = junit[name] if name != "aggregate" else {}
        out[f"{side}:{name}"] = {**item, "junit": props}
    return out


def test_labels_are_counted_and_fail_on_decisive_passes_only_near_ties(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    strict = _run(pytester, write_matrix, "any")
    labels = {k: v["data"]["divergence_label"] for k, v in strict.items() if k[3:] != "aggregate"}
    assert {k: v for k, v in labels.items() if v} == {
        "q8:e11": "near-tie",
        "q4:e07": "decisive",
        "q4:e12": "decisive",
        "q4:e13": "decisive",
        "q4:e14": "decisive",
    }
    assert strict["q8:e11"]["data"]["margins"] == [0.03125, 0.03125]
    assert strict["q4:e13"]["data"]["margins"] == [0.25, 0.25]
    assert strict["q4:e07"]["junit"]["infercheck_divergence_label"] == "decisive"
    q8 = strict["q8:aggregate"]["data"]["levels"][0]
    q4 = strict["q4:aggregate"]["data"]["levels"][0]
    assert q8["divergence_labels"] == {"near-tie": 1, "decisive": 0, "unknown": 0}
    assert q4["divergence_labels"] == {"near-tie": 0, "decisive": 4, "unknown": 0}
    failed = {k for k, v in strict.items() if v["outcome"] == "failed" and "aggregate" not in k}
    assert failed == {"q8:e11", "q4:e07", "q4:e12", "q4:e13", "q4:e14"}

    lenient = _run(pytester, write_matrix, "decisive")
    failed = {k for k, v in lenient.items() if v["outcome"] == "failed" and "aggregate" not in k}
    assert failed == {"q4:e07", "q4:e12", "q4:e13", "q4:e14"}  # only the near-tie passes
