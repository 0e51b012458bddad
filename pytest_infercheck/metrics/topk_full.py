"""A baseline known only by its top-k logprobs against a test side's full distributions,
scored teacher-forced on the baseline's own continuation (a golden baseline vs a live engine).

Pure functions: log-probabilities in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from .finite import (
    TOPK_LOGSUMEXP_TOL,
    Problem,
    check_topk_rows,
    check_values,
    logsumexp_tolerance,
    row_logsumexp,
    row_problems,
)
from .kl import PositionStats, topk_kl_lower_bound


def topk_vs_full_stats(
    base_top: Sequence[Mapping[int, float]],
    base_chosen: Sequence[float],
    test_logprobs: ArrayLike,
    chosen_ids: Sequence[int],
    *,
    tail_tol: float = 1e-6,
    row_tol: float | None = None,
    topk_tol: float = TOPK_LOGSUMEXP_TOL,
    base_name: str = "baseline",
    test_name: str = "test",
) -> PositionStats:
    """Per position ``t`` of the baseline's continuation C, with ``S_t`` the baseline's top-k
    token ids at ``t`` and ``q = exp(test_logprobs[t])`` the test side's full distribution
    given the prompt and ``C[:t]`` (the same prefix the baseline saw)::

        KL_t     = sum_{v in S_t} p(v) log(p(v) / q(v)) + P log(P / Q)
                   with P = max(1 - sum_{v in S_t} p(v), tail_tol),
                        Q = max(1 - sum_{v in S_t} q(v), tail_tol)
        same_top = (the baseline's most likely token in S_t) == argmax_v q(v)
        delta_p  = q(C[t]) - exp(base_chosen[t])

    ``KL_t`` is :func:`~.kl.topk_kl_lower_bound` with the test side's values read at the
    baseline's top-k ids: the tail is one bucket on both sides, nothing renormalised, so it is
    a lower bound of the full-vocabulary KL (tight when the top-k hold nearly all the mass).
    Unlike a free-running top-k comparison, every position of C counts, since both sides are
    conditioned on the same prefix. ``same_top`` and ``delta_p`` are exact.

    Both tails are floored at ``tail_tol`` the same way (see :func:`~.kl.topk_kl_lower_bound`
    for the error bound): a test row whose float32 logprob of the baseline's near-certain
    token is exactly 0.0 gives a finite ``KL_t``, not ``inf``.

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
    kl = np.empty(n, dtype=np.float64)
    same_top = np.empty(n, dtype=np.bool_)
    delta_p = np.empty(n, dtype=np.float64)
    for t, (top, chosen) in enumerate(zip(base_top, chosen_ids, strict=True)):
        if not top:
            raise ValueError(f"position {t}: the baseline's top-k is empty")
        row = test[t]
        kl[t] = topk_kl_lower_bound(top, {v: float(row[v]) for v in top}, tail_tol=tail_tol)
        best = max(top, key=lambda v: (top[v], -v))
        same_top[t] = best == int(np.argmax(row))
        delta_p[t] = float(np.exp(row[chosen]) - np.exp(base_chosen[t]))
    if row_tol is None:
        row_tol = logsumexp_tolerance(int(test.shape[1]))
    problems: list[Problem] = [
        *check_topk_rows(f"{base_name} top-k logprobs", base_top, tol=topk_tol)
    ]
    chosen_lp = np.asarray(base_chosen, dtype=np.float64)
    chosen_problem = check_values(f"{base_name} chosen logprobs", chosen_lp, allow_neg_inf=True)
    if chosen_problem is not None:
        problems.append(chosen_problem)
    problems += row_problems(f"{test_name} logprobs", row_logsumexp(test), row_tol)
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return PositionStats(kl=kl, same_top=same_top, delta_p=delta_p, problems=tuple(problems))
