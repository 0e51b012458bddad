"""Per-position divergence between a baseline and a test engine's next-token distributions.

All functions are pure: they take log-probabilities (natural log) and return numbers.

Full-vocabulary inputs are ``(T, V)`` arrays of log-probabilities scored teacher-forced on the
same prompt + continuation by both engines. They can be large (e.g. ``T=2048``,
``V=128000`` float32 is 1 GiB per array), so :func:`position_stats` works through the
positions in chunks and only ever holds ``O(chunk_size * V)`` float64 temporaries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .faults import Fault
from .finite import (
    TOPK_LOGSUMEXP_TOL,
    check_topk_rows,
    check_values,
    chunk_logsumexp,
    logsumexp_tolerance,
    non_finite_positions,
    row_faults,
)
from .keys import ambiguous_key
from .precision import MASS_TOL, mass_tolerance

__all__ = [
    "DEFAULT_MASS_TOL",
    "MassTol",
    "PositionStats",
    "Tail",
    "position_stats",
    "side_mass_tol",
    "tail_term_bound",
    "topk_kl_lower_bound",
    "topk_kl_lower_bound_positions",
    "topk_pair_stats",
]


@dataclass(frozen=True)
class PositionStats:
    """Per-position comparison of two ``(T, V)`` log-probability arrays.

    Attributes:
        kl: ``(T,)`` float64, ``KL_t = sum_v p_base(v) * (log p_base(v) - log p_test(v))``.
        same_top: ``(T,)`` bool, ``argmax_v base[t] == argmax_v test[t]``.
        delta_p: ``(T,)`` float64, ``p_test(chosen_t) - p_base(chosen_t)``.
        problems: the fail-closed findings (:mod:`.finite`), in this order: the baseline's
            rows (non-finite, not normalised), the test side's rows, then the non-finite KL
            values. Empty when every number is usable. Each is a violation of its own.
    """

    kl: NDArray[np.float64]
    same_top: NDArray[np.bool_]
    delta_p: NDArray[np.float64]
    problems: tuple[Fault, ...] = ()

    def __len__(self) -> int:
        return int(self.kl.shape[0])

    @property
    def non_finite_kl(self) -> tuple[int, ...]:
        """Positions whose ``KL_t`` is NaN, ``+inf`` or ``-inf``."""
        return non_finite_positions(self.kl)

    def violations(self) -> list[str]:
        """One line per problem, e.g. ``non-finite KL at positions 2, 5 (NaN)``."""
        return [p.describe() for p in self.problems]


def position_stats(
    base_logprobs: ArrayLike,
    test_logprobs: ArrayLike,
    chosen_ids: Sequence[int] | NDArray[np.integer[Any]],
    chunk_size: int = 128,
    *,
    row_tol: float | None = None,
    base_name: str = "baseline",
    test_name: str = "test",
) -> PositionStats:
    """Compare baseline and test full-vocabulary distributions position by position.

    Args:
        base_logprobs: ``(T, V)`` natural-log probabilities from the baseline engine.
        test_logprobs: ``(T, V)`` natural-log probabilities from the engine under test, scored
            on the same tokens.
        chosen_ids: ``(T,)`` token ids; ``chosen_ids[t]`` is the baseline's token at position t.
        chunk_size: number of positions converted to float64 at a time.
        row_tol: how far from 0 each row's logsumexp may be; None means
            :func:`~.finite.logsumexp_tolerance` ``(V)`` for float32 rows, ``math.inf`` checks
            only for non-finite values.
        base_name, test_name: how the two sides are named in the problems
            (``"<name> logprobs"``).

    Returns:
        :class:`PositionStats` with, for each position ``t``::

            KL_t      = sum_v p_base(v) * (log p_base(v) - log p_test(v))
            same_top  = argmax_v log p_base(v) == argmax_v log p_test(v)
            delta_p_t = p_test(chosen_t) - p_base(chosen_t)

        where ``p = exp(logprob)``. The sums are computed in float64 from the input values.
        Conventions: a token with ``p_base(v) = 0`` (log-prob ``-inf``) contributes 0 (``0 log 0
        = 0``); a token with ``p_base(v) > 0`` and ``p_test(v) = 0`` makes ``KL_t = +inf``.
        Nothing is renormalised or clamped: since float32 rows do not sum to exactly 1, a
        near-identical pair of rows can give a slightly negative ``KL_t`` (order 1e-7 for
        small vocabularies, up to the rows' normalisation error, see
        :func:`~.finite.logsumexp_tolerance`, for large ones).

        Fail closed (``problems``): a NaN anywhere in a row, or a ``+inf``, is reported for
        that row even where the KL convention above would hide it (a NaN at a token the
        baseline gives probability 0); so is a row whose logsumexp is not within ``row_tol``
        of 0 (an all ``-inf`` row included), and a ``KL_t`` that is NaN or infinite (a ``+inf``
        ``KL_t`` is a real divergence, and still named). NaN values are kept in ``kl`` and
        ``delta_p``, never replaced.

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
    if row_tol is None:
        row_tol = logsumexp_tolerance(int(vocab))
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
    lse_base = np.empty(n_pos, dtype=np.float64)
    lse_test = np.empty(n_pos, dtype=np.float64)
    for start in range(0, n_pos, chunk_size):
        stop = min(start + chunk_size, n_pos)
        base_chunk = base[start:stop]
        test_chunk = test[start:stop]
        kl[start:stop], lse_base[start:stop], lse_test[start:stop] = _kl_rows(
            base_chunk, test_chunk
        )
        same_top[start:stop] = np.argmax(base_chunk, axis=1) == np.argmax(test_chunk, axis=1)
        rows = np.arange(stop - start)
        ids = chosen[start:stop]
        with np.errstate(over="ignore"):
            p_base = np.exp(base_chunk[rows, ids].astype(np.float64))
            p_test = np.exp(test_chunk[rows, ids].astype(np.float64))
        delta_p[start:stop] = p_test - p_base
    problems: list[Fault] = [
        *row_faults(f"{base_name} logprobs", lse_base, row_tol),
        *row_faults(f"{test_name} logprobs", lse_test, row_tol),
    ]
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return PositionStats(kl=kl, same_top=same_top, delta_p=delta_p, problems=tuple(problems))


def _kl_rows(
    base_chunk: NDArray[Any], test_chunk: NDArray[Any]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Row-wise ``sum_v p_b (log p_b - log p_t)`` in float64 for one chunk of positions, and
    the logsumexp of each base and test row (from the same buffers, no extra copy)."""
    # Two float64 chunk-sized buffers (plus a bool mask) are the only large temporaries.
    log_b = base_chunk.astype(np.float64)
    terms = np.empty(test_chunk.shape, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        np.exp(test_chunk, out=terms, dtype=np.float64)  # p_t, computed in float64
        lse_t = np.log(terms.sum(axis=1))
        np.subtract(log_b, test_chunk, out=terms)  # log p_b - log p_t (nan where both -inf)
        p_b = np.exp(log_b, out=log_b)  # in place: log_b is not needed any more
        lse_b = np.log(p_b.sum(axis=1))
        np.multiply(p_b, terms, out=terms)  # nan where p_b == 0 and p_t == 0
    np.copyto(terms, 0.0, where=p_b == 0.0)  # 0 * log(0 / q) = 0 by convention
    out: NDArray[np.float64] = terms.sum(axis=1)
    # An unshifted sum of exp overflows or underflows only for a row far from normalised (or
    # holding inf / nan): redo those rows with the max shift so the reported value is right.
    for lse, chunk in ((lse_b, base_chunk), (lse_t, test_chunk)):
        redo = ~np.isfinite(lse)
        if redo.any():
            lse[redo] = chunk_logsumexp(chunk[redo])
    return out, lse_b, lse_t


def _kl_term(p: float, log_p: float, log_q: float) -> float:
    """One summand ``p * (log p - log q)`` with ``0 log 0 = 0`` and ``p log(p / 0) = inf``."""
    if p <= 0.0:
        return 0.0
    if log_q == -math.inf:
        return math.inf
    return p * (log_p - log_q)


DEFAULT_MASS_TOL = MASS_TOL["float32"]
"""How far from 1 the total probability mass of a float32 row is taken to be at most (1e-3:
mlx's float32 log-softmax was measured 2.5e-4 off at V = 152k). With ``mass_tol=None`` the
functions below read each top-k side's precision from its values
(:func:`~.precision.mass_tolerance`: bfloat16 rows are off by up to 0.15, so 0.3)."""


@dataclass(frozen=True)
class Tail:
    """What is known of one side's tail mass (the probability of every token outside the
    shared ids): it lies in ``[lo, hi]`` (``lo == hi`` when it is known exactly)."""

    lo: float
    hi: float

    @staticmethod
    def of_top_k(shared: float, known: float, mass_tol: float) -> Tail:
        """The tail of a side known by its top-k, from ``shared`` (its mass on the shared
        ids) and ``known`` (its mass on every id it reported, ``>= shared``), given that its
        total mass ``Z`` satisfies ``max(1 - mass_tol, known) <= Z <= max(1, known) +
        mass_tol``: ``lo = max(1 - mass_tol, known) - shared``, ``hi = max(1, known) +
        mass_tol - shared`` (each at least 0). A top-k that reports more than 1 in all shows
        its row's own rounding: the excess is taken as part of the row's mass, and
        ``mass_tol`` more is allowed above it."""
        lo = max(1.0 - mass_tol, known) - shared
        hi = max(1.0, known) + mass_tol - shared
        return Tail(max(0.0, lo), max(0.0, hi))

    @staticmethod
    def exact(mass: float) -> Tail:
        """A tail known exactly (summed from a side's full row)."""
        return Tail(mass, mass)


def tail_term_bound(base: Tail, test: Tail) -> float:
    """``min x log(x / y)`` over the base tail ``x in [base.lo, base.hi]`` and the test tail
    ``y in [test.lo, test.hi]``: the smallest the tail bucket's term can be.

    ``f(x, y) = x log(x / y)`` decreases in ``y`` (for ``x > 0``), so ``y = test.hi``; in ``x``
    it is convex with its minimum at ``x = y / e``, so ``x = clip(test.hi / e, base.lo,
    base.hi)``. Conventions ``0 log(0 / y) = 0`` and ``x log(x / 0) = inf`` for ``x > 0``
    (a test tail known to be exactly 0)."""
    y = test.hi
    if y <= 0.0:
        return 0.0 if base.lo <= 0.0 else math.inf
    x = min(max(y / math.e, base.lo), base.hi)
    return x * math.log(x / y) if x > 0.0 else 0.0


MassTol = float | tuple[float | None, float | None] | None
"""A mass tolerance for both sides, or ``(base, test)``; None: read from the values."""


def side_mass_tol(maps: Sequence[Mapping[Any, float]], chosen: Sequence[float] = ()) -> float:
    """One side's mass tolerance read from every value it reported (all its positions' top-k
    and its chosen logprobs: :func:`~.precision.mass_tolerance`). A side's precision is its
    engine's, so all positions vote: a position whose only value is ``0.0`` does not tell."""
    return mass_tolerance(itertools.chain((v for m in maps for v in m.values()), chosen))


def _tol(mass_tol: MassTol, side: int, top: Mapping[Any, float]) -> float:
    tol = mass_tol[side] if isinstance(mass_tol, tuple) else mass_tol
    return mass_tolerance(top.values()) if tol is None else tol


def topk_kl_lower_bound(
    base_top: Mapping[int, float],
    test_top: Mapping[int, float],
    *,
    mass_tol: MassTol = None,
    base_tail: float | None = None,
    test_tail: float | None = None,
) -> float:
    """Lower bound of ``KL(base || test)`` at one position from the two sides' top-k lists.

    Each mapping is ``token id -> natural-log probability`` for the tokens that side
    reported (or ``token text -> ...`` for a server that returns no ids). Nothing is
    renormalised. Let ``S`` be the ids present in *both* maps and ``T`` every other token of
    the vocabulary (the tail). A text key that may name more than one token
    (:func:`~.keys.ambiguous_key`: ``\ufffd``, ``bytes:``, empty, or carried by two entries)
    is left out of ``S``: the two sides' values under it may be two different tokens'; its
    mass stays in the side's reported mass ``M``, so in its tail. With ``p``, ``q`` the two sides'
    probabilities (``exp`` of the logprobs, whatever their total mass)::

        KL = sum_v p(v) log(p(v) / q(v))
           >= sum_{v in S} p(v) log(p(v) / q(v)) + P log(P / Q),   P = p(T), Q = q(T)

    by the log-sum inequality on ``T`` (the data-processing inequality over the partition
    ``{each v in S, T}``; it holds for any positive measures, normalised or not). ``P`` and
    ``Q`` are not reported: each side's tail is only known to lie in an interval
    (:class:`Tail`), and the bound takes the smallest tail term over both intervals
    (:func:`tail_term_bound`)::

        KL_S = sum_{v in S} p(v) log(p(v) / q(v)) + min_{P in [P_lo, P_hi], Q <= Q_hi} P log(P / Q)

    For a side known by its top-k, with ``M_S`` its mass on ``S`` and ``M`` on every id it
    reported: ``[max(1 - mass_tol, M) - M_S, max(1, M) + mass_tol - M_S]``, ``mass_tol``
    given (one for both sides, or ``(base, test)``), or read from that side's values'
    precision where None (:func:`~.precision.mass_tolerance`: 1e-3 for float32 rows, 0.3
    for bfloat16 ones; a position whose only value is ``0.0`` does not tell: the functions
    over positions read a side's precision from all of them, :func:`side_mass_tol`)
    (:meth:`Tail.of_top_k`); for a side whose full row is known, its exact tail
    (``base_tail`` / ``test_tail``: the mass of that side's tokens outside ``S``, i.e. outside
    the other map's ids when both maps hold the same ids). So the result never exceeds the
    full-vocabulary KL of rows whose total mass is within ``mass_tol`` of 1 (of ``M`` when a
    top-k reports more than 1), whatever their rounding: the float32 tail ``1 - M_S`` that
    rounding made 0 or negative is not floored to a made-up value (the former floor could
    put the bound above the true KL), and a test tail that rounding made too small cannot
    inflate the tail term. The price: a slack of at most about ``mass_tol / e`` nats where
    both tails are below ``mass_tol``, and a tail term read at ``Q_hi`` rather than ``Q``.
    The result is clamped at ``>= 0`` (a KL of two distributions is never negative; rows that
    do not sum to exactly 1 can give a full-vocabulary sum slightly below 0, of the order of
    their normalisation error).

    ``0 log(0 / q) = 0``; ``p log(p / 0) = +inf`` for ``p > 0`` on a shared token (the full KL
    is infinite too).

    Fail closed: a NaN or ``+inf`` logprob anywhere in either map, or a NaN or ``+inf`` exact
    tail (a full row holding one outside ``S``), gives NaN (such a list is not a
    distribution; :func:`~.finite.check_topk_rows` and the row checks name it). ``-inf``
    entries are legitimate.

    Raises:
        ValueError: if ``mass_tol`` is given and not ``>= 0``.
    """
    for tol in mass_tol if isinstance(mass_tol, tuple) else (mass_tol,):
        if tol is not None and not tol >= 0.0:
            raise ValueError(f"mass_tol must be >= 0, got {tol}")
    exact_tails = [t for t in (base_tail, test_tail) if t is not None]
    for value in (*base_top.values(), *test_top.values(), *exact_tails):
        x = float(value)
        if math.isnan(x) or x == math.inf:
            return math.nan
    shared = [
        tok
        for tok in base_top
        if tok in test_top and not ambiguous_key(tok, base_top) and not ambiguous_key(tok, test_top)
    ]
    log_b = [float(base_top[tok]) for tok in shared]
    log_t = [float(test_top[tok]) for tok in shared]
    p_b = [math.exp(x) for x in log_b]
    p_t = [math.exp(x) for x in log_t]
    terms = [_kl_term(p, lp, lq) for p, lp, lq in zip(p_b, log_b, log_t, strict=True)]
    if math.inf in terms:
        return math.inf
    tails = [
        Tail.exact(exact)
        if exact is not None
        else Tail.of_top_k(
            math.fsum(on_shared),
            math.fsum(math.exp(float(v)) for v in top.values()),
            _tol(mass_tol, side, top),
        )
        for side, (exact, on_shared, top) in enumerate(
            ((base_tail, p_b, base_top), (test_tail, p_t, test_top))
        )
    ]
    tail = tail_term_bound(tails[0], tails[1])
    if tail == math.inf:
        return math.inf
    return max(0.0, math.fsum([*terms, tail]))


def topk_kl_lower_bound_positions(
    base: Sequence[Mapping[int, float]],
    test: Sequence[Mapping[int, float]],
    *,
    mass_tol: MassTol = None,
) -> NDArray[np.float64]:
    """:func:`topk_kl_lower_bound` for each position (both sides known by their top-k, each
    row's mass within ``mass_tol`` of 1; None: each side's from all its positions' values,
    :func:`side_mass_tol`); returns a ``(T,)`` float64 array.

    Raises:
        ValueError: if the two sequences have different lengths.
    """
    if len(base) != len(test):
        raise ValueError(
            f"base and test must have one top-k map per position, got {len(base)} and "
            f"{len(test)} positions"
        )
    tols = _sides_tol(mass_tol, (base, ()), (test, ()))
    return np.array(
        [topk_kl_lower_bound(b, t, mass_tol=tols) for b, t in zip(base, test, strict=True)],
        dtype=np.float64,
    )


def _sides_tol(
    mass_tol: MassTol,
    base: tuple[Sequence[Mapping[Any, float]], Sequence[float]],
    test: tuple[Sequence[Mapping[Any, float]], Sequence[float]],
) -> tuple[float, float]:
    """Each side's tolerance: given, else :func:`side_mass_tol` over all its positions."""
    given = mass_tol if isinstance(mass_tol, tuple) else (mass_tol, mass_tol)
    return (
        side_mass_tol(*base) if given[0] is None else given[0],
        side_mass_tol(*test) if given[1] is None else given[1],
    )


def top_one(top: Mapping[int, float]) -> int:
    """The most likely id of a top-k map (ties: the lower id)."""
    return max(top, key=lambda v: (top[v], -v))


def topk_pair_stats(
    base_top: Sequence[Mapping[int, float]],
    base_chosen: Sequence[float],
    test_top: Sequence[Mapping[int, float]],
    test_chosen: Sequence[float],
    chosen_ids: Sequence[int],
    *,
    mass_tol: MassTol = None,
    topk_tol: float = TOPK_LOGSUMEXP_TOL,
    base_name: str = "baseline",
    test_name: str = "test",
) -> PositionStats:
    """Two sides known only by their top-k, both teacher-forced on the baseline's
    continuation C (each side's distribution at ``t`` conditioned on the prompt and
    ``C[:t]``; e.g. vLLM against vLLM with an fp8 KV cache, or a golden's recorded top-k
    against vLLM's ``prompt_logprobs``). At each position ``t``, each side's known tokens are
    its top-k plus the given token ``c = C[t]`` (whose logprob both sides report)::

        B_t = base_top[t] + {c: base_chosen[t]},   T_t = test_top[t] + {c: test_chosen[t]}
        KL_t     = topk_kl_lower_bound(B_t, T_t, mass_tol=mass_tol)
                 = sum_{v in S} p(v) log(p(v) / q(v)) + min P log(P / Q),  S = ids(B_t) & ids(T_t)
                   over the tails P, Q each side's row allows (mass within mass_tol of 1)
        same_top = argmax(base_top[t]) == argmax(test_top[t])     (ties: the lower id)
        delta_p  = exp(test_chosen[t]) - exp(base_chosen[t])

    ``KL_t`` buckets every token outside the ids both sides know (``S``, which holds at
    least ``c``) into one tail, nothing renormalised: a lower bound of the full-vocabulary
    KL by the data-processing inequality, whatever the rows' rounding within ``mass_tol``
    (see :func:`topk_kl_lower_bound`). ``same_top``
    and ``delta_p`` are exact: each top-k holds its side's most likely token, and both sides
    report the given token's logprob.

    ``problems`` (fail closed, :mod:`.finite`), in this order: the baseline's known tokens
    (NaN / ``+inf``, or a mass above 1 beyond ``topk_tol``), then the test side's, then the
    non-finite ``KL_t`` values.

    Raises:
        ValueError: if the lengths disagree or a position has an empty top-k.
    """
    n = len(chosen_ids)
    lengths = (len(base_top), len(base_chosen), len(test_top), len(test_chosen))
    if any(length != n for length in lengths):
        raise ValueError(
            f"need one top-k map and chosen logprob per side and position: {lengths} for {n} tokens"
        )
    tols = _sides_tol(mass_tol, (base_top, base_chosen), (test_top, test_chosen))
    kl = np.empty(n, dtype=np.float64)
    same_top = np.empty(n, dtype=np.bool_)
    delta_p = np.empty(n, dtype=np.float64)
    base_known: list[dict[int, float]] = []
    test_known: list[dict[int, float]] = []
    for t, token in enumerate(chosen_ids):
        if not base_top[t] or not test_top[t]:
            raise ValueError(f"position {t}: a top-k is empty")
        base_known.append({**base_top[t], int(token): float(base_chosen[t])})
        test_known.append({**test_top[t], int(token): float(test_chosen[t])})
        kl[t] = topk_kl_lower_bound(base_known[t], test_known[t], mass_tol=tols)
        same_top[t] = top_one(base_top[t]) == top_one(test_top[t])
        delta_p[t] = math.exp(float(test_chosen[t])) - math.exp(float(base_chosen[t]))
    problems: list[Fault] = [
        *check_topk_rows(f"{base_name} top-k logprobs", base_known, tol=topk_tol),
        *check_topk_rows(f"{test_name} top-k logprobs", test_known, tol=topk_tol),
    ]
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return PositionStats(kl=kl, same_top=same_top, delta_p=delta_p, problems=tuple(problems))
