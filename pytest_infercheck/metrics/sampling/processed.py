"""An engine's reported processed distribution against the expected one.

llama-server (``post_sampling_probs: true``) reports the probabilities after its sampler
chain; vLLM (``--logprobs-mode processed_logprobs``) the log-probabilities after top-k/top-p
(``-inf`` outside: pass ``exp``, 0 there). Either is a top-n list, or the whole support.

* ``extra``: reported tokens with probability above ``floor`` that are neither in the
  support nor boundary tokens (a truncation not applied); with a pooled tail, unlisted
  tokens may be tail tokens and are not extra.
* ``missing``: non-boundary support tokens with expected probability above ``floor`` absent
  from the report (or reported 0) although the report should hold them: every one when the
  list is complete (fewer entries than ``asked``, or ``asked`` None), else those more
  probable than the least probable reported support token (by more than the boundary
  tolerance).
* ``max_abs``: ``max_i |r_i / R - e_i / E|`` over the compared tokens ``S`` (reported,
  non-boundary support), ``R = sum_S r``, ``E = sum_S e``: the distributions conditional on
  ``S``, the same whether the engine kept a boundary token or cut the list at ``n``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .params import BOUNDARY_RTOL, Expected

__all__ = ["ProcessedGap", "compare_processed"]


@dataclass(frozen=True)
class ProcessedGap:
    """See the module docstring. ``compared``: the size of ``S``."""

    max_abs: float
    extra: tuple[int, ...]
    missing: tuple[int, ...]
    compared: int


def compare_processed(
    reported: Mapping[int, float],
    expected: Expected,
    *,
    asked: int | None = None,
    floor: float = 0.0,
) -> ProcessedGap:
    """Compare ``reported`` (token -> probability after the engine's processing) with
    ``expected``. Raises ``ValueError`` on a reported probability that is not finite or is
    outside [0, 1]."""
    probs: dict[int, float] = {}
    for token, value in reported.items():
        v = float(value)
        if not (math.isfinite(v) and 0.0 <= v <= 1.0 + 1e-6):
            raise ValueError(f"reported probability of token {token} is {v!r}")
        probs[int(token)] = v
    listed = set(expected.probs) | set(expected.excluded)
    extra = sorted(
        t
        for t, v in probs.items()
        if v > floor
        and t not in expected.probs
        and t not in expected.boundary
        and (expected.tail == 0 or t in listed)
    )
    support = {t: p for t, p in expected.probs.items() if t not in expected.boundary and p > floor}
    shown = {t for t, v in probs.items() if v > 0}
    compared = [t for t in support if t in shown]
    complete = asked is None or len(probs) < asked
    if complete:
        missing = sorted(t for t in support if t not in shown)
    elif compared:
        least = min(support[t] for t in compared)
        missing = sorted(
            t for t in support if t not in shown and support[t] > least * (1 + BOUNDARY_RTOL)
        )
    else:
        missing = sorted(support)
    if not compared:
        return ProcessedGap(math.inf if support else 0.0, tuple(extra), tuple(missing), 0)
    r_total = sum(probs[t] for t in compared)
    e_total = sum(support[t] for t in compared)
    gap = max(abs(probs[t] / r_total - support[t] / e_total) for t in compared)
    return ProcessedGap(gap, tuple(extra), tuple(missing), len(compared))
