"""The comparison kinds' verdict bugs of issue 27, end to end through pytest on the real tiny
adder (mlx-lm in-process) and its 8-bit and 4-bit copies, each with an engine that produces
the fault (a backend wrapped through ``pytest_infercheck_wrap_backend``):

- a compare whose only gates are KL gates passed two completely different outputs when no
  logprobs could be had (method ``text``): now each item and the aggregate fail, naming the
  gate and why; where the matrix already says a side can give no logprobs, collection fails
  at the gate's line;
- ``min_same_top`` on the ``top-k-lower-bound`` method never applied: now it fails as not
  measured;
- ``fail_on: decisive`` waived a near-tie even when the output then diverged decisively:
  now the near-tie is waived only when the rest of the output was judged past it
  (teacher-forced on the baseline's continuation) with no later decisive disagreement;
- a sharded diff whose items fail, merged by ``pytest-infercheck report --json``, exits 1 and
  names the failed items.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .helpers import ADDITION, suite_jsonl

WRAPPERS = '''
import dataclasses

from pytest_infercheck.backends.base import Capabilities
from pytest_infercheck.backends.mlx_lm import MlxLmBackend
from pytest_infercheck.backends.mlx_lockstep import Stepper


class NoLogprobs(MlxLmBackend):
    """mlx-lm that returns text only, and a different one: no logprobs, no ids, no scoring."""

    @property
    def capabilities(self):
        return Capabilities(chat_template=False)

    def stepper(self):
        return None

    async def generate(self, prompt, params):
        g = await super().generate(prompt, params)
        return dataclasses.replace(
            g, text="x" + g.text[::-1], token_ids=None, chosen_logprobs=None,
            top_logprobs=None, full_logprobs=None, token_texts=None,
        )


class TopKOnly(MlxLmBackend):
    """mlx-lm that reports its top-k logprobs only and does not score a given continuation."""

    @property
    def capabilities(self):
        return Capabilities(top_k_logprobs=5, token_ids=True, chat_template=False)

    def stepper(self):
        return None

    async def generate(self, prompt, params):
        import numpy as np

        g = self.generate_sync(prompt, params, full_logprobs=True)
        rows = g.full_logprobs.astype(np.float64)
        rows -= np.log(np.exp(rows).sum(axis=1, keepdims=True))  # bf16 rows, renormalised
        top = [{int(i): float(row[i]) for i in np.argsort(-row)[:5]} for row in rows]
        chosen = [float(row[t]) for row, t in zip(rows, g.token_ids)]
        return dataclasses.replace(
            g, top_logprobs=top, chosen_logprobs=chosen, full_logprobs=None
        )


class LateFault(MlxLmBackend):
    """mlx-lm whose forward pass, after it is fed the token "1", strongly prefers "9": an
    engine that goes wrong late, past an early near-tie."""

    def stepper(self):
        import mlx.core as mx

        inner = super().stepper()
        tokenizer = self._loaded.tokenizer
        one = tokenizer.encode("1", add_special_tokens=False)[-1]
        nine = tokenizer.encode("9", add_special_tokens=False)[-1]

        def forward(inputs, cache):
            logits = inner.model(inputs, cache=cache)
            if inputs.shape[1] != 1:
                return logits
            bump = (mx.arange(logits.shape[-1]) == nine).astype(logits.dtype) * 30.0
            fed_one = (inputs[:, -1] == one)[:, None, None]
            return logits + mx.where(fed_one, bump, mx.zeros_like(bump))

        return Stepper(inner.model, inner.eos_ids, inner.decode, forward)


WRAPPED = {"nolp": NoLogprobs, "topk": TopKOnly, "topk2": TopKOnly, "late": LateFault}


def pytest_infercheck_wrap_backend(backend, name, spec):
    if name not in WRAPPED:
        return None
    return WRAPPED[name](name, backend.spec, chat=backend.chat, add_bos=backend.add_bos)
'''


def _matrix(
    pytester: pytest.Pytester,
    models: dict[str, Path],
    backends: str,
    checks: str,
    rows: list[tuple[str, str, str]] | None = None,
) -> None:
    pytester.makeconftest(WRAPPERS)
    pytester.makefile(".jsonl", addition=suite_jsonl(rows) if rows else suite_jsonl())
    lines = ["models:"]
    lines += [f"  {name}: {{path: '{path}'}}" for name, path in models.items()]
    lines += ["backends:", backends, "suites: [addition.jsonl]", "checks:", checks]
    pytester.makefile(".yaml", infercheck="\n".join(lines) + "\n")


def _items(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, dict[str, Any]]:
    items = json.loads((pytester.path / name).read_text())["items"]
    return {i["nodeid"].split("::")[-1]: i for i in items}


def test_kl_gates_on_a_comparison_without_logprobs_fail_naming_the_gate(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """Before: every item and the aggregate passed (8 passed, 1 aggregate), the KL gates
    silently skipped on two completely different outputs."""
    _matrix(
        pytester,
        tiny_models,
        "  local: {kind: mlx-lm}\n  nolp: {kind: mlx-lm}",
        "  - compare: {baseline: bf16@local, test: bf16@nolp}\n"
        "    max_kl: 0.01\n    max_mean_kl: 0.005\n    flips: {fail_item_on: never}\n",
    )
    result = pytester.runpytest("-q", "--infercheck-results=r.json")
    result.assert_outcomes(failed=9)
    items = _items(pytester)
    # mlx-lm keeps no top-k of its own generations: the baseline's own logprobs cannot be
    # compared with a side that has none either, and nothing can score the test side
    why = "method text, the baseline returned no top-k logprobs"
    for name in ("s01", "s08"):
        assert items[name]["violations"] == [f"max_kl: not measured: {why}"]
        assert items[name]["data"]["method"] == "text"
    assert items["aggregate"]["violations"] == [
        "8 of 8 items failed: "
        + ", ".join(f"s0{i} (max_kl: not measured: {why})" for i in range(1, 6))
        + ", and 3 more",
        "bf16@nolp: max_mean_kl: not measured: method text, 8 of 8 prompts compared by text "
        "only: no KL over the suite",
    ]


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        (
            "{kind: vllm-mlx, url: 'http://127.0.0.1:9'}",
            "backend 'srv' (vllm-mlx) returns no logprobs at all (its logprob fields are ignored)",
        ),
        (
            "{kind: openai, url: 'http://127.0.0.1:9', logprobs: false}",
            "backend 'srv' has logprobs: false",
        ),
    ],
)
def test_a_kl_gate_known_unmeasurable_from_the_matrix_is_a_collection_error(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], backend: str, why: str
) -> None:
    """Nothing is started: the matrix alone says the side has no logprobs. Before: collected
    (and, run, passed on text)."""
    _matrix(
        pytester,
        tiny_models,
        f"  local: {{kind: mlx-lm}}\n  srv: {backend}",
        "  - diff: {model: bf16, backends: [local, srv]}\n"
        "    expect: budget\n    max_kl: 0.01\n    min_similarity: 0.9\n",
    )
    result = pytester.runpytest("-q", "--collect-only")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [f"*infercheck.yaml:12: checks[[]0].max_kl: not measured: method text, {why}"]
    )
    result.stdout.no_fnmatch_line("*min_similarity*not measured*")


def test_min_same_top_on_the_top_k_lower_bound_fails_as_not_measured(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """Both sides report top-k only: the method is top-k-lower-bound, which has no
    teacher-forced argmax. Before: min_same_top never applied and the aggregate passed."""
    _matrix(
        pytester,
        tiny_models,
        "  topk: {kind: mlx-lm}\n  topk2: {kind: mlx-lm}",
        "  - compare: {baseline: bf16@topk, test: q4@topk2}\n"
        "    min_same_top: 0.5\n    flips: {fail_item_on: never}\n",
    )
    result = pytester.runpytest("-q", "--infercheck-results=r.json")
    items = _items(pytester)
    assert {i["data"]["method"] for n, i in items.items() if n != "aggregate"} == {
        "top-k-lower-bound"
    }
    assert items["aggregate"]["outcome"] == "failed"
    assert items["aggregate"]["violations"] == [
        "q4@topk2: min_same_top: not measured: method top-k-lower-bound: 8 of 8 prompts have "
        "no teacher-forced argmax"
    ]
    result.assert_outcomes(passed=8, failed=1)


TIE_PROMPTS = [("e11", "1+0=", "1"), ("s01", "12+34=", "46")]
"""e11: q8 parts from bf16 at token 0 by a near-tie (margins 1/32 nats, bf16's step);
s01: the sides agree."""
DECISIVE_CHECK = """\
  - compare: {{baseline: bf16@local, test: q8@{backend}}}
    min_similarity: 1.0
    flips: {{fail_item_on: never}}
    tie_margin: 0.1
    fail_on: decisive
"""


def test_a_near_tie_is_waived_only_when_judged_past_with_no_later_decisive_disagreement(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """Faithful q8: e11 parts at a near-tie, is judged past it (teacher-forced on the
    baseline's continuation in the lockstep), nothing later disagrees: waived, it passes.
    The same q8 behind an engine that goes wrong once fed "1" (the baseline's first token,
    so position 1 onwards): its output still parts at the same near-tie, but the test side
    now decisively prefers "9" at position 1: not waived, the item fails and says why.
    Before, both passed."""
    _matrix(
        pytester,
        tiny_models,
        "  local: {kind: mlx-lm}\n  late: {kind: mlx-lm}",
        DECISIVE_CHECK.format(backend="local"),
        TIE_PROMPTS,
    )
    faithful = pytester.runpytest("-q", "--infercheck-results=r.json")
    faithful.assert_outcomes(passed=3)
    waived = _items(pytester)["e11"]

    _matrix(
        pytester,
        tiny_models,
        "  local: {kind: mlx-lm}\n  late: {kind: mlx-lm}",
        DECISIVE_CHECK.format(backend="late"),
        TIE_PROMPTS,
    )
    late = pytester.runpytest("-q", "--infercheck-results=r.json")
    late.assert_outcomes(passed=1, failed=2)  # e11 and the aggregate for it

    e11 = waived["data"]
    assert (e11["divergence_label"], e11["first_divergence"], e11["judged_past"]) == (
        "near-tie",
        0,
        True,
    )
    assert "later_first" not in e11
    assert e11["margins"] == [0.03125, 0.03125]  # from the lockstep's rows, no scoring pass
    items = _items(pytester)
    e11 = items["e11"]["data"]
    assert (e11["divergence_label"], e11["first_divergence"], e11["judged_past"]) == (
        "near-tie",
        0,
        True,
    )
    assert e11["later_labels"] == {"decisive": 1}
    assert e11["later_first"]["position"] == 1 and e11["later_first"]["label"] == "decisive"
    (violation,) = items["e11"]["violations"]
    assert violation.startswith("text similarity ") and violation.endswith("< min_similarity 1")
    late.stdout.fnmatch_lines(
        [
            "fail_on: decisive not applied: after the near-tie at token 0, token 1 is a "
            "decisive disagreement*",
        ]
    )
    assert items["aggregate"]["violations"][0].startswith("1 of 2 items failed: e11 (")


DIFF_PAIR = """\
models:
  bf16: {{path: '{bf16}'}}
backends:
  local: {{kind: mlx-lm}}
  f32: {{kind: mlx-lm, dtype: float32}}
suites: [addition.jsonl]
checks:
  - diff: {{model: bf16, backends: [local, f32]}}
"""


def test_a_sharded_diff_whose_items_fail_merges_to_a_failed_gate(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """bf16 in bfloat16 against float32 parts on some prompts: those diff items fail
    (expect: identical). Run in two shards, each shard's aggregate defers its gates; the
    merge by ``pytest-infercheck report --json`` exits 1 and names the failed items. Before
    (the comparison's aggregate forgot its items): it exited 0."""
    pytester.makeconftest("")
    pytester.makefile(".jsonl", addition=suite_jsonl([*ADDITION, ("e11", "1+0=", "1")]))
    pytester.makefile(".yaml", infercheck=DIFF_PAIR.format(bf16=tiny_models["bf16"]))
    failed: list[str] = []
    for shard in ("1/2", "2/2"):
        name = f"s{shard[0]}.json"
        pytester.runpytest("-q", f"--infercheck-shard={shard}", f"--infercheck-results={name}")
        failed += [n for n, i in _items(pytester, name).items() if i["outcome"] == "failed"]
    assert failed, "the float32 diff should fail some items"
    merged = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_infercheck.cli",
            "report",
            "s1.json",
            "s2.json",
            "-o",
            "report.html",
            "--json",
            "merged.json",
        ],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert merged.returncode == 1, merged.stdout + merged.stderr
    (aggregate,) = [
        i
        for i in json.loads((pytester.path / "merged.json").read_text())["items"]
        if i["role"] == "aggregate"
    ]
    assert aggregate["outcome"] == "failed"
    shown = aggregate["violations"][0]
    assert "e11[f32]" in failed
    assert shown.startswith(f"{len(failed)} of 9 items failed: ")
    for name in sorted(failed)[:5]:
        assert f"{name} (" in shown
    assert "items failed" in merged.stderr
