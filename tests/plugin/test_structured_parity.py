"""structured-parity through pytester, on scripted structured-chat backends
(:mod:`tests.structured_fakes`: answers chosen exactly, one behaviour per fault): the YAML,
node ids, items and the aggregate, what each fault fails naming its field, the terminal
summary, JUnit properties, the JSON results (the aggregate recomputed from them is the same)
and the HTML report (model output escaped). Real servers: tests/integration/
test_structured_parity_servers.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from tests.htmldom import parse
from tests.resummarize import aggregates, assert_same_aggregate, resummarized
from tests.structured_fakes import HOSTILE, suite_jsonl

from .test_html_report import report_parts

CONFTEST = f"""\
import sys

sys.path.insert(0, {str(REPO)!r})  # the repository's tests package, in a subprocess too

from tests.structured_fakes import pytest_infercheck_wrap_backend  # noqa: E402, F401
"""

BACKENDS = (
    "faithful",
    "oneslot",
    "ignoresn",
    "refusestools",
    "nulls",
    "moves",
    "broken",
    "hostile",
)
CHECKS = """\
  - structured-parity: {targets: [tiny@faithful, tiny@oneslot]}
    name: agree
  - structured-parity: {targets: [tiny@nulls], paths: [chat, chat-stream]}
    name: nulls
  - structured-parity: {targets: [tiny@faithful, tiny@moves], paths: [chat]}
    name: moves
  - structured-parity: {targets: [tiny@broken], paths: [chat, chat-stream]}
    name: broken
  - structured-parity: {targets: [tiny@hostile], paths: [chat, chat-stream]}
    name: hostile
  - structured-parity: {targets: [tiny@faithful, tiny@refusestools]}
    name: refuses
  - structured-parity: {targets: [tiny@ignoresn], paths: [chat, chat-n2]}
    name: ignoresn
"""
PROMPTS = ("tu001", "tu002", "tu003", "tu004", "tu005", "js001")
CALLS = ("tu001", "tu002", "tu003")
"""The prompts answered with a call."""


def write(pytester: pytest.Pytester, tiny: Path, checks: str = CHECKS) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".jsonl", tools=suite_jsonl())
    backends = "".join(f"  {name}: {{kind: mlx-lm}}\n" for name in BACKENDS)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tiny: {{path: '{tiny}'}}\nbackends:\n{backends}"
        f"suites: [tools.jsonl]\nchecks:\n{checks}",
    )


def results_of(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "results.json").read_text())
    return data


def by_check(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """check name -> item name -> its record."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for item in results["items"]:
        out.setdefault(item["check"], {})[item["name"]] = item
    return out


def test_every_fault_fails_naming_its_field_and_faithful_servers_pass(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    write(pytester, tiny_models["bf16"])
    result = pytester.runpytest_subprocess(
        "-q",
        "-p",
        "no:cacheprovider",
        "--infercheck-results=results.json",
        "--junitxml=out.xml",
        "--html=report.html",
        "-rA",
    )
    out = result.stdout.str()
    checks = by_check(results_of(pytester))
    outcome = {
        check: {name: item["outcome"] for name, item in items.items()}
        for check, items in checks.items()
    }

    # agree: two faithful targets, every path; chat-n2 refused by one: its probe found it
    # lacking (a 400 where chat answered): unsupported, passes, saying so
    agree = outcome["structured-parity(agree)"]
    assert set(agree) == {f"{p}[{b}]" for p in PROMPTS for b in ("faithful", "oneslot")} | {
        "aggregate"
    }
    assert set(agree.values()) == {"passed"}, out
    tu001 = checks["structured-parity(agree)"]["tu001[oneslot]"]["data"]
    status = {r["path"]: r["status"] for r in tu001["results"]}
    assert status == {
        "chat": "answered",
        "chat-stream": "answered",
        "chat-n2": "unsupported",
        "messages": "answered",
        "messages-stream": "answered",
    }
    assert tu001["prompt_ids"] == "same (10 ids)"
    cross = tu001["comparisons"][-1]
    assert (cross["side"], cross["reference"], cross["differences"]) == (
        "oneslot chat",
        "faithful chat",
        [],
    )
    aggregate = checks["structured-parity(agree)"]["aggregate"]["data"]
    assert aggregate["unsupported"] == {
        "tiny@oneslot chat-n2": "the probe got HTTP 400 where chat answered: only n = 1 is "
        "supported"
    }
    assert (aggregate["items"], aggregate["passed"]) == (12, 12)

    # refuses: every tool request refused (HTTP 400, a broken tool parser); its probe has no
    # tools, so nothing is excused: each item with tools fails naming the 400 and the
    # server's message on every path, the items without tools pass, the aggregate fails
    refuses = checks["structured-parity(refuses)"]
    with_tools = {f"{p}[refusestools]" for p in ("tu001", "tu002", "tu003", "tu004")}
    assert {n for n, i in refuses.items() if i["outcome"] == "failed"} == {
        *with_tools,
        "aggregate",
    }
    for name in with_tools:
        assert refuses[name]["violations"] == [
            f"tiny@refusestools: {path} failed: HTTP 400: tools: the tool parser failed to load"
            for path in ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")
        ], name
        statuses = {r["status"] for r in refuses[name]["data"]["results"]}
        assert statuses == {"error"}, name
    assert refuses["aggregate"]["data"]["unsupported"] == {}
    assert refuses["aggregate"]["violations"][0].startswith(
        "4 of 12 items failed: tu001[refusestools] (tiny@refusestools: chat failed: HTTP 400: "
        "tools: the tool parser failed to load)"
    )

    # ignoresn: n: 2 answered with one choice: its probe found chat-n2 lacking
    ignoresn = checks["structured-parity(ignoresn)"]
    assert set(outcome["structured-parity(ignoresn)"].values()) == {"passed"}
    assert ignoresn["aggregate"]["data"]["unsupported"] == {
        "tiny@ignoresn chat-n2": "n: 2 answered 1 choice: the server ignores n"
    }

    # nulls: streamed calls lost, finish_reason stop: tool_calls and finish_reason named
    nulls = checks["structured-parity(nulls)"]
    assert {n for n, i in nulls.items() if i["outcome"] == "failed"} == {*CALLS, "aggregate"}
    assert nulls["tu001"]["violations"] == [
        'tool_calls differ: chat-stream vs chat: 0 vs 1 calls: [] vs [add({"a":12,"b":34})]',
        "finish_reason: chat-stream 'stop' vs chat 'tool_calls'",
    ]
    assert nulls["aggregate"]["data"]["differences"] == {"tool_calls": 3, "finish_reason": 3}

    # moves: the second target leaves its calls in content: the place is named, and its
    # finish_reason tool_calls without a parsed call is a fault of its own
    moves = checks["structured-parity(moves)"]
    assert {n for n, i in moves.items() if i["outcome"] == "failed"} == {
        *(f"{p}[moves]" for p in CALLS),
        "aggregate",
    }
    assert moves["tu001[moves]"]["violations"] == [
        "finish_reason: chat says 'tool_calls' but the response has no tool_calls (calls left "
        "in content)",
        'tool_calls place: moves chat returned call 1 add({"a":12,"b":34}) in content, '
        "faithful chat in tool_calls",
    ]

    # broken: a server error fails every item with its message; the session goes on
    broken = checks["structured-parity(broken)"]
    assert all(i["outcome"] == "failed" for i in broken.values())
    assert broken["tu005"]["violations"] == [
        "tiny@broken: chat-stream failed: HTTP 500: the engine is gone"
    ]

    # the terminal summary: a row per check x suite
    result.stdout.fnmatch_lines(
        [
            "*structured-parity(agree)*tools*12/12*-*0*1*0*PASS*",
            "*structured-parity(nulls)*tools*3/6*tool_calls 3, finish_reason 3*FAIL*",
        ]
    )
    # JUnit properties of an item and an aggregate
    cases = {
        f"{case.get('classname')}::{case.get('name')}": {
            p.get("name"): p.get("value") for p in case.iter("property")
        }
        for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")
    }
    (nulls_tu001,) = [v for k, v in cases.items() if "(nulls)" in k and k.endswith("tu001")]
    assert nulls_tu001["infercheck_differing_fields"] == "tool_calls,finish_reason"
    assert nulls_tu001["infercheck_paths_answered"] == "2"
    (nulls_all,) = [v for k, v in cases.items() if "(nulls)" in k and k.endswith("aggregate")]
    assert nulls_all["infercheck_differences_finish_reason"] == "3"

    # the aggregate recomputed from the JSON results (a merge of one shard) is the same
    results = results_of(pytester)
    for nodeid, aggregate_item in aggregates(results).items():
        for reverse in (False, True):
            assert_same_aggregate(resummarized(results, nodeid, reverse=reverse), aggregate_item)

    # the HTML report: every item's detail escapes the model's output
    _, tests = report_parts(pytester.path / "report.html")
    hostile = [t for nodeid, t in tests.items() if "structured-parity(hostile)" in nodeid]
    assert hostile
    for test, *_ in hostile:
        detail = "".join(e["content"] for e in test["extras"])
        assert not parse(detail).all("script")
        assert "<script>" not in detail
    tu005 = next(t for nodeid, t in tests.items() if nodeid.endswith("hostile)::tools::tu005"))
    assert "&lt;script&gt;alert" in "".join(e["content"] for e in tu005[0]["extras"])
    assert HOSTILE.startswith("<script>")


def test_an_in_process_target_errors_naming_what_it_needs(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    pytester.makefile(".jsonl", tools=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tiny: {{path: '{tiny_models['bf16']}'}}\n"
        "suites: [tools.jsonl]\nchecks:\n  - structured-parity: {targets: [tiny]}\n",
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"failed": 7}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*structured-parity needs a server that answers structured chat requests: "
            "tiny@local (MlxLmBackend) does not*"
        ]
    )


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{targets: [tiny], paths: [chat-stream]}", "'chat' is the reference"),
        ("{targets: [tiny, tiny]}", "a target is listed twice: tiny"),
        ("{targets: [tiny]}\n    allow: [colour]", "allow"),
        ("{targets: [tiny]}\n    max_kl: 0.1", "structured-parity does not use max_kl"),
    ],
)
def test_configuration_errors_name_their_line(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], entry: str, error: str
) -> None:
    pytester.makefile(".jsonl", tools=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tiny: {{path: '{tiny_models['bf16']}'}}\n"
        f"suites: [tools.jsonl]\nchecks:\n  - structured-parity: {entry}\n",
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"*infercheck.yaml:*{error}*"])
