"""Per-position divergence between a baseline and a test engine's next-token distributions.

All functions are pure: they take log-probabilities (natural log) and return numbers.

Full-vocabulary inputs are ``(T, V)`` arrays of log-probabilities scored teacher-forced on the
same prompt + continuation by both engines. They can be large (e.g. ``T=2048``,
``V=128000`` float32 is 1 GiB per array), so :func:`position_stats` works through the
positions in chunks and only ever holds ``O(chunk_size * V)`` float64 temporaries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "PositionStats",
    "position_stats",
    "topk_kl_lower_bound",
    "topk_kl_lower_bound_positions",
]


@dataclass(frozen=True)
class PositionStats:
    """Per-position comparison of two ``(T, V)`` log-probability arrays.

    Attributes:
        kl: ``(T,)`` float64, ``KL_t = sum_v p_base(v) * (log p_base(v) - log p_test(v))``.
        same_top: ``(T,)`` bool, ``argmax_v base[t] == argmax_v test[t]``.
        delta_p: ``(T,)`` float64, ``p_test(chosen_t) - p_base(chosen_t)``.
    """

    kl: NDArray[np.float64]
    same_top: NDArray[np.bool_]
    delta_p: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.kl.shape[0])


def position_stats(
    base_logprobs: ArrayLike,
    test_logprobs: ArrayLike,
    chosen_ids: Sequence[int] | NDArray[np.integer[Any]],
    chunk_size: int = 128,
) -> PositionStats:
    """Compare baseline and test full-vocabulary distributions position by position.

    Args:
        base_logprobs: ``(T, V)`` natural-log probabilities from the baseline engine.
        test_logprobs: ``(T, V)`` natural-log probabilities from the engine under test, scored
            on the same tokens.
        chosen_ids: ``(T,)`` token ids; ``chosen_ids[t]`` is the baseline's token at position t.
        chunk_size: number of positions converted to float64 at a time.

    Returns:
        :class:`PositionStats` with, for each position ``t``::

            KL_t      = sum_v p_base(v) * (log p_base(v) - log p_test(v))
            same_top  = argmax_v log p_base(v) == argmax_v log p_test(v)
            delta_p_t = p_test(chosen_t) - p_base(chosen_t)

        where ``p = exp(logprob)``. The sums are computed in float64 from the input values.
        Conventions: a token with ``p_base(v) = 0`` (log-prob ``-inf``) contributes 0 (``0 log 0
        = 0``); a token with ``p_base(v) > 0`` and ``p_test(v) = 0`` makes ``KL_t = +inf``.
        Nothing is renormalised or clamped: since float32 rows do not sum to exactly 1, a
        near-identical pair of rows can give a tiny negative ``KL_t`` (order 1e-7).

    Memory: only ``chunk_size`` rows are cast to float64 at once, so the extra memory is
    about ``2.2 * chunk_size * V * 8`` bytes whatever ``T`` is (~280 MB for ``V=128000`` at
    the default ``chunk_size=128``; lower ``chunk_size`` to trade speed for memory). The
    inputs themselves are not copied when they are already numpy arrays.

    Raises:
        ValueError: if the arrays are not 2-D with identical shapes, if ``len(chosen_ids)``
            is not ``T``, if a chosen id is outside ``[0, V)`` or if ``chunk_size < 1``.
    """
    base = np.asarray(base_logprobs)
    test = np.asarray(test_logprobs)
    if base.ndim != 2 or test.ndim != 2:
        raise ValueError(
            f"log-probabilities must be 2-D (T, V) arrays, got shapes {base.shape} "
            f"(base) and {test.shape} (test)"
        )
    if base.shape != test.shape:
        raise ValueError(
            f"base and test log-probabilities must have the same (T, V) shape, got "
            f"{base.shape} (base) and {test.shape} (test)"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    n_pos, vocab = base.shape
    chosen = np.asarray(chosen_ids)
    if chosen.ndim != 1 or chosen.shape[0] != n_pos:
        raise ValueError(
            f"chosen_ids must have one token id per position: expected length {n_pos}, "
            f"got shape {chosen.shape}"
        )
    if n_pos == 0:
        return PositionStats(
            kl=np.zeros(0, dtype=np.float64),
            same_top=np.zeros(0, dtype=np.bool_),
            delta_p=np.zeros(0, dtype=np.float64),
        )
    if not np.issubdtype(chosen.dtype, np.integer):
        raise ValueError(f"chosen_ids must be integers, got dtype {chosen.dtype}")
    bad = (chosen < 0) | (chosen >= vocab)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"chosen_ids[{first}] = {int(chosen[first])} is outside the vocabulary [0, {vocab})"
        )

    kl = np.empty(n_pos, dtype=np.float64)
    same_top = np.empty(n_pos, dtype=np.bool_)
    delta_p = np.empty(n_pos, dtype=np.float64)
    for start in range(0, n_pos, chunk_size):
        stop = min(start + chunk_size, n_pos)
        base_chunk = base[start:stop]
        test_chunk = test[start:stop]
        kl[start:stop] = _kl_rows(base_chunk, test_chunk)
        same_top[start:stop] = np.argmax(base_chunk, axis=1) == np.argmax(test_chunk, axis=1)
        rows = np.arange(stop - start)
        ids = chosen[start:stop]
        p_base = np.exp(base_chunk[rows, ids].astype(np.float64))
        p_test = np.exp(test_chunk[rows, ids].astype(np.float64))
        delta_p[start:stop] = p_test - p_base
    return PositionStats(kl=kl, same_top=same_top, delta_p=delta_p)


def _kl_rows(base_chunk: NDArray[Any], test_chunk: NDArray[Any]) -> NDArray[np.float64]:
    """Row-wise ``sum_v p_b (log p_b - log p_t)`` in float64 for one chunk of positions."""
    # Two float64 copies of the chunk (plus a bool mask) are the only large temporaries.
    log_b = base_chunk.astype(np.float64)
    terms = test_chunk.astype(np.float64)
    with np.errstate(invalid="ignore"):
        np.subtract(log_b, terms, out=terms)  # log p_b - log p_t (nan where both are -inf)
        p_b = np.exp(log_b, out=log_b)  # in place: log_b is not needed any more
        np.multiply(p_b, terms, out=terms)  # nan where p_b == 0 and p_t == 0
    np.copyto(terms, 0.0, where=p_b == 0.0)  # 0 * log(0 / q) = 0 by convention
    out: NDArray[np.float64] = terms.sum(axis=1)
    return out


def _kl_term(p: float, log_p: float, log_q: float) -> float:
    """One summand ``p * (log p - log q)`` with ``0 log 0 = 0`` and ``p log(p / 0) = inf``."""
    if p <= 0.0:
        return 0.0
    if log_q == -math.inf:
        return math.inf
    return p * (log_p - log_q)


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -math.inf


def topk_kl_lower_bound(
    base_top: Mapping[int, float],
    test_top: Mapping[int, float],
    *,
    tail_tol: float = 1e-6,
) -> float:
    """Lower bound of ``KL(base || test)`` at one position from the two sides' top-k lists.

    Each mapping is ``token id -> natural-log probability`` for that side's top-k tokens.
    Nothing is renormalised. Let ``S`` be the ids present in *both* maps. The vocabulary is
    partitioned into ``|S| + 1`` buckets: one per id in ``S`` and a tail bucket holding every
    other token, with::

        p_base(tail) = max(0, 1 - sum_{v in S} p_base(v))
        p_test(tail) = max(0, 1 - sum_{v in S} p_test(v))

        KL_S = sum_{v in S} p_base(v) * log(p_base(v) / p_test(v))
               + p_base(tail) * log(p_base(tail) / p_test(tail))

    with ``0 log(0 / q) = 0`` and ``p log(p / 0) = +inf`` for ``p > 0``. Merging tokens into
    buckets can only lose information, so by the data-processing inequality (log-sum
    inequality) ``KL_S <= KL(base || test)`` over the full vocabulary: this is a *lower
    bound* of the true KL, tight when the top-k lists cover nearly all the mass.

    ``tail_tol`` absorbs the rounding of the reported log-probabilities: a baseline tail mass
    below it is treated as 0 (otherwise a top-k list that covers the whole distribution could
    give ``1e-8 * log(1e-8 / 0) = inf``). The result is clamped at ``>= 0``.
    """
    shared = [tok for tok in base_top if tok in test_top]
    log_b = [float(base_top[tok]) for tok in shared]
    log_t = [float(test_top[tok]) for tok in shared]
    p_b = [math.exp(x) for x in log_b]
    p_t = [math.exp(x) for x in log_t]
    terms = [_kl_term(p, lp, lq) for p, lp, lq in zip(p_b, log_b, log_t, strict=True)]
    tail_b = max(0.0, 1.0 - math.fsum(p_b))
    tail_t = max(0.0, 1.0 - math.fsum(p_t))
    if tail_b < tail_tol:
        tail_b = 0.0
    terms.append(_kl_term(tail_b, _log(tail_b), _log(tail_t)))
    if math.inf in terms:
        return math.inf
    return max(0.0, math.fsum(terms))


def topk_kl_lower_bound_positions(
    base: Sequence[Mapping[int, float]],
    test: Sequence[Mapping[int, float]],
    *,
    tail_tol: float = 1e-6,
) -> NDArray[np.float64]:
    """:func:`topk_kl_lower_bound` for each position; returns a ``(T,)`` float64 array.

    Raises:
        ValueError: if the two sequences have different lengths.
    """
    if len(base) != len(test):
        raise ValueError(
            f"base and test must have one top-k map per position, got {len(base)} and "
            f"{len(test)} positions"
        )
    return np.array(
        [topk_kl_lower_bound(b, t, tail_tol=tail_tol) for b, t in zip(base, test, strict=True)],
        dtype=np.float64,
    )
