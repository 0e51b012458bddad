"""Degenerate output through pytester, on mlx-lm in-process with the random-weight tiny llama
(the ``random_model`` fixture): it loops by itself. Greedy on "99+1=" with 64 tokens it gives
39 tokens and then token 229 to the end (25 tokens: a loop of period 1, measured in bf16 and
float32 alike); on the other three prompts it stops, or ends without a loop of 16 tokens
(its repeats of 13-grams in "hello" are longer than MAX_PERIOD). So each generation of
"99+1=" is one finding: counted, passing by default, failing its item under
``fail_on_degenerate: true``, in determinism and compare alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..resummarize import aggregates, assert_same_aggregate, resummarized

SUITE = "\n".join(
    f'{{"id": "{i}", "prompt": "{p}", "max_tokens": 64}}'
    for i, p in [("d1", "99+1="), ("d2", "7+8="), ("d3", "12+34="), ("d4", "hello")]
)
LOOP = "loop of period 1 ('229') in {where}: 25 of 64 tokens from token 39 to the end"


def _matrix(pytester: pytest.Pytester, model: Path, settings: str = "") -> None:
    pytester.makefile(".jsonl", s=SUITE)
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  rnd: {{path: '{model}'}}
backends:
  local: {{kind: mlx-lm}}
  local32: {{kind: mlx-lm, dtype: float32}}
suites: [s.jsonl]
{settings}checks:
  - determinism: {{target: rnd@local, runs: 2}}
  - compare: {{baseline: rnd@local, test: rnd@local32}}
    max_kl: 100
""",
    )


def test_findings_are_counted_and_pass_by_default(
    pytester: pytest.Pytester, random_model: Path
) -> None:
    _matrix(pytester, random_model)
    result = pytester.runpytest("-q", "--junitxml=out.xml", "--infercheck-results=r.json")
    result.assert_outcomes(passed=10)
    # the terminal summary: 4 prompts x 2 runs, 4 prompts x 2 sides; both d1 generations loop
    result.stdout.fnmatch_lines(
        [
            "*determinism(rnd.local)::s::aggregate: degenerate: 2 of 8 generations (loop 2): "
            f"d1: {LOOP.format(where='run 0')}; d1: {LOOP.format(where='run 1')}",
            "*compare(rnd.local-vs-rnd.local32)::s::aggregate: degenerate: 2 of 8 generations "
            f"(loop 2): d1: {LOOP.format(where='the baseline output')}*",
        ]
    )
    props = {c: p["infercheck_degenerate"] for c, p in _cases(pytester.path / "out.xml").items()}
    assert len(props) == 10
    assert {c: n for c, n in props.items() if n != "0"} == {
        "determinism::d1": "2",
        "determinism::aggregate": "2",
        "compare::d1": "2",
        "compare::aggregate": "2",
    }
    results = json.loads((pytester.path / "r.json").read_text())
    items = {i["nodeid"].split("::", 1)[1]: i for i in results["items"]}
    scan = items["determinism(rnd.local)::s::d1"]["degenerate"]
    assert scan["generations"] == 2
    assert [
        (f["pattern"], f["period"], f["start"], f["covered"], f["total"]) for f in scan["found"]
    ] == [("loop", 1, 39, 25, 64)] * 2
    assert items["determinism(rnd.local)::s::d2"]["degenerate"] == {"generations": 2, "found": []}
    assert (
        items["compare(rnd.local-vs-rnd.local32)::s::d1"]["data"]["degenerate"]
        == (items["compare(rnd.local-vs-rnd.local32)::s::d1"]["degenerate"])
    )
    total = items["compare(rnd.local-vs-rnd.local32)::s::aggregate"]["degenerate"]
    assert (total["generations"], total["found"], total["by_pattern"]) == (8, 2, {"loop": 2})
    # the aggregates are pure functions of the records: a merge recomputes them exactly
    for nodeid, aggregate in aggregates(results).items():
        again = resummarized(results, nodeid, reverse=True)
        assert_same_aggregate(again, aggregate)
        assert again["degenerate"] == aggregate["degenerate"]
    # the HTML shows each finding, escaped
    from pytest_infercheck.report.views import item_detail

    html = item_detail(items["determinism(rnd.local)::s::d1"], "passed")
    assert "degenerate output: 2 of 2 generations" in html
    assert "loop of period 1 (&#x27;229&#x27;) in run 0" in html


def test_fail_on_degenerate_fails_the_looping_items(
    pytester: pytest.Pytester, random_model: Path
) -> None:
    _matrix(pytester, random_model, "settings: {fail_on_degenerate: true}\n")
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=6, failed=4)  # the items and their aggregates
    result.stdout.fnmatch_lines(
        [
            f"*- degenerate output: {LOOP.format(where='run 0')}",
            f"*- degenerate output: {LOOP.format(where='run 1')}",
            f"*- degenerate output: {LOOP.format(where='the baseline output')}",
            f"*- degenerate output: {LOOP.format(where='the test output')}",
            "FAILED *determinism(rnd.local)::s::d1 - degenerate*",
            "FAILED *compare(rnd.local-vs-rnd.local32)::s::d1 - degenerate*",
            "FAILED *compare(rnd.local-vs-rnd.local32)::s::aggregate - 1 o*",
        ]
    )


def test_fail_on_degenerate_takes_a_boolean_only(
    pytester: pytest.Pytester, random_model: Path
) -> None:
    _matrix(pytester, random_model, "settings:\n  fail_on_degenerate: sometimes\n")
    result = pytester.runpytest("-q")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*infercheck.yaml:8: settings.fail_on_degenerate: expected true or false, got *"]
    )


def _cases(path: Path) -> dict[str, dict[str, str]]:
    """``<kind>::<item>`` -> JUnit properties."""
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        kind = next(k for k in ("determinism", "compare") if f"{k}(" in classname)
        out[f"{kind}::{case.get('name')}"] = {
            p.get("name", ""): p.get("value", "") for p in case.iter("property")
        }
    return out
