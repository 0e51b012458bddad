"""Tie-aware divergences on real runs of the tiny adder (bf16 against its 4-bit copy): every
divergent item carries margins and a label, the aggregate counts the labels, and ``fail_on:
decisive`` turns only the near-tie items from failed to passed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import junit_properties, suite_jsonl

CHECK = """\
  - compare: {{baseline: bf16, test: q4}}
    min_similarity: 1.0
    flips: {{fail_item_on: never}}
    tie_margin: {tie_margin}
    fail_on: {fail_on}
"""


def _run(pytester: pytest.Pytester, write_matrix: Any, fail_on: str, tie_margin: float) -> Any:
    write_matrix(CHECK.format(fail_on=fail_on, tie_margin=tie_margin))
    xml, results = f"junit-{fail_on}.xml", f"results-{fail_on}.json"
    result = pytester.runpytest("-q", f"--junitxml={xml}", f"--infercheck-results={results}")
    props = {
        name: p for name, p in junit_properties(pytester.path / xml).items() if "aggregate" not in name
    }
    data = json.loads((pytester.path / results).read_text())
    return result, props, data


def test_labels_are_counted_and_fail_on_decisive_passes_only_near_ties(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    strict, props, data = _run(pytester, write_matrix, "any", 0.05)
    rows = [(f"p{a:02d}{b:02d}", f"{a}+{b}=", str(a + b)) for a in range(1, 99, 7) for b in range(3, 99, 11)]
    pytester.makefile(".jsonl", addition=suite_jsonl(rows))
    strict, props, data = _run(pytester, write_matrix, "any", 0.05)
    for item in data["items"]:
        d = item.get("data") or {}
        if d.get("divergence_label"):
            print(item["nodeid"], d["divergence_label"], d["margins"], d["noise_floor"], d["base_text"], d["test_text"])
    assert False
