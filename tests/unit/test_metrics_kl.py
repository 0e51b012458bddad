"""Unit tests for pytest_infercheck.metrics.kl against hand-computed values."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from pytest_infercheck.metrics.kl import (
    DEFAULT_MASS_TOL,
    PositionStats,
    Tail,
    position_stats,
    tail_term_bound,
    topk_kl_lower_bound,
    topk_kl_lower_bound_positions,
)
from pytest_infercheck.metrics.topk_full import topk_vs_full_stats

LN2 = math.log(2.0)
NEG_INF = -math.inf


def _logs(*rows: list[float]) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.array(rows, dtype=np.float64)).astype(np.float32)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


# ------------------------------------------------------------------ position_stats


def test_kl_same_top_delta_p_by_hand() -> None:
    base = _logs([0.5, 0.25, 0.25], [0.2, 0.3, 0.5])
    test = _logs([0.25, 0.5, 0.25], [0.2, 0.3, 0.5])
    stats = position_stats(base, test, [0, 2])

    # Row 0: KL = 0.5 ln(0.5/0.25) + 0.25 ln(0.25/0.5) + 0.25 ln(0.25/0.25)
    #           = 0.5 ln 2 - 0.25 ln 2 + 0 = 0.25 ln 2
    assert stats.kl[0] == pytest.approx(0.25 * LN2, rel=1e-6)
    # Row 1: identical rows give exactly 0 (log p - log q == 0 term by term).
    assert stats.kl[1] == 0.0
    # argmax base row 0 is token 0, test row 0 is token 1; row 1 both are token 2.
    assert stats.same_top.tolist() == [False, True]
    # delta_p = p_test(chosen) - p_base(chosen): row 0 token 0: 0.25 - 0.5; row 1 token 2: 0.
    assert stats.delta_p[0] == pytest.approx(0.25 - 0.5, abs=1e-7)
    assert stats.delta_p[1] == 0.0
    assert stats.kl.dtype == np.float64
    assert stats.delta_p.dtype == np.float64
    assert stats.same_top.dtype == np.bool_
    assert len(stats) == 2


def test_identical_inputs_give_exact_zero() -> None:
    rng = np.random.default_rng(0)
    logp = _log_softmax(rng.standard_normal((7, 13))).astype(np.float32)
    stats = position_stats(logp, logp.copy(), np.zeros(7, dtype=np.int64), chunk_size=3)
    assert np.all(stats.kl == 0.0)
    assert np.all(stats.same_top)
    assert np.all(stats.delta_p == 0.0)


@pytest.mark.parametrize(
    ("base_p", "test_p", "expected"),
    [
        # p_base = 0 contributes 0: KL = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.25) = ln 2
        ([0.0, 0.5, 0.5], [0.5, 0.25, 0.25], LN2),
        # p_base = 0 and p_test = 0 on the same token: still 0, not nan; rest identical.
        ([0.0, 0.5, 0.5], [0.0, 0.5, 0.5], 0.0),
        # p_base > 0 where p_test = 0: +inf.
        ([0.5, 0.5, 0.0], [0.0, 1.0, 0.0], math.inf),
        # p_test = 0 only where p_base = 0: finite, 1.0 * ln(1.0 / 0.5) = ln 2.
        ([0.0, 1.0, 0.0], [0.5, 0.5, 0.0], LN2),
    ],
)
def test_kl_infinite_logprobs(base_p: list[float], test_p: list[float], expected: float) -> None:
    stats = position_stats(_logs(base_p), _logs(test_p), [1])
    if math.isinf(expected):
        assert stats.kl[0] == math.inf
    else:
        assert stats.kl[0] == pytest.approx(expected, rel=1e-6, abs=1e-12)
    assert not np.isnan(stats.kl).any()


def test_delta_p_with_zero_probability() -> None:
    # chosen token 0: p_test = 0.5, p_base = exp(-inf) = 0 -> delta = 0.5
    stats = position_stats(_logs([0.0, 0.5, 0.5]), _logs([0.5, 0.25, 0.25]), [0])
    assert stats.delta_p[0] == pytest.approx(0.5)


def _reference_kl(base: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Unchunked float64 reference computed directly from the definition."""
    b = base.astype(np.float64)
    t = test.astype(np.float64)
    p = np.exp(b)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0.0, p * (b - t), 0.0)
    return terms.sum(axis=1)


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 16, 37, 38, 1000])
def test_chunking_matches_unchunked_reference(chunk_size: int) -> None:
    rng = np.random.default_rng(1234)
    n_pos, vocab = 37, 11
    base = _log_softmax(rng.standard_normal((n_pos, vocab)) * 2).astype(np.float32)
    test = _log_softmax(rng.standard_normal((n_pos, vocab)) * 2).astype(np.float32)
    base[3, 4] = NEG_INF  # zero-probability tokens in some rows
    test[5, 2] = NEG_INF
    test[5, 7] = NEG_INF
    base[5, 7] = NEG_INF
    chosen = rng.integers(0, vocab, size=n_pos)

    stats = position_stats(base, test, chosen, chunk_size=chunk_size)

    np.testing.assert_allclose(stats.kl, _reference_kl(base, test), rtol=1e-13, atol=0.0)
    assert stats.kl[5] == math.inf  # base[5, 2] > 0 while test[5, 2] = 0
    rows = np.arange(n_pos)
    np.testing.assert_array_equal(stats.same_top, base.argmax(axis=1) == test.argmax(axis=1))
    expected_dp = np.exp(test[rows, chosen].astype(np.float64)) - np.exp(
        base[rows, chosen].astype(np.float64)
    )
    np.testing.assert_array_equal(stats.delta_p, expected_dp)
    # And every chunk size gives bit-identical results.
    one = position_stats(base, test, chosen, chunk_size=1)
    np.testing.assert_array_equal(stats.kl, one.kl)


def test_extra_memory_is_bounded_by_chunk() -> None:
    n_pos, vocab, chunk = 256, 4096, 8
    rng = np.random.default_rng(5)
    base = rng.standard_normal((n_pos, vocab), dtype=np.float32)
    test = rng.standard_normal((n_pos, vocab), dtype=np.float32)
    chosen = np.zeros(n_pos, dtype=np.int64)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        position_stats(base, test, chosen, chunk_size=chunk)
        peak_extra = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    chunk_f64 = chunk * vocab * 8
    # A few float64 copies of one chunk plus the (T,) outputs; a float64 copy of a whole
    # input would be n_pos * vocab * 8 = 8 MiB.
    assert peak_extra < 4 * chunk_f64 + 64 * n_pos + 65536
    assert peak_extra < n_pos * vocab * 8 // 4


def test_empty_positions() -> None:
    stats = position_stats(np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32), [])
    assert isinstance(stats, PositionStats)
    assert stats.kl.shape == (0,) and stats.kl.dtype == np.float64
    assert stats.same_top.shape == (0,) and stats.same_top.dtype == np.bool_
    assert stats.delta_p.shape == (0,) and stats.delta_p.dtype == np.float64


@pytest.mark.parametrize(
    ("base_shape", "test_shape", "chosen", "chunk_size", "match"),
    [
        ((2, 3), (2, 4), [0, 0], 128, "same"),
        ((2, 3), (3, 3), [0, 0], 128, "same"),
        ((3,), (3,), [0], 128, "2-D"),
        ((2, 3), (2, 3), [0], 128, "length 2"),
        ((2, 3), (2, 3), [0, 3], 128, "outside the vocabulary"),
        ((2, 3), (2, 3), [-1, 0], 128, "outside the vocabulary"),
        ((2, 3), (2, 3), [0.5, 1.0], 128, "integers"),
        ((2, 3), (2, 3), [0, 0], 0, "chunk_size"),
    ],
)
def test_position_stats_validation(
    base_shape: tuple[int, ...],
    test_shape: tuple[int, ...],
    chosen: list[float],
    chunk_size: int,
    match: str,
) -> None:
    with pytest.raises(ValueError, match=match):
        position_stats(
            np.zeros(base_shape, np.float32),
            np.zeros(test_shape, np.float32),
            chosen,  # type: ignore[arg-type]
            chunk_size=chunk_size,
        )


# ------------------------------------------------------------------ top-k lower bound
# The bound's tails (kl.Tail): a side known by its top-k with mass M_S on the shared ids and
# M on all it reported has a tail in [max(1 - D, M) - M_S, max(1, M) + D - M_S] (D = mass_tol,
# read from the values: float64 and float32 values take 1e-3, lists of 0.0 only 0.3); the tail
# term is min x ln(x / y) over them: y at its top end, x = y / e clipped to the base tail's
# range.
D = DEFAULT_MASS_TOL


def test_the_default_mass_tolerance() -> None:
    assert D == 1e-3


def test_topk_lower_bound_by_hand_with_tail() -> None:
    base = {1: math.log(0.5), 2: math.log(0.3)}
    test = {1: math.log(0.4), 3: math.log(0.3)}
    # S = {1}. Buckets: token 1 (0.5 vs 0.4) and the tail: base in [1 - D - 0.5, 1 + D - 0.5]
    # = [0.499, 0.501], test at most 1 + D - 0.4 = 0.601. y / e = 0.221 is below the base
    # range, so x = 0.499: 0.5 ln(0.5/0.4) + 0.499 ln(0.499 / 0.601) = 0.018763.
    expected = 0.5 * math.log(0.5 / 0.4) + (0.5 - D) * math.log((0.5 - D) / (0.6 + D))
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.018763, abs=1e-6)
    # mass_tol = 0 (rows normalised exactly): the tails are 0.5 and 0.6.
    exact = 0.5 * math.log(0.5 / 0.4) + 0.5 * math.log(0.5 / 0.6)
    assert topk_kl_lower_bound(base, test, mass_tol=0.0) == pytest.approx(exact, rel=1e-12)
    assert exact == pytest.approx(0.0204110, abs=1e-7)


def test_topk_lower_bound_two_shared_tokens() -> None:
    base = {0: math.log(0.6), 1: math.log(0.3), 7: math.log(0.05)}
    test = {1: math.log(0.5), 0: math.log(0.2), 9: math.log(0.1)}
    # S = {0, 1}; base tail in [0.099, 0.101], test tail at most 1 + D - 0.7 = 0.301;
    # y / e = 0.1107 is above the base range: x = 0.101.
    expected = (
        0.6 * math.log(0.6 / 0.2)
        + 0.3 * math.log(0.3 / 0.5)
        + (0.1 + D) * math.log((0.1 + D) / (0.3 + D))
    )
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("base", "test", "expected"),
    [
        # Identical: tails in [0.099, 0.101] on both sides, 0.099 ln(0.099 / 0.101) < 0
        # -> clamped to 0.
        ({1: math.log(0.7), 2: math.log(0.2)}, {1: math.log(0.7), 2: math.log(0.2)}, 0.0),
        # Disjoint lists: only the tail bucket, [0.999, 1.001] vs 1.001 -> < 0 -> 0.
        ({1: math.log(0.7)}, {2: math.log(0.7)}, 0.0),
        ({}, {}, 0.0),
        # Shared token with p_test = 0 while p_base > 0 -> inf.
        ({1: math.log(0.5)}, {1: NEG_INF}, math.inf),
        # Shared token with p_base = 0 contributes 0. The base list tells no precision (only
        # -inf): its tail in [1 - 0.3, 1 + 0.3]; the test's at most 0.501; 0.501 / e is below:
        # 0.7 ln(0.7 / 0.501) = 0.234132 (ln 2 with exact rows).
        ({1: NEG_INF}, {1: math.log(0.5)}, 0.7 * math.log(0.7 / (0.5 + D))),
        # Test puts all mass on S (logprob 0.0) while base has a real tail (0.5). A list of
        # 0.0 only does not tell its precision: its row may hold up to 0.3 outside S (a
        # bfloat16 row's rounding), so 0.5 ln 0.5 + 0.499 ln(0.499 / 0.3) = -0.0927 -> 0. It
        # was inf, then 6.2146 with the test tail floored at 1e-6. Told it is float32
        # (mass_tol 1e-3 on that side): see test_a_float32_test_row_at_logprob_zero.
        ({1: math.log(0.5)}, {1: 0.0}, 0.0),
    ],
)
def test_topk_lower_bound_cases(
    base: dict[int, float], test: dict[int, float], expected: float
) -> None:
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_a_float32_test_row_at_logprob_zero() -> None:
    # As the last case, the test side's mass tolerance given as 1e-3: its tail at most 1e-3:
    # 0.5 ln 0.5 + 0.499 ln(0.499 / 1e-3) = -0.346574 + 3.100090 = 2.753517
    value = topk_kl_lower_bound({1: math.log(0.5)}, {1: 0.0}, mass_tol=(None, 1e-3))
    assert value == pytest.approx(-0.5 * LN2 + 0.499 * math.log(499.0), rel=1e-12)
    assert value == pytest.approx(2.753517, abs=1e-6)


def test_topk_lower_bound_full_coverage_rounding_is_not_inf() -> None:
    # Both lists cover the whole vocabulary; float32 rounding can make the base tail a tiny
    # positive number while the test tail is 0. That must not become inf: the tails are in
    # [0, ~D] and at most ~D, the tail term at least -D / e (x = y / e).
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.3, 0.5])
    base = {i: float(np.float32(math.log(x))) for i, x in enumerate(p)}
    test = {i: float(np.float32(math.log(x))) for i, x in enumerate(q)}
    full = 0.5 * math.log(0.5 / 0.2) + 0.2 * math.log(0.2 / 0.5)  # 0.3 ln 1 = 0
    bound = topk_kl_lower_bound(base, test)
    assert full - D / math.e - 1e-7 <= bound <= full + 1e-7


@pytest.mark.parametrize("seed", range(5))
def test_topk_lower_bound_is_below_full_kl(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vocab, k, n_pos = 50, 8, 6
    base = _log_softmax(rng.standard_normal((n_pos, vocab)) * 1.5)
    test = _log_softmax(base + rng.standard_normal((n_pos, vocab)) * 0.7)
    full = position_stats(base, test, np.zeros(n_pos, dtype=np.int64)).kl

    def top(row: np.ndarray) -> dict[int, float]:
        return {int(i): float(row[i]) for i in np.argsort(row)[::-1][:k]}

    base_top = [top(r) for r in base]
    test_top = [top(r) for r in test]
    bounds = topk_kl_lower_bound_positions(base_top, test_top)
    assert bounds.shape == (n_pos,) and bounds.dtype == np.float64
    assert np.all(bounds >= 0.0)
    assert np.all(bounds <= full + 1e-12)
    # With k = vocab the bound is the full KL, less at most the slack D / e of two tails
    # that may each hold up to D; with mass_tol = 1e-12 (float64 rows are normalised to
    # 1e-16) the full KL to 1e-12 (mass_tol = 0 would trust a row summing to 1 - 1e-16 to
    # hold nothing outside: an infinite tail term against a base tail of 1e-16).
    base_all = [{i: float(x) for i, x in enumerate(r)} for r in base]
    test_all = [{i: float(x) for i, x in enumerate(r)} for r in test]
    every = topk_kl_lower_bound_positions(base_all, test_all)
    assert np.all(every <= full + 1e-12) and np.all(every >= full - D / math.e - 1e-12)
    np.testing.assert_allclose(
        topk_kl_lower_bound_positions(base_all, test_all, mass_tol=1e-12),
        full,
        rtol=1e-9,
        atol=1e-12,
    )


def test_topk_positions_validation_and_empty() -> None:
    with pytest.raises(ValueError, match="positions"):
        topk_kl_lower_bound_positions([{}], [])
    out = topk_kl_lower_bound_positions([], [])
    assert out.shape == (0,) and out.dtype == np.float64


# ------------------------------------------------------------------ top-k: fail closed


def _old_topk_kl_lower_bound(base_top: dict[int, float], test_top: dict[int, float]) -> float:
    """The bound before the fix (branch ``arch``), verbatim, to show the defects."""

    def kl_term(p: float, log_p: float, log_q: float) -> float:
        if p <= 0.0:
            return 0.0
        if log_q == -math.inf:
            return math.inf
        return p * (log_p - log_q)

    def log(p: float) -> float:
        return math.log(p) if p > 0.0 else -math.inf

    tail_tol = 1e-6
    shared = [tok for tok in base_top if tok in test_top]
    log_b = [float(base_top[tok]) for tok in shared]
    log_t = [float(test_top[tok]) for tok in shared]
    p_b = [math.exp(x) for x in log_b]
    p_t = [math.exp(x) for x in log_t]
    terms = [kl_term(p, lp, lq) for p, lp, lq in zip(p_b, log_b, log_t, strict=True)]
    tail_b = max(0.0, 1.0 - math.fsum(p_b))
    tail_t = max(0.0, 1.0 - math.fsum(p_t))
    if tail_b < tail_tol:
        tail_b = 0.0
    terms.append(kl_term(tail_b, log(tail_b), log(tail_t)))
    if math.inf in terms:
        return math.inf
    return max(0.0, math.fsum(terms))


def _ls64(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - (m + math.log(float(np.exp(x - m).sum())))


def _ls32(x: np.ndarray) -> np.ndarray:
    """float32 log-softmax as mlx computes it: logits - logsumexp(logits), all float32."""
    x = x.astype(np.float32)
    m = x.max()
    return (x - (m + np.log(np.exp(x - m).sum(dtype=np.float32)))).astype(np.float32)


def _repro_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Full rows, V = 1000: both sides put the top token at logit 20 over the same bulk; the
    baseline's second token is at 12, the test side's at 4 and its bulk 8 lower.

    Test tail (everything but token 0) ~ e^(4 - 20) = 1.1e-7: float32 LSE = 20 + 1.1e-7
    rounds to 20.0 (ulp(20) = 1.9e-6), so the test logprob of token 0 is exactly 0.0 in
    float32. Baseline tail ~ e^(12 - 20) = 3.4e-4."""
    rng = np.random.default_rng(7)
    bulk = rng.standard_normal(1000)
    base_logits = bulk.copy()
    base_logits[[0, 1]] = [20.0, 12.0]
    test_logits = bulk - 8.0
    test_logits[[0, 1]] = [20.0, 4.0]
    return _ls64(base_logits), _ls64(test_logits), _ls32(base_logits), _ls32(test_logits)


def test_float32_zero_logprob_repro_is_finite_and_below_true_kl() -> None:
    b64, t64, b32, t32 = _repro_rows()
    assert t32[0] == 0.0  # the near-certain token, rounded to probability exactly 1
    assert -math.expm1(float(t64[0])) == pytest.approx(1.1e-7, rel=0.05)  # true test tail
    assert -math.expm1(float(b64[0])) == pytest.approx(3.4e-4, rel=0.01)  # base tail
    # True full-vocabulary KL in float64 from the exact rows:
    # ~ 3.35e-4 * ln(3.35e-4 / 1.1e-7) - 3.4e-4 ~ 2.37e-3.
    true_kl = float(np.sum(np.exp(b64) * (b64 - t64)))
    assert true_kl == pytest.approx(2.368e-3, rel=1e-3)
    # ... and from the float32 rows the top-k are read from (7e-7 above: their rounding).
    full32 = float(position_stats(b32[None, :], t32[None, :], [0]).kl[0])
    assert full32 == pytest.approx(2.369011e-3, rel=1e-6)

    # k = 1: S = {0}; base tail 1 - e^-3.376e-4 = 3.375e-4, test tail 1 - e^0 = 0.
    base_top = {0: float(b32[0])}
    test_top = {0: float(t32[0])}
    assert _old_topk_kl_lower_bound(base_top, test_top) == math.inf  # the defect
    # Told both rows are float32 to 1e-5 (they are: 1 + 7.8e-7 and 1 + 1.1e-7): the base
    # tail is in [3.375e-4 - 1e-5, 3.375e-4 + 1e-5], the test tail at most 1e-5; y / e is
    # below the base range, x = 3.275e-4:
    # p0 ln(p0 / 1) + x ln(x / 1e-5) = (1 - 3.375e-4)(-3.376e-4) + 3.275e-4 ln(32.75)
    #                                = -3.375e-4 + 1.1426e-3 = 8.053e-4
    bound = topk_kl_lower_bound(base_top, test_top, mass_tol=1e-5)
    p0 = math.exp(float(b32[0]))
    x = 1.0 - p0 - 1e-5
    expected = p0 * float(b32[0]) + x * math.log(x / 1e-5)
    assert bound == pytest.approx(expected, rel=1e-12)
    assert bound == pytest.approx(8.053e-4, rel=1e-3)
    assert 0.0 < bound <= true_kl
    # At the default the values must tell: a lone 0.0 does not (the test side may be a
    # bfloat16 row 30% off), nor does 1e-3 leave room (x = 0 is in the base range): 0.
    assert topk_kl_lower_bound(base_top, test_top) == 0.0
    assert topk_kl_lower_bound(base_top, test_top, mass_tol=D) == 0.0

    # Several k: the base's top-k ids, the test side read at those ids: finite, below the KL.
    order = np.argsort(b32)[::-1]
    for k in (1, 2, 3, 5, 50, 1000):
        ids = [int(i) for i in order[:k]]
        b_top = {i: float(b32[i]) for i in ids}
        t_top = {i: float(t32[i]) for i in ids}
        value = topk_kl_lower_bound(b_top, t_top)
        assert math.isfinite(value) and 0.0 <= value <= true_kl, k
    # k = V at 1e-5: both tails in [0, 1e-5]: the full float32 KL less at most 1e-5 / e,
    # below the float64 KL too.
    all_ids = {i: float(b32[i]) for i in range(1000)}
    every_t = {i: float(t32[i]) for i in range(1000)}
    value = topk_kl_lower_bound(all_ids, every_t, mass_tol=1e-5)
    assert full32 - 1e-5 / math.e - 1e-15 <= value <= true_kl
    # The golden-replay path knows the test row, so its tail exactly (1.135e-7); k = 1 at
    # 1e-5: p0 ln p0 + x ln(x / 1.135e-7), x = 3.275e-4: 2.2721e-3; k = V the float32 KL.
    replay = topk_vs_full_stats([base_top], [float(b32[0])], t32[None, :], [0], mass_tol=1e-5)
    test_tail = float(np.exp(t32[1:].astype(np.float64)).sum())
    assert test_tail == pytest.approx(1.135e-7, rel=1e-3)
    assert replay.kl[0] == pytest.approx(p0 * float(b32[0]) + x * math.log(x / test_tail), rel=1e-9)
    assert replay.kl[0] == pytest.approx(2.2721e-3, rel=1e-4)
    assert replay.problems == ()
    every = topk_vs_full_stats([all_ids], [float(b32[0])], t32[None, :], [0])
    assert every.kl[0] == pytest.approx(full32, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5, 20, 50])
@pytest.mark.parametrize("seed", range(4))
def test_topk_lower_bound_below_true_kl_at_several_k(seed: int, k: int) -> None:
    rng = np.random.default_rng(100 + seed)
    vocab, n_pos = 50, 8
    base = _log_softmax(rng.standard_normal((n_pos, vocab)) * 2.0)
    test = _log_softmax(base + rng.standard_normal((n_pos, vocab)) * 0.8)
    true_kl = (np.exp(base) * (base - test)).sum(axis=1)  # float64, full rows
    for t in range(n_pos):
        ids = [int(i) for i in np.argsort(base[t])[::-1][:k]]
        # Golden shape: the test side read at the base's ids...
        value = topk_kl_lower_bound(
            {i: float(base[t, i]) for i in ids}, {i: float(test[t, i]) for i in ids}
        )
        assert 0.0 <= value <= true_kl[t] + 1e-12
        # ...and free-running shape: each side's own top-k.
        own = [int(i) for i in np.argsort(test[t])[::-1][:k]]
        value = topk_kl_lower_bound(
            {i: float(base[t, i]) for i in ids}, {i: float(test[t, i]) for i in own}
        )
        assert 0.0 <= value <= true_kl[t] + 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_topk_bound_on_peaked_float32_rows_is_finite_and_below_their_kl(seed: int) -> None:
    # Near-certain tokens (logit gaps 15..30) so that float32 tails round to 0 or below on
    # either side: the bound stays finite and below the KL of the float32 rows it reads.
    rng = np.random.default_rng(200 + seed)
    vocab, n_pos = 300, 10
    rounded = 0
    for _ in range(n_pos):
        logits_b = rng.standard_normal(vocab)
        logits_t = logits_b + rng.standard_normal(vocab) * 0.5
        logits_b[3] += rng.uniform(15, 30)
        logits_t[3] += rng.uniform(15, 30)
        b32, t32 = _ls32(logits_b), _ls32(logits_t)
        full32 = float(position_stats(b32[None, :], t32[None, :], [0]).kl[0])
        for k in (1, 3, 10):
            ids = [int(i) for i in np.argsort(b32)[::-1][:k]]
            b_top = {i: float(b32[i]) for i in ids}
            t_top = {i: float(t32[i]) for i in ids}
            tails = [1.0 - math.fsum(math.exp(v) for v in m.values()) for m in (b_top, t_top)]
            rounded += min(tails) <= 0.0
            value = topk_kl_lower_bound(b_top, t_top)
            assert math.isfinite(value)
            assert value <= max(full32, 0.0) + 1e-15
    assert rounded > 0  # a tail rounded to 0 or below was exercised


@pytest.mark.parametrize(
    ("base", "test"),
    [
        ({1: math.log(0.5), 2: math.nan}, {1: math.log(0.5)}),  # NaN not shared, not first
        ({1: math.log(0.5)}, {1: math.nan}),
        ({1: math.log(0.5)}, {1: math.log(0.5), 2: math.inf}),
        ({1: math.nan}, {1: NEG_INF}),  # would be inf without the NaN
    ],
)
def test_topk_lower_bound_nan_or_plus_inf_input_is_nan(
    base: dict[int, float], test: dict[int, float]
) -> None:
    assert math.isnan(topk_kl_lower_bound(base, test))


def test_topk_nan_used_to_read_zero() -> None:
    # Old: the base covers everything (tail 0, dropped), the NaN term makes the sum NaN and
    # max(0.0, nan) keeps 0.0: the bound read 0.0, a pass.
    base = {1: math.log(0.5), 2: math.log(0.5)}
    test = {1: math.log(0.5), 2: math.nan}
    assert _old_topk_kl_lower_bound(base, test) == 0.0
    assert math.isnan(topk_kl_lower_bound(base, test))
    out = topk_kl_lower_bound_positions([{1: 0.0}, base], [{1: 0.0}, test])
    assert out[0] == 0.0 and math.isnan(out[1])


def test_topk_both_tails_near_zero_cost_at_most_mass_tol_over_e() -> None:
    # Full coverage on both sides: base tail in [0, D], test tail at most D; the smallest
    # x ln(x / D) is at x = D / e: -D / e. KL = 0.6 ln(0.6/0.2) + 0.4 ln(0.4/0.8) - D / e.
    base = {1: math.log(0.6), 2: math.log(0.4)}
    test = {1: math.log(0.2), 2: math.log(0.8)}
    exact = 0.6 * math.log(3.0) + 0.4 * math.log(0.5)
    assert topk_kl_lower_bound(base, test) == pytest.approx(exact - D / math.e, rel=1e-12)
    # mass_tol = 0: both tails exactly 0 (0 ln 0 = 0): the exact KL.
    assert topk_kl_lower_bound(base, test, mass_tol=0.0) == pytest.approx(exact, rel=1e-12)
    # A base tail of 0.5 against a test tail of 0, mass_tol 1e-3: the test tail may be 1e-3,
    # the base's as low as 0.499: 0.5 ln(0.5/1) + 0.499 ln(0.499 / 1e-3)
    value = topk_kl_lower_bound({1: math.log(0.5)}, {1: 0.0}, mass_tol=1e-3)
    assert value == pytest.approx(-0.5 * LN2 + 0.499 * math.log(499.0), rel=1e-12)
    # ... and mass_tol = 0: a test row known to hold nothing outside S: infinite.
    assert topk_kl_lower_bound({1: math.log(0.5)}, {1: 0.0}, mass_tol=0.0) == math.inf
    with pytest.raises(ValueError, match="mass_tol"):
        topk_kl_lower_bound(base, test, mass_tol=-1e-9)
    with pytest.raises(ValueError, match="mass_tol"):
        topk_kl_lower_bound(base, test, mass_tol=math.nan)


def test_a_top_k_reporting_more_than_one_counts_its_excess_as_mass() -> None:
    # The test top-k reports 0.7 + 0.4 = 1.1 (a row whose rounding shows): its row holds at
    # least 1.1, so its tail outside S = {1} is in [1.1 - 0.7, 1.1 + D - 0.7] = [0.4, 0.401]
    # (not 1 - 0.7 = 0.3). Base {1: 0.2}: tail in [0.799, 0.801]; y / e is below: x = 0.799.
    # KL = 0.2 ln(0.2 / 0.7) + 0.799 ln(0.799 / 0.401) = 0.30028; read with the tail 0.3 it
    # was 0.2 ln(2/7) + 0.8 ln(0.8/0.3) = 0.53411, above any row holding 1.1.
    value = topk_kl_lower_bound({1: math.log(0.2)}, {1: math.log(0.7), 2: math.log(0.4)})
    expected = 0.2 * math.log(0.2 / 0.7) + (0.8 - D) * math.log((0.8 - D) / (0.4 + D))
    assert value == pytest.approx(expected, rel=1e-12)
    assert value == pytest.approx(0.30028, abs=1e-5)
    # Swapped: the base reports 1.1, its tail in [0.4, 0.401]; the test's at most 0.801:
    # 0.7 ln(0.7 / 0.2) + 0.4 ln(0.4 / 0.801) = 0.59917.
    value = topk_kl_lower_bound({1: math.log(0.7), 2: math.log(0.4)}, {1: math.log(0.2)})
    expected = 0.7 * math.log(0.7 / 0.2) + 0.4 * math.log(0.4 / (0.8 + D))
    assert value == pytest.approx(expected, rel=1e-12)
    assert value == pytest.approx(0.59917, abs=1e-5)


def test_tail_term_bound_by_hand() -> None:
    # y at the top of the test range; x = y / e clipped to the base range.
    assert tail_term_bound(Tail(0.1, 0.3), Tail(0.0, 0.5)) == pytest.approx(-0.5 / math.e)
    assert tail_term_bound(Tail(0.3, 0.4), Tail(0.0, 0.5)) == pytest.approx(0.3 * math.log(0.6))
    assert tail_term_bound(Tail(0.0, 0.1), Tail(0.0, 0.5)) == pytest.approx(0.1 * math.log(0.2))
    assert tail_term_bound(Tail.exact(0.0), Tail.exact(0.0)) == 0.0
    assert tail_term_bound(Tail.exact(0.2), Tail.exact(0.0)) == math.inf
    assert tail_term_bound(Tail.exact(0.0), Tail.exact(0.3)) == 0.0
    assert Tail.of_top_k(0.5, 0.8, 0.01) == Tail(0.49, 0.51)
    assert Tail.of_top_k(0.9, 1.2, 0.01) == Tail(pytest.approx(0.3), pytest.approx(0.31))  # type: ignore[arg-type]
    assert Tail.of_top_k(1.0, 1.0, 0.01) == Tail(0.0, pytest.approx(0.01))  # type: ignore[arg-type]


def test_topk_vs_full_stats_names_problems() -> None:
    base_top = [{0: math.log(0.6), 1: math.log(0.3)}, {0: math.log(0.9), 1: math.log(0.3)}]
    test = _logs([0.5, 0.25, 0.25], [0.5, 0.25, 0.25])
    test[1, 2] = math.nan  # outside the base's top-k ids: only the row check sees it
    stats = topk_vs_full_stats(
        base_top, [math.log(0.6), math.nan], test, [0, 0], base_name="golden", test_name="q4"
    )
    # The NaN sits outside S, in the test tail summed from the row: the tail is not known,
    # nor the KL (it used to read the tail as 1 - 0.75 = 0.25 and report a number).
    assert math.isfinite(stats.kl[0]) and math.isnan(stats.kl[1])
    assert stats.violations() == [
        # position 1: 0.9 + 0.3 = 1.2 > 1: logsumexp ln 1.2 = +0.182 > 0.02
        "golden top-k logprobs do not normalise at position 1 (logsumexp +0.182; tolerance 0.02)",
        "non-finite golden chosen logprobs at position 1 (NaN)",
        "non-finite q4 logprobs at position 1 (NaN)",
        "non-finite KL at position 1 (NaN)",
    ]


def test_topk_vs_full_stats_infinite_and_nan_kl_are_named() -> None:
    # Position 0: the test row gives token 1 probability 0 while the base has 0.3 there:
    # 0.3 ln(0.3 / 0) = +inf (a real divergence, still named). Position 1: a NaN top-k
    # logprob makes KL_1 NaN (and the top-k list itself is named).
    base_top = [{0: math.log(0.6), 1: math.log(0.3)}, {0: math.log(0.6), 1: math.nan}]
    test = _logs([1.0, 0.0, 0.0], [0.5, 0.25, 0.25])
    stats = topk_vs_full_stats(base_top, [math.log(0.6)] * 2, test, [0, 0])
    assert stats.kl[0] == math.inf and math.isnan(stats.kl[1])
    assert stats.violations() == [
        "non-finite baseline top-k logprobs at position 1 (NaN)",
        "non-finite KL at positions 0, 1 (NaN, +inf)",
    ]
