"""cache-parity through pytester on mlx-lm in-process (the tiny adder, float32): the kept
prompt cache reuses the longest common prefix, and mlx-lm's output through it is identical to
a fresh cache's (logprob differences exactly 0.0), so the strictest tolerance holds. Its
failing side is shown on real servers behind the faulty proxy
(tests/integration/test_cache_parity_servers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

from .helpers import junit_properties, matrix_yaml, suite_jsonl

CHECKS = """\
  - cache-parity: {target: bf16@local32}
    logprob_tolerance: 0.0
    require_hits: true
"""
BACKENDS = """\
backends:
  local32: {kind: mlx-lm, dtype: float32}
"""


@pytest.fixture
def matrix(pytester: pytest.Pytester, tiny_models: dict[str, Path]) -> None:
    pytester.makefile(".jsonl", addition=suite_jsonl())
    yaml = matrix_yaml({"bf16": tiny_models["bf16"]}, CHECKS)
    pytester.makefile(".yaml", infercheck=yaml.replace("suites:", BACKENDS + "suites:", 1))


def test_mlx_lm_kept_prompt_cache_is_identical_to_a_fresh_one(
    pytester: pytest.Pytester, matrix: None
) -> None:
    result = pytester.runpytest("-q", "--junitxml=out.xml", "-rA")
    result.assert_outcomes(passed=9)
    cases = junit_properties(pytester.path / "out.xml")
    s01 = cases["s01"]
    # s01 "12+34=" is <s> 1 2 + 3 4 = (7 ids). Its sibling "12+3=4" shares <s> 1 2 + 3: 5
    # tokens reused; the exact repeat reuses all but the last prompt token (one is always
    # fed): 6; after the eviction prompt "0 =43+21" only <s> is shared: 1.
    assert s01["infercheck_cached_tokens_shared_prefix"] == "5"
    assert s01["infercheck_cached_tokens_exact_repeat"] == "6"
    assert s01["infercheck_cached_tokens_eviction"] == "1"
    # The adder has no chat template: no conversation to render, multi-turn not exercised
    # (it is, on the realistic Qwen2 below); mlx-lm takes one request at a time: concurrent.
    assert "infercheck_cached_tokens_multi_turn" not in s01
    assert "infercheck_cached_tokens_concurrent" not in s01
    assert s01["infercheck_scenarios"] == "3"
    assert s01["infercheck_matching_scenarios"] == "3"
    assert cases["aggregate"]["infercheck_parity_prompts"] == "8"


def test_mlx_lm_later_turns_from_the_kept_cache_are_identical(
    pytester: pytest.Pytester, realistic_qwen2: Any
) -> None:
    """Three conversations of the bundled ``multi-turn`` suite (given answers: mt001; a
    ``generate`` turn: mt009; two: mt015) and two single-turn prompts, on the realistic Qwen2
    (its chat template) in float32: each later turn, served from the kept cache of the
    conversation up to the previous user turn, equals the fresh-cache reference exactly."""
    lines = {
        json.loads(line)["id"]: line
        for line in (REPO / "suites" / "multi-turn.jsonl").read_text().splitlines()
    }
    singles = [
        json.dumps({"id": "hello", "prompt": "Say hello.", "max_tokens": 6}),
        json.dumps({"id": "colour", "prompt": "Name a colour.", "max_tokens": 6}),
    ]
    suite = [lines["mt001"], lines["mt009"], lines["mt015"], *singles]
    pytester.makefile(".jsonl", conv="\n".join(suite))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  q: {{path: '{realistic_qwen2.path}'}}\n"
        "backends:\n  local32: {kind: mlx-lm, dtype: float32}\n"
        "suites: [conv.jsonl]\nchecks:\n"
        "  - cache-parity: {target: q@local32}\n"
        "    logprob_tolerance: 0.0\n    require_hits: true\n",
    )
    result = pytester.runpytest("-q", "--infercheck-results=results.json", "-rA")
    result.assert_outcomes(passed=6)
    data = json.loads((pytester.path / "results.json").read_text())
    items = {i["name"].split("::")[-1]: i["data"] for i in data["items"]}
    turns = {
        k: {s["scenario"]: s for s in v["scenarios"]}["multi-turn"]
        for k, v in items.items()
        if k != "aggregate"
    }
    assert all(
        t["exercised"] and t["match"] and t["max_logprob_diff"] == 0.0 for t in turns.values()
    )
    # A conversation is sent up to its previous user turn first: mt001 [s, u, a, u] its
    # first 2 turns, mt015 [s, u, a, u, a, u] its first 4; a single-turn prompt is the
    # second user turn after the other one and its answer (its own reference).
    assert turns["mt001"]["note"] == "after turns 1-2 of 4 (user turn 1 of 2)"
    assert turns["mt015"]["note"] == "after turns 1-4 of 6 (user turn 2 of 3)"
    assert turns["hello"]["companion"] == "colour" and turns["colour"]["companion"] == "hello"
    assert turns["hello"]["reference"] is not None
    assert "reference" not in turns["mt001"]
    # Every later turn reused the earlier turns' prompt at least (mlx-lm's kept cache holds
    # the longest common prefix with the previous request).
    for name, turn in turns.items():
        assert turn["hit"] == "hit", name
    # ... and no more: the exact repeat before it reused the whole conversation but its last
    # token; the later turn only the earlier turns' part (mt001: its [s, u] turns, 49 tokens).
    repeats = {
        k: {s["scenario"]: s for s in v["scenarios"]}["exact-repeat"]
        for k, v in items.items()
        if k != "aggregate"
    }
    assert turns["mt001"]["cached_tokens"] == 49
    for name in ("mt001", "mt009", "mt015"):
        assert turns[name]["cached_tokens"] < repeats[name]["cached_tokens"], name
