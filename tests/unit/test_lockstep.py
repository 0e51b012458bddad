"""Batched lockstep stepping (:mod:`pytest_infercheck.backends.mlx_lockstep`) on the real
tiny models, on mlx CPU:

- batched equals one at a time, bit for bit: generations (tokens, chosen logprobs, finish)
  and per-position statistics, on the bf16 and 4-bit adder and the random bf16 model;
- the lockstep's generations are :meth:`MlxLmBackend.generate_sync`'s, bit for bit, for the
  baseline and for each test model's own continuation (tails after the first divergence);
- its statistics equal today's separately scored teacher-forced statistics
  (``score_sync`` on both sides, then ``position_stats``) within :data:`KL_TOL` /
  :data:`DELTA_P_TOL`, with the same top tokens, and so do the test side's most likely token
  and both margins at every position (:mod:`pytest_infercheck.metrics.forced`, what a
  comparison reads at and after the first divergence instead of scoring) within
  :data:`MARGIN_TOL`: measured on the quickstart's prompts;
- EOS and ``max_tokens`` per sequence;
- groups stepped at once, each on its own mlx stream (as comparisons run them on a
  multi-core CPU), equal one batch bit for bit, however the prompts are split.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from pytest_infercheck.backends.base import Generation, GenerationParams
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.backends.mlx_lockstep import (
    LockstepResult,
    greedy,
    lockstep,
    lockstep_groups,
)
from pytest_infercheck.metrics.forced import ForcedStats, forced_full
from pytest_infercheck.metrics.kl import position_stats

pytest.importorskip("mlx_lm")

KL_TOL = 1e-6
"""How far (absolute, nats) a lockstep ``KL_t`` may be from the separately scored one.
KV-cached stepping and one full forward pass may round differently; measured on the
quickstart's 60 prompts (bf16 vs 8-bit and 4-bit, mlx 0.32 CPU): a difference of exactly 0
at every position. The tolerance leaves room for another mlx version's kernels."""
DELTA_P_TOL = 1e-6
"""The same for delta-p (probabilities), also measured exactly 0."""

MARGIN_TOL = 1e-6
"""The same for the margins (nats): measured exactly 0 on the quickstart (bf16 logprobs move
in steps of 1/32, so a difference would show)."""

QUICKSTART_SUITE = REPO / "examples" / "quickstart" / "addition.jsonl"


def _quickstart_texts() -> list[str]:
    lines = QUICKSTART_SUITE.read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip() and not line.startswith("//")]
    return [str(row["prompt"]) for row in rows]


def _backend(path: Path) -> MlxLmBackend:
    return MlxLmBackend(path.name, MlxModelSpec(str(path)), chat=False)


MIXED = ["12+34=", "1+2=", "99+99=", "hello world, how are you", "7+8=", "a", "33+4="]
"""Prompts of different lengths (padding) and kinds (the random model rambles)."""


def _same_generation(a: Generation, b: Generation) -> bool:
    return (a.token_ids, a.chosen_logprobs, a.finish_reason, a.text) == (
        b.token_ids,
        b.chosen_logprobs,
        b.finish_reason,
        b.text,
    )


def _run(base: MlxLmBackend, tests: list[MlxLmBackend], texts: list[str], max_tokens: int):
    ids = [base.lockstep_ids(base.render_sync(t, None, False)) for t in texts]
    budgets = [max_tokens] * len(ids)
    together = lockstep(base.stepper(), [t.stepper() for t in tests], ids, budgets)
    alone = [lockstep(base.stepper(), [t.stepper() for t in tests], [i], [max_tokens]) for i in ids]
    return ids, together, alone


def _assert_bit_identical(together: LockstepResult, alone: list[LockstepResult]) -> None:
    assert together.batch_size == len(alone) > 1
    for j, one in enumerate(alone):
        assert one.batch_size == 1
        assert _same_generation(together.baseline[j], one.baseline[0])
        for k in range(len(together.tests)):
            assert _same_generation(together.tests[k][j], one.tests[k][0])
            a, b = together.stats[k][j], one.stats[k][0]
            assert np.array_equal(a.kl, b.kl)
            assert np.array_equal(a.same_top, b.same_top)
            assert np.array_equal(a.delta_p, b.delta_p)
            assert a.problems == b.problems == ()
            assert isinstance(a, ForcedStats) and isinstance(b, ForcedStats)
            assert a.forced == b.forced  # the argmax and margins, bit for bit
            assert len(a.forced) == len(together.baseline[j].token_ids or [])


def test_batched_equals_one_at_a_time_bf16_and_4bit(tiny_models: dict[str, Path]) -> None:
    base, q8, q4 = (_backend(tiny_models[n]) for n in ("bf16", "q8", "q4"))
    _, together, alone = _run(base, [q8, q4], MIXED, 24)
    _assert_bit_identical(together, alone)
    # and with the 4-bit model as the baseline
    _, together, alone = _run(q4, [base], MIXED, 24)
    _assert_bit_identical(together, alone)


def test_batched_equals_one_at_a_time_random_model(
    random_model: Path, tiny_models: dict[str, Path]
) -> None:
    """The random model rambles to max_tokens and the adder diverges from it at once: the
    test side is almost all tail (its own continuation, batched after the lockstep)."""
    base, other = _backend(random_model), _backend(tiny_models["q4"])
    _, together, alone = _run(base, [other], MIXED, 40)
    assert any(
        g.token_ids != b.token_ids
        for g, b in zip(together.tests[0], together.baseline, strict=True)
    )
    _assert_bit_identical(together, alone)


@pytest.mark.parametrize("cuts", [[3], [1, 5], [2, 4, 6]], ids=["halves", "1+4+2", "2+2+2+1"])
@pytest.mark.parametrize("parallel", [2, 3])
def test_groups_on_parallel_streams_equal_one_batch(
    random_model: Path, tiny_models: dict[str, Path], cuts: list[int], parallel: int
) -> None:
    """The random model as baseline (it rambles, so the adders diverge and continue as
    tails) against the 8- and 4-bit adder: the prompts cut into groups at ``cuts`` and run
    ``parallel`` groups at a time give the one batch's generations and statistics."""
    base, q8, q4 = _backend(random_model), _backend(tiny_models["q8"]), _backend(tiny_models["q4"])
    ids = [base.lockstep_ids(base.render_sync(t, None, False)) for t in MIXED]
    budgets = [24] * len(ids)
    tests = [q8.stepper(), q4.stepper()]
    together = lockstep(base.stepper(), tests, ids, budgets)
    edges = [0, *cuts, len(ids)]
    groups = [(ids[a:b], budgets[a:b]) for a, b in itertools.pairwise(edges)]
    results = lockstep_groups(base.stepper(), tests, groups, parallel)
    assert [r.batch_size for r in results] == [len(g) for g, _ in groups]
    flat = [(r, j) for r in results for j in range(r.batch_size)]
    assert len(flat) == len(ids)
    for i, (r, j) in enumerate(flat):
        assert _same_generation(r.baseline[j], together.baseline[i])
        for k in range(len(tests)):
            assert _same_generation(r.tests[k][j], together.tests[k][i])
            a, b = r.stats[k][j], together.stats[k][i]
            assert np.array_equal(a.kl, b.kl)
            assert np.array_equal(a.same_top, b.same_top)
            assert np.array_equal(a.delta_p, b.delta_p)
    assert any(
        g.token_ids != b.token_ids
        for g, b in zip(together.tests[1], together.baseline, strict=True)
    )


def test_generations_are_generate_syncs(random_model: Path, tiny_models: dict[str, Path]) -> None:
    for base_path, test_path in (
        (tiny_models["bf16"], tiny_models["q4"]),
        (random_model, tiny_models["q4"]),
    ):
        base, test = _backend(base_path), _backend(test_path)
        _, together, _ = _run(base, [test], MIXED, 30)
        params = GenerationParams(max_tokens=30)
        for j, text in enumerate(MIXED):
            prompt = base.render_sync(text, None, False)
            assert _same_generation(together.baseline[j], base.generate_sync(prompt, params))
            assert _same_generation(together.tests[0][j], test.generate_sync(prompt, params))


def test_statistics_equal_separate_scoring_on_the_quickstart(
    tiny_models: dict[str, Path],
) -> None:
    base, q8, q4 = (_backend(tiny_models[n]) for n in ("bf16", "q8", "q4"))
    texts = _quickstart_texts()
    assert len(texts) == 60
    ids = [base.lockstep_ids(base.render_sync(t, None, False)) for t in texts]
    result = lockstep(base.stepper(), [q8.stepper(), q4.stepper()], ids, [8] * len(ids))
    kl_diff = dp_diff = margin_diff = 0.0
    disagreeing = 0
    for k, test in enumerate((q8, q4)):
        for j, prompt_ids in enumerate(ids):
            continuation = result.baseline[j].token_ids or []
            base_rows = base.score_sync(prompt_ids, continuation)
            test_rows = test.score_sync(prompt_ids, continuation)
            separate = position_stats(base_rows, test_rows, continuation)
            mine = result.stats[k][j]
            assert np.array_equal(mine.same_top, separate.same_top)
            kl_diff = max(kl_diff, float(np.max(np.abs(mine.kl - separate.kl))))
            dp_diff = max(dp_diff, float(np.max(np.abs(mine.delta_p - separate.delta_p))))
            assert isinstance(mine, ForcedStats)
            scored = forced_full(base_rows, test_rows, continuation)
            assert mine.forced.test_top == scored.test_top
            disagreeing += len(scored.disagreements())
            pairs = [
                (mine.forced.base_margin, scored.base_margin),
                (mine.forced.test_margin, scored.test_margin),
            ]
            for a, b in pairs:
                margin_diff = max(margin_diff, float(np.max(np.abs(np.subtract(a, b)))))
    assert kl_diff <= KL_TOL and dp_diff <= DELTA_P_TOL, (kl_diff, dp_diff)
    assert margin_diff <= MARGIN_TOL, margin_diff
    assert disagreeing > 0  # q8 and q4 disagree with bf16 somewhere: margins were compared


def test_eos_and_max_tokens_per_sequence(tiny_models: dict[str, Path]) -> None:
    """The adder answers and stops on EOS within a few tokens; a budget of 1 or 2 tokens
    stops first (``length``); each sequence keeps its own budget inside one batch."""
    base = _backend(tiny_models["bf16"])
    stepper = base.stepper()
    ids = [base.lockstep_ids(base.render_sync(t, None, False)) for t in ("12+34=", "7+8=", "1+2=")]
    out = greedy(stepper, ids, [1, 2, 10])
    assert [len(g.token_ids or []) for g in out[:2]] == [1, 2]
    assert [g.finish_reason for g in out[:2]] == ["length", "length"]
    last = out[2]
    assert last.finish_reason == "stop" and (last.token_ids or [])[-1] in stepper.eos_ids
    assert re.fullmatch(r"\d+", last.text)
    assert len(last.chosen_logprobs or []) == len(last.token_ids or [])


def test_empty_prompt_or_budget_is_refused(tiny_models: dict[str, Path]) -> None:
    stepper = _backend(tiny_models["bf16"]).stepper()
    with pytest.raises(ValueError, match="non-empty prompts"):
        greedy(stepper, [[1, 2], []], [4, 4])
    with pytest.raises(ValueError, match="max_tokens >= 1"):
        greedy(stepper, [[1, 2]], [0])
