"""The fail-closed rules on the lockstep path (:mod:`pytest_infercheck.backends.mlx_lockstep`):
a NaN or ``+inf`` in a row is a problem of that position, a row that does not normalise is
one, a non-finite ``KL_t`` is one; the per-step statistics are the hand-computed ones; the
batching probe fails on an engine whose batched outputs differ and passes on a faithful one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.backends.mlx_lockstep import (
    Stepper,
    _Accumulated,
    accumulate_step,
    lockstep,
    lockstep_groups,
    probe,
)
from pytest_infercheck.metrics.finite import logsumexp_tolerance

pytest.importorskip("mlx_lm")


def _log(p: list[float]) -> list[float]:
    return [math.log(x) if x > 0 else -math.inf for x in p]


def test_one_step_is_computed_by_hand() -> None:
    """KL_t = sum p_b (log p_b - log p_t); same top; delta-p of the chosen token; a row's
    logsumexp: here 0 (normalised), and log 2 for a row whose mass is 2."""
    base = np.array([_log([0.5, 0.25, 0.25]), _log([0.5, 0.5, 0.0])], dtype=np.float32)
    test = np.array([_log([0.25, 0.5, 0.25]), _log([1.0, 1.0, 0.0])], dtype=np.float32)
    acc = [_Accumulated(), _Accumulated()]
    accumulate_step(acc, base, test, [0, 1])
    kl0 = 0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(0.25 / 0.5)
    assert acc[0].kl == [pytest.approx(kl0, abs=1e-7)]
    assert acc[0].same_top == [False]
    assert acc[0].delta_p == [pytest.approx(0.25 - 0.5, abs=1e-7)]
    assert acc[1].kl == [pytest.approx(-math.log(2), abs=1e-7)]  # nothing renormalised
    assert acc[1].lse_test == [pytest.approx(math.log(2), abs=1e-7)]
    (problem,) = acc[1].stats(3).problems
    assert problem.fault == "test logprobs not normalised" and problem.positions == (0,)
    assert acc[0].stats(3).problems == ()


def test_problems_name_the_position_of_the_sequence() -> None:
    """Positions count along one sequence's continuation, across steps."""
    acc = _Accumulated()
    good = np.array([_log([0.5, 0.5])], dtype=np.float32)
    nan = np.array([[math.nan, 0.0]], dtype=np.float32)
    inf = np.array([[math.inf, 0.0]], dtype=np.float32)
    for base, test in ((good, good), (good, nan), (inf, good)):
        accumulate_step([acc], base, test, [0])
    problems = acc.stats(2).problems
    assert [p.describe() for p in problems] == [
        "non-finite baseline logprobs at position 2 (+inf)",
        "non-finite test logprobs at position 1 (NaN)",
        "non-finite KL at positions 1, 2 (NaN, +inf)",
    ]
    assert all(p.fault.startswith("non-finite ") for p in problems)
    assert math.isnan(acc.kl[1]) and acc.kl[0] == 0.0


def test_normalisation_tolerance_is_the_float32_rule() -> None:
    tol = logsumexp_tolerance(2)
    acc = _Accumulated()
    for shift in (tol / 2, tol * 2):
        row = np.array([_log([0.5, 0.5])], dtype=np.float32) + np.float32(shift)
        accumulate_step([acc], row, row, [0])
    (problem,) = acc.stats(2).problems[:1]
    assert problem.fault.endswith(" not normalised") and problem.positions == (1,)


def _faulty(stepper: Stepper, value: float, at_step: int, row: int) -> Stepper:
    """``stepper`` whose logits at one decode step (``at_step``) of one batch row are all
    ``value``."""
    import mlx.core as mx

    calls = {"n": 0}

    def forward(inputs: Any, cache: list[Any]) -> Any:
        logits = stepper.model(inputs, cache=cache)
        if inputs.shape[1] == 1:  # a decode step, not the prefill
            if calls["n"] == at_step:
                mask = mx.arange(inputs.shape[0])[:, None, None] == row
                logits = mx.where(mask, mx.array(value, dtype=logits.dtype), logits)
            calls["n"] += 1
        return logits

    return Stepper(stepper.model, stepper.eos_ids, stepper.decode, forward)


@pytest.mark.parametrize(
    ("value", "kind"),
    [(math.nan, "NaN"), (math.inf, "NaN")],  # an infinite logit: log-softmax inf - inf = NaN
)
def test_a_non_finite_test_row_is_a_problem_of_its_position(
    tiny_models: dict[str, Path], value: float, kind: str
) -> None:
    base = MlxLmBackend("b", MlxModelSpec(str(tiny_models["bf16"])), chat=False)
    test = MlxLmBackend("t", MlxModelSpec(str(tiny_models["q4"])), chat=False)
    ids = [base.lockstep_ids(base.render_sync(t, None, False)) for t in ("12+34=", "50+25=")]
    result = lockstep(base.stepper(), [_faulty(test.stepper(), value, 1, 1)], ids, [5, 5])
    clean, hit = result.stats[0]
    assert clean.problems == ()
    described = [p.describe() for p in hit.problems]
    assert f"non-finite test logprobs at position 1 ({kind})" in described[0]
    assert any(d.startswith("non-finite KL at position 1") for d in described)


def test_a_nan_in_one_of_two_parallel_batches_is_that_prompts_problem_only(
    tiny_models: dict[str, Path],
) -> None:
    """Two one-prompt batches on two mlx streams: the faulty forward's third decode call is
    the first batch's second step (the batches step in turn), so its position 1 is NaN and
    the other batch stays clean."""
    base = MlxLmBackend("b", MlxModelSpec(str(tiny_models["bf16"])), chat=False)
    test = MlxLmBackend("t", MlxModelSpec(str(tiny_models["q4"])), chat=False)
    ids = [base.lockstep_ids(base.render_sync(t, None, False)) for t in ("12+34=", "50+25=")]
    faulty = _faulty(test.stepper(), math.nan, 2, 0)
    hit, clean = lockstep_groups(base.stepper(), [faulty], [([i], [5]) for i in ids], 2)
    assert clean.stats[0][0].problems == ()
    described = [p.describe() for p in hit.stats[0][0].problems]
    assert "non-finite test logprobs at position 1 (NaN)" in described[0]
    assert any(d.startswith("non-finite KL at position 1") for d in described)


@pytest.mark.parametrize("parallel", [1, 2])
def test_probe_passes_faithful_and_fails_batch_perturbed(
    tiny_models: dict[str, Path], parallel: int
) -> None:
    """Also with the batch and the lone prompts stepped at once on two mlx streams."""
    backend = MlxLmBackend("b", MlxModelSpec(str(tiny_models["q4"])), chat=False)
    ids = [backend.lockstep_ids(backend.render_sync(t, None, False)) for t in ("1+2=", "45+55=")]
    faithful = backend.stepper()
    assert probe(faithful, ids, 8, parallel=parallel) == ""

    def forward(inputs: Any, cache: list[Any]) -> Any:
        logits = faithful.model(inputs, cache=cache)
        return logits + 1e-3 * (logits > 0) if inputs.shape[0] > 1 else logits

    perturbed = Stepper(faithful.model, faithful.eos_ids, faithful.decode, forward)
    found = probe(perturbed, ids, 8, parallel=parallel)
    assert found.startswith("probe prompt 0: batched") and "differ" in found
    assert probe(perturbed, ids, 8, tol=1.0, parallel=parallel) == ""  # within a loose tolerance
