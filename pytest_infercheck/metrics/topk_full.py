"""One side known only by its top-k logprobs, the other by its full distributions, both
teacher-forced on the baseline's own continuation: a golden baseline (or a vLLM one) against
a live engine's full rows (:func:`topk_vs_full_stats`), or a baseline's full rows against a
test side that scores only its top-k (:func:`full_vs_topk_stats`, mlx-lm against vLLM).

Each ``KL_t`` is :func:`~.kl.topk_kl_lower_bound` with the full side's tail summed from its
row (known exactly) and the top-k side's tail known to within ``mass_tol``: a lower bound of
the full-vocabulary KL. Pure functions: log-probabilities in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .faults import Fault
from .finite import (
    TOPK_LOGSUMEXP_TOL,
    check_topk_rows,
    check_values,
    logsumexp_tolerance,
    row_faults,
    row_logsumexp,
)
from .kl import PositionStats, side_mass_tol, top_one, topk_kl_lower_bound


def topk_vs_full_stats(
    base_top: Sequence[Mapping[int, float]],
    base_chosen: Sequence[float],
    test_logprobs: ArrayLike,
    chosen_ids: Sequence[int],
    *,
    mass_tol: float | None = None,
    row_tol: float | None = None,
    topk_tol: float = TOPK_LOGSUMEXP_TOL,
    base_name: str = "baseline",
    test_name: str = "test",
) -> PositionStats:
    """Per position ``t`` of the baseline's continuation C, with ``S_t`` the baseline's top-k
    token ids at ``t`` and ``q = exp(test_logprobs[t])`` the test side's full distribution
    given the prompt and ``C[:t]`` (the same prefix the baseline saw)::

        KL_t     = sum_{v in S_t} p(v) log(p(v) / q(v)) + min_P P log(P / Q)
                   with Q = sum_{v not in S_t} q(v)        (exact: summed from the row)
                        P in [max(1 - mass_tol, M) - M, max(1, M) + mass_tol - M],
                        M = sum_{v in S_t} p(v)             (the baseline's tail, not known)
        same_top = (the baseline's most likely token in S_t) == argmax_v q(v)
        delta_p  = q(C[t]) - exp(base_chosen[t])

    ``KL_t`` is :func:`~.kl.topk_kl_lower_bound` with the test side's values read at the
    baseline's top-k ids and its exact tail: the tail is one bucket on both sides, nothing
    renormalised, so it is a lower bound of the full-vocabulary KL whenever the baseline's row
    holds within ``mass_tol`` of 1 (tight when the top-k hold nearly all the mass).
    Unlike a free-running top-k comparison, every position of C counts, since both sides are
    conditioned on the same prefix. ``same_top`` and ``delta_p`` are exact.

    A test row whose float32 logprob of the baseline's near-certain token rounds to 0.0 gives
    a finite ``KL_t`` (its tail is summed, not read as ``1 - 1``); ``inf`` only when the test
    row gives the whole tail probability 0 while the baseline's cannot be 0, or a shared
    token probability 0 that the baseline gives more (the full KL is infinite too).

    ``problems`` (fail closed, :mod:`.finite`), in this order: the baseline's top-k lists
    (NaN / ``+inf``, or a top-k logsumexp above ``topk_tol``; pass
    :data:`~.finite.BFLOAT16_LOGSUMEXP_TOL` for a golden recorded in bfloat16), the
    baseline's chosen logprobs (NaN / ``+inf``), the test side's full rows (NaN / ``+inf``,
    or a logsumexp not within ``row_tol`` of 0; None means
    :func:`~.finite.logsumexp_tolerance` ``(V)``), then the non-finite ``KL_t`` values.

    Raises:
        ValueError: if the lengths disagree, ``test_logprobs`` is not ``(len(C), V)``, or a
            position has an empty top-k.
    """
    test = np.asarray(test_logprobs, dtype=np.float64)
    n = len(chosen_ids)
    if test.ndim != 2 or test.shape[0] != n or len(base_top) != n or len(base_chosen) != n:
        raise ValueError(
            f"need one top-k map, chosen logprob and test row per position: {len(base_top)} "
            f"top-k maps, {len(base_chosen)} chosen logprobs, test shape {test.shape}, "
            f"{n} tokens"
        )
    tol = side_mass_tol(base_top, base_chosen) if mass_tol is None else mass_tol
    kl = np.empty(n, dtype=np.float64)
    same_top = np.empty(n, dtype=np.bool_)
    delta_p = np.empty(n, dtype=np.float64)
    for t, (top, chosen) in enumerate(zip(base_top, chosen_ids, strict=True)):
        if not top:
            raise ValueError(f"position {t}: the baseline's top-k is empty")
        row = test[t]
        kl[t] = topk_kl_lower_bound(
            top,
            {v: float(row[v]) for v in top},
            mass_tol=tol,
            test_tail=tail_mass(row, top),
        )
        best = max(top, key=lambda v: (top[v], -v))
        same_top[t] = best == int(np.argmax(row))
        delta_p[t] = float(np.exp(row[chosen]) - np.exp(base_chosen[t]))
    if row_tol is None:
        row_tol = logsumexp_tolerance(int(test.shape[1]))
    problems: list[Fault] = [
        *check_topk_rows(f"{base_name} top-k logprobs", base_top, tol=topk_tol)
    ]
    chosen_lp = np.asarray(base_chosen, dtype=np.float64)
    chosen_problem = check_values(f"{base_name} chosen logprobs", chosen_lp, allow_neg_inf=True)
    if chosen_problem is not None:
        problems.append(chosen_problem)
    problems += row_faults(f"{test_name} logprobs", row_logsumexp(test), row_tol)
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return PositionStats(kl=kl, same_top=same_top, delta_p=delta_p, problems=tuple(problems))


def full_vs_topk_stats(
    base_logprobs: ArrayLike,
    test_top: Sequence[Mapping[int, float]],
    test_chosen: Sequence[float],
    chosen_ids: Sequence[int],
    *,
    mass_tol: float | None = None,
    row_tol: float | None = None,
    topk_tol: float = TOPK_LOGSUMEXP_TOL,
    base_name: str = "baseline",
    test_name: str = "test",
) -> PositionStats:
    """Per position ``t`` of the baseline's continuation C, with ``p = exp(base_logprobs[t])``
    the baseline's full distribution and the test side known by its top-k ``test_top[t]``
    and its logprob ``test_chosen[t]`` of ``c = C[t]`` (both given the prompt and ``C[:t]``,
    e.g. vLLM's ``prompt_logprobs``)::

        K_t      = ids(test_top[t]) + {c}
        KL_t     = sum_{v in K_t} p(v) log(p(v) / q(v)) + P log(P / Q_hi)
                   with P    = sum_{v not in K_t} p(v)             (exact: summed from the row)
                        Q_hi = max(1, M) + mass_tol - M,  M = sum_{v in K_t} q(v)
        same_top = argmax_v p(v) == argmax(test_top[t])    (ties: the lower id)
        delta_p  = exp(test_chosen[t]) - p(c)

    ``KL_t`` is :func:`~.kl.topk_kl_lower_bound` with the baseline's full row read at the
    test side's known ids and its exact tail: every other token in one tail bucket on both
    sides, nothing renormalised, so a lower bound of the full-vocabulary KL whenever the test
    side's row holds at most ``max(1, M) + mass_tol`` (its tail at most ``Q_hi``, the
    largest it can be, which makes the tail term the smallest). ``same_top`` and ``delta_p``
    are exact (the test's top-k holds its most likely token; both sides know ``c``).

    ``problems`` (fail closed, :mod:`.finite`), in this order: the baseline's full rows
    (NaN / ``+inf``, or a logsumexp not within ``row_tol`` of 0; None means
    :func:`~.finite.logsumexp_tolerance` ``(V)``), the test side's known tokens (NaN /
    ``+inf``, or a mass above 1 beyond ``topk_tol``), then the non-finite ``KL_t`` values.

    Raises:
        ValueError: if the lengths disagree, ``base_logprobs`` is not ``(len(C), V)``, or a
            position has an empty top-k.
    """
    base = np.asarray(base_logprobs, dtype=np.float64)
    n = len(chosen_ids)
    if base.ndim != 2 or base.shape[0] != n or len(test_top) != n or len(test_chosen) != n:
        raise ValueError(
            f"need one baseline row, test top-k map and chosen logprob per position: base "
            f"shape {base.shape}, {len(test_top)} top-k maps, {len(test_chosen)} chosen "
            f"logprobs, {n} tokens"
        )
    kl = np.empty(n, dtype=np.float64)
    same_top = np.empty(n, dtype=np.bool_)
    delta_p = np.empty(n, dtype=np.float64)
    known: list[dict[int, float]] = []
    tol = side_mass_tol(test_top, test_chosen) if mass_tol is None else mass_tol
    for t, token in enumerate(chosen_ids):
        if not test_top[t]:
            raise ValueError(f"position {t}: the test side's top-k is empty")
        row = base[t]
        known.append({**test_top[t], int(token): float(test_chosen[t])})
        kl[t] = topk_kl_lower_bound(
            {v: float(row[v]) for v in known[t]},
            known[t],
            mass_tol=tol,
            base_tail=tail_mass(row, known[t]),
        )
        same_top[t] = int(np.argmax(row)) == top_one(test_top[t])
        delta_p[t] = float(np.exp(test_chosen[t]) - np.exp(row[int(token)]))
    if row_tol is None:
        row_tol = logsumexp_tolerance(int(base.shape[1]))
    problems: list[Fault] = [
        *row_faults(f"{base_name} logprobs", row_logsumexp(base), row_tol),
        *check_topk_rows(f"{test_name} top-k logprobs", known, tol=topk_tol),
    ]
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return PositionStats(kl=kl, same_top=same_top, delta_p=delta_p, problems=tuple(problems))


def tail_mass(row: NDArray[np.float64], ids: Iterable[int]) -> float:
    """``sum_{v not in ids} exp(row[v])`` in float64, summed over the tail itself (not
    ``total - known``, which cancels to noise when the tail is tiny); NaN when the row
    holds a NaN or ``+inf`` (the row's problem is named apart)."""
    with np.errstate(over="ignore", invalid="ignore"):
        mass = np.exp(row)
    mass[np.fromiter((int(v) for v in ids), dtype=np.int64)] = 0.0
    return float(mass.sum())
