"""The top-k KL "lower bound" is one: for random full distributions (float32 log-softmax of
random logits, vocab 5..300, flat and peaked, including rows whose float32 top-k mass rounds
above 1), each side truncated to its own top-k (k 1..20, the two sides' sets differing), the
bound never exceeds the KL of the full rows, computed in float64 from those same float32
rows (:func:`~pytest_infercheck.metrics.kl.position_stats`). The same for every path that
reads top-k: :func:`topk_kl_lower_bound` (each side's own top-k, and a golden's shape: the
test side read at the baseline's ids), :func:`topk_pair_stats`, :func:`topk_vs_full_stats`
and :func:`full_vs_topk_stats`.

The bound before the fix (one tail bucket ``1 - sum(top-k)`` per side, floored at 1e-6) broke
this: ``test_the_old_bound_exceeds_the_true_kl`` keeps a case, worked by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_infercheck.metrics.kl import (
    position_stats,
    topk_kl_lower_bound,
    topk_pair_stats,
)
from pytest_infercheck.metrics.topk_full import full_vs_topk_stats, topk_vs_full_stats

TINY = 1e-12
"""float64 summation: the bound and the full KL add the same terms in other orders."""


def log_softmax32(logits: np.ndarray) -> np.ndarray:
    """float32 log-softmax as an engine computes it: ``x - logsumexp(x)``, all in float32."""
    x = logits.astype(np.float32)
    m = x.max()
    return (x - (m + np.log(np.exp(x - m).sum(dtype=np.float32)))).astype(np.float32)


def top_k(row: np.ndarray, k: int) -> dict[int, float]:
    """The ``k`` most likely ids of a row with their logprobs (ties: the lower id)."""
    order = np.lexsort((np.arange(row.shape[0]), -row.astype(np.float64)))
    return {int(i): float(row[i]) for i in order[:k]}


@dataclass(frozen=True)
class Case:
    base: np.ndarray
    test: np.ndarray
    k_base: int
    k_test: int
    chosen: int

    @property
    def true_kl(self) -> float:
        """The full rows' KL (what the full method reports), never below 0 (a KL of two
        distributions; float32 rows can sum it to -1e-7)."""
        kl = float(position_stats(self.base[None, :], self.test[None, :], [self.chosen]).kl[0])
        return max(kl, 0.0)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    vocab = draw(st.integers(5, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.3, 1.0, 3.0, 10.0, 30.0]))
    noise = draw(st.sampled_from([0.0, 0.01, 0.1, 1.0, 3.0]))
    gap = draw(st.sampled_from([0.0, 0.0, 8.0, 15.0, 25.0, 40.0]))  # peaked: one token ahead
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(vocab) * scale
    test_logits = logits + rng.standard_normal(vocab) * noise
    logits[0] += gap
    test_logits[int(rng.integers(vocab)) if noise >= 1.0 else 0] += gap
    return Case(
        base=log_softmax32(logits),
        test=log_softmax32(test_logits),
        k_base=min(draw(st.integers(1, 20)), vocab),
        k_test=min(draw(st.integers(1, 20)), vocab),
        chosen=draw(st.integers(0, vocab - 1)),
    )


def _seeded(
    vocab: int, seed: int, scale: float, noise: float, gap: float, k: tuple[int, int]
) -> Case:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(vocab) * scale
    test_logits = logits + rng.standard_normal(vocab) * noise
    logits[0] += gap
    test_logits[0] += gap
    return Case(log_softmax32(logits), log_softmax32(test_logits), k[0], k[1], 0)


SETTINGS = settings(max_examples=150, derandomize=True, deadline=None, database=None)


@SETTINGS
@given(cases())
def test_the_top_k_bound_never_exceeds_the_full_kl(case: Case) -> None:
    true = case.true_kl
    base_top, test_top = top_k(case.base, case.k_base), top_k(case.test, case.k_test)
    # Each side's own top-k (a free-running comparison).
    assert topk_kl_lower_bound(base_top, test_top) <= true + TINY
    # A golden's shape: the test side read at the baseline's ids.
    read = {v: float(case.test[v]) for v in base_top}
    assert topk_kl_lower_bound(base_top, read) <= true + TINY


@SETTINGS
@given(cases())
def test_every_teacher_forced_top_k_path_stays_below_the_full_kl(case: Case) -> None:
    true = case.true_kl
    base_top, test_top = top_k(case.base, case.k_base), top_k(case.test, case.k_test)
    c = case.chosen
    base_c, test_c = float(case.base[c]), float(case.test[c])
    pair = topk_pair_stats([base_top], [base_c], [test_top], [test_c], [c])
    assert pair.kl[0] <= true + TINY
    mixed = full_vs_topk_stats(case.base[None, :], [test_top], [test_c], [c])
    assert mixed.kl[0] <= true + TINY
    golden = topk_vs_full_stats([base_top], [base_c], case.test[None, :], [c])
    assert golden.kl[0] <= true + TINY


def test_the_cases_include_top_k_mass_rounded_above_one() -> None:
    # Peaked float32 rows: the top token's logprob rounds to 0.0, so its top-k holds more
    # than 1 (float64 sum of exp of the float32 values), and the old tail 1 - mass < 0.
    case = _seeded(300, 3, 1.0, 0.1, 25.0, (3, 3))
    assert float(case.base[0]) == 0.0
    mass = math.fsum(math.exp(v) for v in top_k(case.base, 3).values())
    assert mass > 1.0
    assert topk_kl_lower_bound(top_k(case.base, 3), top_k(case.test, 3)) <= case.true_kl + TINY


def _old_bound(base_top: dict[int, float], test_top: dict[int, float]) -> float:
    """main's bound before this fix, verbatim in substance: tails ``1 - sum`` floored at
    ``tail_tol = 1e-6`` on both sides."""
    shared = [v for v in base_top if v in test_top]
    terms = [math.exp(base_top[v]) * (base_top[v] - test_top[v]) for v in shared]
    tail_b = max(1e-6, 1.0 - math.fsum(math.exp(base_top[v]) for v in shared))
    tail_t = max(1e-6, 1.0 - math.fsum(math.exp(test_top[v]) for v in shared))
    return max(0.0, math.fsum([*terms, tail_b * math.log(tail_b / tail_t)]))


def test_the_old_bound_exceeds_the_true_kl() -> None:
    # Two tokens. The base p = [0.9, 0.1]; the test row sums to 1 + 5e-6 (a row rounded in
    # low precision): q = [0.999995, 0.00001]. Top-1 on both sides: S = {0}.
    base = np.log(np.array([0.9, 0.1]))
    test = np.log(np.array([0.999995, 0.00001]))
    true = float(position_stats(base[None, :], test[None, :], [0]).kl[0])
    # KL = 0.9 ln(0.9 / 0.999995) + 0.1 ln(0.1 / 1e-5) = -0.0948200 + 0.9210340 = 0.8262141
    assert true == pytest.approx(0.9 * math.log(0.9 / 0.999995) + 0.1 * math.log(1e4))
    assert true == pytest.approx(0.8262141, abs=1e-7)
    base_top, test_top = {0: float(base[0])}, {0: float(test[0])}
    # Old: the test tail read as 1 - 0.999995 = 5e-6 (the row holds 1e-5 there):
    # -0.0948200 + 0.1 ln(0.1 / 5e-6) = -0.0948200 + 0.9903488 = 0.8955288 > 0.8262141.
    old = _old_bound(base_top, test_top)
    assert old == pytest.approx(0.8955288, abs=1e-7)
    assert old > true
    # New: the test tail is at most 5e-6 + D = 1.005e-3 (D = 1e-3: a float32 row's mass may
    # be 1e-3 off), the base's in [0.1 - D, 0.1 + D]; y / e is below that: x = 0.099:
    # -0.0948200 + 0.099 ln(0.099 / 1.005e-3) = -0.0948200 + 0.4544231 = 0.3596031
    new = topk_kl_lower_bound(base_top, test_top)
    assert new == pytest.approx(
        0.9 * math.log(0.9 / 0.999995) + 0.099 * math.log(0.099 / 1.005e-3), rel=1e-9
    )
    assert new == pytest.approx(0.3596031, abs=1e-7)
    assert new <= true


@example(_seeded(300, 3, 1.0, 0.1, 25.0, (3, 3)))
@SETTINGS
@given(cases())
def test_the_bound_is_finite_where_the_full_kl_is(case: Case) -> None:
    # The tail floor's other job, kept: a tail that rounds to 0 or below never makes inf.
    if not math.isfinite(case.true_kl):
        return
    base_top, test_top = top_k(case.base, case.k_base), top_k(case.test, case.k_test)
    shared_finite = all(
        math.isfinite(test_top[v]) or base_top[v] == -math.inf for v in base_top if v in test_top
    )
    if shared_finite:
        assert math.isfinite(topk_kl_lower_bound(base_top, test_top))


def bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 number (ties to even), as float32."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out: np.ndarray = rounded.astype(np.uint32).view(np.float32)
    return out


def log_softmax_bf16(logits: np.ndarray) -> np.ndarray:
    """A bfloat16 engine's log-softmax: logits, their logsumexp and the difference each
    rounded to bfloat16 (the logsumexp's rounding moves the whole row's mass by up to
    |lse| 2^-9: the rows sum to 1 +- several percent)."""
    x = bfloat16(logits.astype(np.float32))
    m = float(x.max())
    lse = bfloat16(np.array([m + math.log(float(np.exp(x.astype(np.float64) - m).sum()))]))
    return bfloat16(x - lse[0])


@st.composite
def bf16_cases(draw: st.DrawFn) -> Case:
    vocab = draw(st.integers(5, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([0.3, 1.0, 3.0, 10.0]))
    offset = draw(st.sampled_from([0.0, 5.0, 20.0]))  # raw logits far from 0: a coarse lse
    logits = rng.standard_normal(vocab) * scale + offset
    test_logits = logits + rng.standard_normal(vocab) * draw(st.sampled_from([0.0, 0.1, 1.0]))
    logits[0] += draw(st.sampled_from([0.0, 8.0, 20.0]))
    return Case(
        base=log_softmax_bf16(logits),
        test=log_softmax_bf16(test_logits),
        k_base=min(draw(st.integers(1, 20)), vocab),
        k_test=min(draw(st.integers(1, 20)), vocab),
        chosen=draw(st.integers(0, vocab - 1)),
    )


@SETTINGS
@given(bf16_cases())
def test_bfloat16_rows_are_read_as_such_and_stay_below_the_full_kl(case: Case) -> None:
    # Rows 1-3% off their mass (measured on the tiny adder's bf16 rows): the values are
    # bfloat16 numbers, so the bound allows each top-k side's mass 0.3 off.
    true = case.true_kl
    base_top, test_top = top_k(case.base, case.k_base), top_k(case.test, case.k_test)
    c = case.chosen
    base_c, test_c = float(case.base[c]), float(case.test[c])
    assert topk_pair_stats([base_top], [base_c], [test_top], [test_c], [c]).kl[0] <= true + TINY
    assert full_vs_topk_stats(case.base[None, :], [test_top], [test_c], [c]).kl[0] <= true + TINY
    assert topk_vs_full_stats([base_top], [base_c], case.test[None, :], [c]).kl[0] <= true + TINY
