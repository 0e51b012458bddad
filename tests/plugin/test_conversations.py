"""Conversations through real mlx-lm (the realistic Qwen2: random weights, the Qwen2.5 chat
template): a ``messages`` suite with ``generate`` turns in a diff (faithful, and with a test
side that swaps a token of every generation: the first divergent turn is the first generated
one), a compare, and determinism; node ids; every turn in the failure text and the HTML."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import REPO
from tests.htmldom import parse

CONFTEST = f"""\
import sys

sys.path.insert(0, {str(REPO)!r})

from tests.faults import pytest_infercheck_wrap_backend  # noqa: E402, F401
"""
SCRIPT = "<script>alert(1)</script>"
TURNS = [
    {"role": "system", "content": "You are brief."},
    {"role": "user", "content": f"Say hello {SCRIPT}"},
    {"role": "assistant", "generate": True},
    {"role": "user", "content": "Now count to three."},
]
GIVEN = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another one."},
]
CHECKS = """\
  - diff: {model: qwen2, backends: [local, faulty-swapped]}
    name: broken
  - diff: {model: qwen2, backends: [local, other]}
    name: faithful
  - compare: {baseline: qwen2@local, test: qwen2@other}
    max_kl: 1.0e-6
  - determinism: {target: qwen2@local, runs: 2}
"""


@pytest.fixture
def results(pytester: pytest.Pytester, realistic_qwen2: Any) -> tuple[dict[str, Any], str]:
    """One run: the items of the results file by node id, and the terminal output."""
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".ini", pytest="[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    suite = [
        {"id": "gen", "max_tokens": 6, "messages": TURNS},
        {"id": "given", "max_tokens": 6, "messages": GIVEN},
    ]
    pytester.makefile(".jsonl", conv="\n".join(json.dumps(r) for r in suite))
    pytester.makefile(
        ".yaml",
        infercheck=(
            f"models:\n  qwen2: {{path: '{realistic_qwen2.path}'}}\n"
            "backends:\n  local: {kind: mlx-lm}\n  other: {kind: mlx-lm}\n"
            "  faulty-swapped: {kind: mlx-lm}\n"
            f"suites: [conv.jsonl]\nchecks:\n{CHECKS}"
        ),
    )
    out = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(
        f"--infercheck-results={out}", "-p", "no:cacheprovider", "--html=r.html", "-rf"
    )
    assert out.exists(), result.stdout.str()[-3000:]
    items = {i["nodeid"]: i for i in json.loads(out.read_text())["items"]}
    return items, result.stdout.str()


def test_conversations_in_diff_compare_and_determinism(
    results: tuple[dict[str, Any], str], pytester: pytest.Pytester
) -> None:
    items, stdout = results
    names = {nodeid.split("infercheck.yaml::")[-1]: item for nodeid, item in items.items()}
    assert {
        "diff(broken)::conv::gen[faulty-swapped]",
        "diff(faithful)::conv::gen[other]",
        "diff(faithful)::conv::given[other]",
        "compare(qwen2.local-vs-qwen2.other)::conv::gen",
        "determinism(qwen2.local)::conv::gen",
    } <= set(names), sorted(names)

    # Faithful: every turn the same, on identical prompt ids.
    faithful = names["diff(faithful)::conv::gen[other]"]
    assert faithful["violations"] == []
    turns = faithful["data"]["turns"]
    assert [(t["index"], t["role"], t["kind"]) for t in turns] == [
        (0, "system", "given"),
        (1, "user", "given"),
        (2, "assistant", "generated"),
        (3, "user", "given"),
        (4, "assistant", "final"),
    ]
    assert turns[2]["same"] is True and turns[2]["base_text"] == turns[2]["test_text"]
    assert faithful["data"]["first_divergent_turn"] is None
    assert faithful["data"]["prompt_inputs"]["sharing"] == "shared ids"
    given = names["diff(faithful)::conv::given[other]"]["data"]
    assert [t["kind"] for t in given["turns"]] == ["given", "given", "given", "final"]
    assert names["compare(qwen2.local-vs-qwen2.other)::conv::gen"]["violations"] == []
    determinism = names["determinism(qwen2.local)::conv::gen"]
    assert determinism["violations"] == []

    # Broken: the swapped token shows first at the generated turn 2.
    broken = names["diff(broken)::conv::gen[faulty-swapped]"]
    assert broken["data"]["first_divergent_turn"] == 2
    assert broken["data"]["turns"][2]["same"] is False
    assert any(v.startswith("turn 2 not identical:") for v in broken["violations"])
    assert "turn 2 generated" in stdout and "<- first divergent turn" in stdout

    # The HTML shows every turn, escaped, and marks the first divergent one.
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    blob = parse(html)
    (container,) = [n for n in blob.iter("div") if n.attrs.get("id") == "data-container"]
    tests = json.loads(container.attrs["data-jsonblob"])["tests"]
    (row,) = [v for k, v in tests.items() if k.endswith("diff(broken)::conv::gen[faulty-swapped]")]
    extras = "".join(e["content"] for e in row[0]["extras"])
    detail = parse(extras)
    assert not detail.all("script")
    assert "Say hello &lt;script&gt;" in extras
    assert "Now count to three." in extras
    assert "2 assistant (generated) - first divergent turn" in extras
    assert "conversation (first divergent turn: 2)" in extras
