"""Unit tests for pytest_infercheck.metrics.kl against hand-computed values."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from pytest_infercheck.metrics.kl import (
    PositionStats,
    position_stats,
    topk_kl_lower_bound,
    topk_kl_lower_bound_positions,
)

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


def test_topk_lower_bound_by_hand_with_tail() -> None:
    base = {1: math.log(0.5), 2: math.log(0.3)}
    test = {1: math.log(0.4), 3: math.log(0.3)}
    # S = {1}. Buckets: token 1 (0.5 vs 0.4) and tail (1 - 0.5 = 0.5 vs 1 - 0.4 = 0.6).
    expected = 0.5 * math.log(0.5 / 0.4) + 0.5 * math.log(0.5 / 0.6)
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.0204110, abs=1e-7)


def test_topk_lower_bound_two_shared_tokens() -> None:
    base = {0: math.log(0.6), 1: math.log(0.3), 7: math.log(0.05)}
    test = {1: math.log(0.5), 0: math.log(0.2), 9: math.log(0.1)}
    # S = {0, 1}; base tail = 1 - 0.9 = 0.1, test tail = 1 - 0.7 = 0.3.
    expected = 0.6 * math.log(0.6 / 0.2) + 0.3 * math.log(0.3 / 0.5) + 0.1 * math.log(0.1 / 0.3)
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("base", "test", "expected"),
    [
        ({1: math.log(0.7), 2: math.log(0.2)}, {1: math.log(0.7), 2: math.log(0.2)}, 0.0),
        # Disjoint lists: only the tail bucket, 1 vs 1 -> 0.
        ({1: math.log(0.7)}, {2: math.log(0.7)}, 0.0),
        ({}, {}, 0.0),
        # Shared token with p_test = 0 while p_base > 0 -> inf.
        ({1: math.log(0.5)}, {1: NEG_INF}, math.inf),
        # Shared token with p_base = 0 contributes 0; tails are 1 vs 0.5:
        # 1 * ln(1 / 0.5) = ln 2.
        ({1: NEG_INF}, {1: math.log(0.5)}, LN2),
        # Test puts all mass on S while base has a real tail (0.5) -> inf.
        ({1: math.log(0.5)}, {1: 0.0}, math.inf),
    ],
)
def test_topk_lower_bound_cases(
    base: dict[int, float], test: dict[int, float], expected: float
) -> None:
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, abs=1e-12)


def test_topk_lower_bound_full_coverage_rounding_is_not_inf() -> None:
    # Both lists cover the whole vocabulary; float32 rounding can make the base tail a tiny
    # positive number while the test tail is 0. That must not become inf.
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.3, 0.5])
    base = {i: float(np.float32(math.log(x))) for i, x in enumerate(p)}
    test = {i: float(np.float32(math.log(x))) for i, x in enumerate(q)}
    full = 0.5 * math.log(0.5 / 0.2) + 0.2 * math.log(0.2 / 0.5)  # 0.3 ln 1 = 0
    assert topk_kl_lower_bound(base, test) == pytest.approx(full, rel=1e-5)


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
    # With k = vocab the bound is the full KL.
    base_all = [{i: float(x) for i, x in enumerate(r)} for r in base]
    test_all = [{i: float(x) for i, x in enumerate(r)} for r in test]
    np.testing.assert_allclose(
        topk_kl_lower_bound_positions(base_all, test_all), full, rtol=1e-9, atol=1e-12
    )


def test_topk_positions_validation_and_empty() -> None:
    with pytest.raises(ValueError, match="positions"):
        topk_kl_lower_bound_positions([{}], [])
    out = topk_kl_lower_bound_positions([], [])
    assert out.shape == (0,) and out.dtype == np.float64
