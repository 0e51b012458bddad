"""The precision a side's logprobs were computed in, read from their values, and how far from 1
the probability mass of a row computed in that precision may be.

A top-k list does not say how much mass its row held outside it: the KL bounds of
:mod:`.kl` need to know how far from 1 the row's total mass may be (``mass_tol``). That
depends on the precision the engine's log-softmax ran in. Measured (random logits, scales
0.5 to 30, V = 300 to 152k, ``x - logsumexp(x)`` in the dtype, mass summed in float64):

============ ============================================ =================
precision    largest ``|sum exp(logprob) - 1|`` measured  :data:`MASS_TOL`
============ ============================================ =================
bfloat16     0.15 (mlx); the tiny adder's rows: 0.028      0.3
float16      0.056 (mlx)                                  0.15
float32      2.5e-4 (mlx, V = 152k); 5e-7 (numpy)         1e-3
============ ============================================ =================

The precision is read from the values (:func:`logprob_precision`): a list whose every
informative value (finite, not 0) is a bfloat16 number, exactly or rounded to
:data:`GOLDEN_DECIMALS` decimals as a golden file stores it, is ``bfloat16``; likewise
``float16``; anything else is taken as ``float32`` (an engine's float32 values, or a
golden's rounded ones: rounding to 6 decimals moves the mass by at most 5e-7 more); a list
with no informative value (only ``0.0`` and ``-inf``) is ``unknown`` and takes the widest
tolerance. A random float32 value is a bfloat16 number with odds 2^-16, so two informative
values decide it.
Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = [
    "GOLDEN_DECIMALS",
    "MASS_TOL",
    "logprob_precision",
    "mass_tolerance",
]

MASS_TOL = {"bfloat16": 0.3, "float16": 0.15, "float32": 1e-3, "unknown": 0.3}
"""How far from 1 the mass of a row computed in each precision is taken to be at most (about
twice the largest measured: see the module docstring); ``unknown`` (no informative value)
takes the widest."""
GOLDEN_DECIMALS = 6
"""The decimals a golden file rounds its logprobs to (``golden.file.DECIMALS``)."""


def _bfloat16(values: np.ndarray) -> np.ndarray:
    """Each float64 value rounded to the nearest bfloat16 number (ties to even), as float64."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out: np.ndarray = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    return out


def _float16(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        out: np.ndarray = values.astype(np.float16).astype(np.float64)
    return out


def _held(values: np.ndarray, narrow: np.ndarray) -> bool:
    """Whether every value is its narrow-format neighbour, exactly or as a golden rounds it."""
    exact = narrow == values
    rounded = np.round(narrow, GOLDEN_DECIMALS) == values
    return bool(np.all(exact | rounded))


def logprob_precision(values: Iterable[float]) -> str:
    """``bfloat16``, ``float16`` or ``float32``: the narrowest precision that holds every
    informative value (finite and not 0: ``0.0`` and ``-inf`` are held by every format),
    exactly or rounded to :data:`GOLDEN_DECIMALS`; ``float32`` when neither narrow format
    holds them; ``unknown`` when no value is informative (a bfloat16 engine's near-certain
    top-1 reads exactly 0.0 at every position of a peaked output)."""
    informative = np.array(
        [v for v in (float(x) for x in values) if math.isfinite(v) and v != 0.0],
        dtype=np.float64,
    )
    if informative.size == 0:
        return "unknown"
    if _held(informative, _bfloat16(informative)):
        return "bfloat16"
    if _held(informative, _float16(informative)):
        return "float16"
    return "float32"


def mass_tolerance(values: Iterable[float]) -> float:
    """:data:`MASS_TOL` of the :func:`logprob_precision` of ``values``."""
    return MASS_TOL[logprob_precision(values)]
