"""A KL reported as a lower bound is one, end to end.

- Two OpenAI-compatible servers known only by their top-k (text-keyed, scripted: the numbers
  are ours). Each reports one token ``x`` at every step: the baseline at ``p(x) = 0.9``, the
  test side at ``q(x) = 0.999995``, from rows ``p = (0.9, 0.1)`` and ``q = (0.999995,
  1e-5)`` (a row 5e-6 over 1, as float32 rounding leaves one). Their KL is 0.826214 at every
  position, within ``max_kl: 0.85``. The bound read the test tail as ``1 - 0.999995 =
  5e-6`` (the row holds 1e-5 there) and reported 0.895529 as a lower bound: the item failed
  on a KL the engines do not have. The tail is now known to within 1e-3 (float32 values) and
  the bound is 0.359603.
- On mlx-lm: the tiny adder's bf16 output recorded as a golden (its teacher-forced top-20),
  replayed against the 4-bit model (``golden-top-k-lower-bound``), never exceeds the KL the
  same pair gives from full rows on both sides (``teacher-forced``) at any position, beyond
  the golden's 6-decimal rounding. mlx-lm scores in float32, so these rows are normalised and
  the old bound held here too: this guards the new tolerances on a real engine (the golden's
  rounded float32 values read as float32, the bound not empty).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_infercheck.metrics.kl import position_stats
from tests.http.fake_server import Reply, Script, chat_answer, fake_server

from .helpers import suite_jsonl

ROWS = [
    ("k01", "40+40=", "80"),
    ("k02", "25+17=", "42"),
    ("k03", "19+11=", "30"),
    ("k04", "12+34=", "46"),
    ("k05", "3+4=", "7"),
    ("k06", "6+63=", "69"),
]
RECORD = """\
  - compare: {baseline: "golden:adder-bf16", test: adder}
"""
SLACK = 2e-6
"""The golden stores logprobs to 6 decimals: its shared terms move by about 5e-7 nats from the
full rows' (a position where the bound is the full KL up to that rounding)."""
REPLAY = """\
  - compare: {baseline: "golden:adder-bf16", test: adder}
  - compare: {baseline: bf16, test: adder}
"""


def _matrix(tiny_models: dict[str, Path], adder: str, checks: str) -> str:
    return (
        f"models:\n  adder: {{path: '{tiny_models[adder]}'}}\n"
        f"  bf16: {{path: '{tiny_models['bf16']}'}}\n"
        f"suites: [addition.jsonl]\nchecks:\n{checks}"
    )


def test_the_golden_top_k_bound_stays_below_the_full_rows_kl(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    pytester.makefile(".jsonl", addition=suite_jsonl(ROWS))
    pytester.makefile(".yaml", infercheck=_matrix(tiny_models, "bf16", RECORD))
    pytester.runpytest("-q", "--infercheck-record").assert_outcomes(passed=len(ROWS) + 1)
    pytester.makefile(".yaml", infercheck=_matrix(tiny_models, "q4", REPLAY))
    pytester.runpytest("-q", "--infercheck-results=r.json")
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    by_check: dict[str, dict[str, dict[str, object]]] = {}
    for item in items:
        if item["role"] == "prompt":
            check = "golden" if "golden" in item["nodeid"] else "full"
            by_check.setdefault(check, {})[item["name"]] = item["data"]
    compared = 0
    for name, _, _ in ROWS:
        golden, full = by_check["golden"][name], by_check["full"][name]
        assert golden["method"] == "golden-top-k-lower-bound", golden["method"]
        assert full["method"] == "teacher-forced", full["method"]
        assert golden["base_ids"] == full["base_ids"]  # one continuation: the bf16 output
        bound, exact = golden["kl_per_position"], full["kl_per_position"]
        assert isinstance(bound, list) and isinstance(exact, list)
        assert len(bound) == len(exact) > 0
        for t, (b, f) in enumerate(zip(bound, exact, strict=True)):
            assert b <= max(f, 0.0) + SLACK, (name, t, b, f)
        compared += len(bound)
    assert compared >= len(ROWS)
    # The bound is not empty: it still sees the 4-bit model's largest departures.
    assert max(max(by_check["golden"][n]["kl_per_position"]) for n, _, _ in ROWS) > 0.01  # type: ignore[call-overload]


class TopKServer(Script):
    """Answers the logprob probe (the prompt ``1``) plainly, every generation with ``x x x``
    and one top-k entry per step, ``x`` at ``logprob``."""

    def __init__(self, logprob: float) -> None:
        step = {
            "token": "x",
            "logprob": logprob,
            "top_logprobs": [{"token": "x", "logprob": logprob}],
        }
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "xxx"},
            "finish_reason": "length",
            "logprobs": {"content": [step, step, step]},
        }
        super().__init__([Reply(body={"choices": [choice]})])
        self.probe = Reply(body=chat_answer("1", [("1", -0.1)]))

    def next(self) -> Reply:
        messages = (self.requests[-1]["json"] or {}).get("messages") or []
        if messages and messages[-1].get("content") == "1":
            return self.probe
        return super().next()


def test_a_top_k_bound_above_the_engines_kl_no_longer_fails_a_max_kl_gate(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    p, q = [math.log(0.9), math.log(0.1)], [math.log(0.999995), math.log(1e-5)]
    true = float(position_stats([p], [q], [0]).kl[0])
    # 0.9 ln(0.9 / 0.999995) + 0.1 ln(0.1 / 1e-5) = -0.094820 + 0.921034
    assert true == pytest.approx(0.826214, abs=1e-6)
    pytester.makefile(".jsonl", addition=suite_jsonl([("t01", "12+34=", "46")]))
    with fake_server(TopKServer(p[0])) as base_url, fake_server(TopKServer(q[0])) as test_url:
        pytester.makefile(
            ".yaml",
            infercheck=f"models:\n  m: {{path: '{tiny_models['bf16']}'}}\n"
            "backends:\n"
            f"  a: {{kind: openai, url: '{base_url}'}}\n"
            f"  b: {{kind: openai, url: '{test_url}'}}\n"
            "suites: [addition.jsonl]\nchecks:\n"
            "  - compare: {baseline: m@a, test: m@b}\n"
            "    max_kl: 0.85\n"
            "    flips: {fail_item_on: never}\n",
        )
        result = pytester.runpytest_subprocess("-q", "-rf", "--infercheck-results=r.json")
    items = {i["name"]: i for i in json.loads((pytester.path / "r.json").read_text())["items"]}
    data = items["t01"]["data"]
    assert data["method"] == "top-k-lower-bound"
    # The test tail is at most 5e-6 + 1e-3, the baseline's in [0.1 - 1e-3, 0.1 + 1e-3]; y / e
    # lies below: 0.9 ln(0.9 / 0.999995) + 0.099 ln(0.099 / 1.005e-3) = 0.359603 (main:
    # -0.094820 + 0.1 ln(0.1 / 5e-6) = 0.895529 > max_kl 0.85 > the engines' 0.826214).
    bound = 0.9 * math.log(0.9 / 0.999995) + 0.099 * math.log(0.099 / 1.005e-3)
    assert data["kl_per_position"] == [pytest.approx(bound, rel=1e-9)] * 3
    assert bound == pytest.approx(0.359603, abs=1e-6) and bound <= true
    assert items["t01"]["outcome"] == "passed", result.stdout.str()
