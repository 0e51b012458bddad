"""The non-finite rule: NaN, or +inf, is never a pass.

One home for the fail-closed checks on numbers that come out of an engine or out of a
metric:

Each finding is a :class:`~.faults.Fault` (the one fault type, :mod:`.faults`):

* NaN anywhere, or ``+inf``, in logprobs, KL, similarity or latency is a violation of its
  own, named (``non-finite KL at positions 2, 5 (NaN)``, :func:`~.faults.non_finite`). A ``-inf``
  *logprob* for a single token is legitimate (probability 0); a ``-inf`` KL, similarity or
  latency is not (``allow_neg_inf``).
* A full-vocabulary logprob row must normalise: its logsumexp must be within a tolerance of
  0 (``test logprobs do not normalise at ...``, :func:`~.faults.not_normalised`). This also
  catches logprobs that do not belong to the distribution (logits passed as logprobs, a
  shifted or truncated row) and a row that is all ``-inf`` (no mass at all).
* An empty generation where the other side has tokens is a divergence
  (:func:`empty_generation`, :func:`~.faults.empty_generation_fault`), never a pass.
* :func:`strict_max` / :func:`strict_mean`: a max or mean that is NaN when any value is NaN
  (Python's ``max`` keeps its first argument when compared with a later NaN, so
  ``max([0.0, nan])`` is ``0.0``).

Normalisation tolerance (:func:`logsumexp_tolerance`). A float32 log-softmax row is
``x - LSE(x)`` with ``LSE`` summed over ``V`` float32 terms. Recursive summation of ``n``
non-negative terms has a relative error of at most ``(n - 1) u`` (``u = 2^-24`` for float32;
Higham, *Accuracy and Stability of Numerical Algorithms*, 4.2), so the logsumexp of a
correct float32 row (computed again here in float64) can be off by up to about ``V u``, plus
the rounding of the final subtraction (``u |LSE|``, below 1e-5 for logits up to 100).
Measured with mlx 0.32 (``logits - mx.logsumexp(logits)``, the scoring path) and with a
sequential float32 sum (llama.cpp's softmax) on synthetic rows with ``V = 151936``: up to
1.5e-3 for float32 logits and 5.0e-3 for bf16 logits cast to float32 (bf16 rounding makes
many logits equal, so the summation errors stop cancelling), against ``V u = 9.1e-3``. A
fixed 1e-3 would fail correct rows, hence the float32 default ``V * 2^-24 + 1e-4``
(9.2e-3 for ``V = 151936``, 2.0e-3 for ``V = 32000``). Rows computed in bfloat16 (mlx
``generate_step`` on a bf16 model) are far coarser: the bf16 logsumexp itself is rounded to
``2^-9 |LSE|`` and the measured deviation reached 0.24 for logits up to 60, so bf16 rows get
a tolerance of 0.5, which still catches logits passed as logprobs and large lost mass but
not small shifts. A row shifted by +0.5 fails both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .faults import KIND_ORDER, Fault, Kind, empty_generation_fault, non_finite, not_normalised

__all__ = [
    "BFLOAT16_LOGSUMEXP_TOL",
    "TOPK_LOGSUMEXP_TOL",
    "check_logprob_rows",
    "check_scalar",
    "check_topk_rows",
    "check_values",
    "chunk_logsumexp",
    "empty_generation",
    "logsumexp_tolerance",
    "non_finite_kinds",
    "non_finite_positions",
    "row_faults",
    "row_logsumexp",
    "strict_max",
    "strict_mean",
]

BFLOAT16_LOGSUMEXP_TOL = 0.5
"""Row-normalisation tolerance for rows computed in bfloat16 (see the module docstring)."""

TOPK_LOGSUMEXP_TOL = 0.02
"""How far above 0 the logsumexp of a top-k list may be (its mass may exceed 1 by about this
much): a top-k list is read from a float32 row, which may be off by the float32 row
tolerance; 0.02 covers vocabularies up to 2^18 tokens (``2^18 * 2^-24 + 1e-4 = 0.0157``).
Only the upper side is checked: a top-k list holds less than the whole mass."""


# ------------------------------------------------------------------ scalar sequences


def _flat(values: ArrayLike) -> NDArray[np.float64]:
    return np.asarray(values, dtype=np.float64).ravel()


def non_finite_positions(values: ArrayLike, *, allow_neg_inf: bool = False) -> tuple[int, ...]:
    """Indexes (into the flattened ``values``) holding NaN or ``+inf``, and ``-inf`` unless
    ``allow_neg_inf``."""
    x = _flat(values)
    bad = np.isnan(x) | (x == math.inf)
    if not allow_neg_inf:
        bad |= x == -math.inf
    return tuple(int(i) for i in np.flatnonzero(bad))


def non_finite_kinds(values: ArrayLike, *, allow_neg_inf: bool = False) -> tuple[Kind, ...]:
    """The kinds of non-finite value present, in the order ``nan``, ``+inf``, ``-inf``."""
    x = _flat(values)
    present = {
        "nan": bool(np.isnan(x).any()),
        "+inf": bool((x == math.inf).any()),
        "-inf": not allow_neg_inf and bool((x == -math.inf).any()),
    }
    return tuple(k for k in KIND_ORDER if present[k])


def check_values(
    what: str,
    values: ArrayLike,
    *,
    allow_neg_inf: bool = False,
    unit: str = "position",
    where: str = "",
) -> Fault | None:
    """A ``non-finite {what}`` :class:`~.faults.Fault` naming the positions of NaN / ``+inf``
    (/ ``-inf``) in ``values`` (a sequence of KL values, similarities, latencies,
    logprobs...) and ``where`` they are (``non-finite logprob in run 3 at positions 2, 5
    (NaN)``), or None if all are fine."""
    positions = non_finite_positions(values, allow_neg_inf=allow_neg_inf)
    if not positions:
        return None
    x = _flat(values)[list(positions)]
    kinds = non_finite_kinds(x, allow_neg_inf=allow_neg_inf)
    return non_finite(what, positions, kinds, unit=unit, where=where)


def check_scalar(
    what: str, value: float, *, allow_neg_inf: bool = False, where: str = ""
) -> Fault | None:
    """A ``non-finite {what}`` :class:`~.faults.Fault` (with no positions) if ``value`` is
    NaN, ``+inf`` or (unless ``allow_neg_inf``) ``-inf``; None otherwise."""
    kinds = non_finite_kinds([value], allow_neg_inf=allow_neg_inf)
    return non_finite(what, (), kinds, where=where) if kinds else None


def strict_max(values: ArrayLike) -> float | None:
    """Largest value; NaN if any value is NaN (wherever it is); None for no values."""
    x = _flat(values)
    if x.size == 0:
        return None
    return float(np.max(x))  # np.max propagates NaN


def strict_mean(values: ArrayLike) -> float | None:
    """Arithmetic mean; NaN if any value is NaN, ``inf`` with an ``inf`` (NaN for ``inf`` and
    ``-inf`` together); None for no values. Never skips a value (no ``nanmean``)."""
    x = _flat(values)
    if x.size == 0:
        return None
    if np.isfinite(x).all():
        return math.fsum(x.tolist()) / x.size
    with np.errstate(invalid="ignore"):
        return float(np.sum(x)) / x.size


def empty_generation(
    base_count: int,
    test_count: int,
    *,
    base: str = "the baseline",
    test: str = "the test",
    unit: str = "tokens",
) -> Fault | None:
    """An ``empty generation`` :class:`~.faults.Fault` (:func:`~.faults.
    empty_generation_fault`, its ``where`` the empty side) when exactly one side generated
    nothing (two empty generations agree; that is not a divergence). Counts are tokens, or
    characters (``unit="characters"``) for a text-only comparison."""
    if base_count == 0 and test_count > 0:
        return empty_generation_fault(base, test, test_count, unit)
    if test_count == 0 and base_count > 0:
        return empty_generation_fault(test, base, base_count, unit)
    return None


# ------------------------------------------------------------------ logprob rows


def logsumexp_tolerance(vocab: int, dtype: str = "float32") -> float:
    """How far from 0 a correct row's logsumexp may be (see the module docstring).

    ``float32``: ``vocab * 2^-24 + 1e-4``; ``float64``: ``vocab * 2^-53 + 1e-9``;
    ``bfloat16``: :data:`BFLOAT16_LOGSUMEXP_TOL`.
    """
    if vocab < 0:
        raise ValueError(f"vocab must be >= 0, got {vocab}")
    if dtype == "float32":
        return vocab * 2.0**-24 + 1e-4
    if dtype == "float64":
        return vocab * 2.0**-53 + 1e-9
    if dtype == "bfloat16":
        return BFLOAT16_LOGSUMEXP_TOL
    raise ValueError(f"no logsumexp tolerance for dtype {dtype!r} (float32, float64, bfloat16)")


def chunk_logsumexp(chunk: NDArray[Any]) -> NDArray[np.float64]:
    """Row-wise logsumexp in float64 of a ``(n, V)`` chunk; one float64 copy of the chunk.

    NaN for a row holding a NaN, ``+inf`` for a row holding ``+inf`` (and no NaN), ``-inf`` for
    a row that is all ``-inf`` (or ``V = 0``); otherwise ``m + log(sum exp(x - m))``, ``m``
    the row max, which cannot overflow.
    """
    work = chunk.astype(np.float64)
    if work.shape[1] == 0:
        return np.full(work.shape[0], -math.inf)
    m = work.max(axis=1)  # NaN propagates; +inf; -inf for an all -inf row
    ok = np.isfinite(m)
    shift = np.where(ok, m, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(work, shift[:, None], out=work)
        np.exp(work, out=work)
        total = work.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = shift + np.log(total)
    out: NDArray[np.float64] = np.where(ok, lse, m)
    return out


def row_logsumexp(logprobs: ArrayLike, *, chunk_size: int = 128) -> NDArray[np.float64]:
    """``(T,)`` logsumexp of each row of a ``(T, V)`` array, in float64, ``chunk_size`` rows
    at a time (see :func:`chunk_logsumexp` for the non-finite cases)."""
    x = np.asarray(logprobs)
    if x.ndim != 2:
        raise ValueError(f"logprobs must be a 2-D (T, V) array, got shape {x.shape}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out = np.empty(x.shape[0], dtype=np.float64)
    for start in range(0, x.shape[0], chunk_size):
        stop = min(start + chunk_size, x.shape[0])
        out[start:stop] = chunk_logsumexp(x[start:stop])
    return out


def row_faults(
    what: str, lse: ArrayLike, tol: float, *, unit: str = "position", where: str = ""
) -> list[Fault]:
    """Faults of rows given their logsumexp (from :func:`row_logsumexp`).

    A NaN logsumexp means a NaN in the row, ``+inf`` a ``+inf`` in the row: both are
    ``non-finite {what}`` (a row holding both is reported as NaN). Any other row whose
    logsumexp is not within ``tol`` of 0, an all ``-inf`` row included, is ``{what} not
    normalised`` (:func:`~.faults.not_normalised`).
    """
    x = _flat(lse)
    out: list[Fault] = []
    bad = check_values(what, x, allow_neg_inf=True, unit=unit, where=where)
    if bad is not None:
        out.append(bad)
    with np.errstate(invalid="ignore"):
        off = ~np.isnan(x) & (x != math.inf) & (np.abs(x) > tol)
    if off.any():
        idx = np.flatnonzero(off)
        out.append(
            not_normalised(
                what,
                [int(i) for i in idx],
                [float(v) for v in x[idx]],
                float(tol),
                unit=unit,
                where=where,
            )
        )
    return out


def check_logprob_rows(
    what: str, logprobs: ArrayLike, *, tol: float | None = None, chunk_size: int = 128
) -> list[Fault]:
    """Check full-vocabulary logprob rows ``(T, V)`` (natural log).

    Returns the non-finite rows (a NaN anywhere in the row, or a ``+inf``) and the rows that
    do not normalise (:func:`row_faults`: logsumexp not within ``tol`` of 0, all ``-inf``
    included). Single ``-inf`` entries are fine. ``tol`` defaults to
    :func:`logsumexp_tolerance` ``(V)`` for float32 rows; pass ``math.inf`` to check only for
    non-finite values. Empty list when all rows are fine.
    """
    x = np.asarray(logprobs)
    lse = row_logsumexp(x, chunk_size=chunk_size)
    if tol is None:
        tol = logsumexp_tolerance(int(x.shape[1]))
    return row_faults(what, lse, tol)


def check_topk_rows(
    what: str,
    rows: Sequence[Mapping[Any, float]],
    *,
    tol: float = TOPK_LOGSUMEXP_TOL,
    where: str = "",
) -> list[Fault]:
    """Check per-position top-k maps (``token -> logprob``).

    ``non-finite {what}`` for a position with a NaN or ``+inf`` logprob; ``{what} not
    normalised`` for a position whose top-k mass exceeds 1 (logsumexp above ``tol``): such logprobs
    cannot belong to one distribution. A top-k list may hold less than the whole mass, so
    only the upper side is checked; ``-inf`` entries (and empty maps) are fine.
    """
    lse = np.empty(len(rows), dtype=np.float64)
    for t, row in enumerate(rows):
        values = np.fromiter((float(v) for v in row.values()), dtype=np.float64)
        lse[t] = chunk_logsumexp(values[None, :])[0]
    # Below the tolerance (however far below 0) is fine for a top-k list; keep NaN and +inf.
    with np.errstate(invalid="ignore"):
        capped = np.where(np.isnan(lse) | (lse > tol), lse, 0.0)
    return row_faults(what, capped, tol, where=where)
