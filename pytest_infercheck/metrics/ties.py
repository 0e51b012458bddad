"""Tie-aware divergences: whether two outputs part at a near-tie or at a decisive choice.

Two greedy outputs that agree up to position ``t`` and differ at ``t`` saw the same prefix at
``t``; each side chose its own token there from its own distribution. With ``a`` the
baseline's token and ``b`` the test side's at ``t``:

- **margin** of the baseline: ``m_base = log p_base(a) - log p_base(b)``; of the test side:
  ``m_test = log p_test(b) - log p_test(a)``, each under its own distribution at ``t`` (nats).
  From a full-vocabulary row the margin is exact. From a top-k map (a server's top
  logprobs) it is exact when the other side's token is in the map; when it is not, the other
  token's log-probability is at most the smallest of the map, so ``m >= log p(own) -
  min(top-k)``: that **lower bound** is recorded, and :attr:`Margin.exact` is False.
- **noise floor**: ``max_s |log p_base(x_s) - log p_test(x_s)|`` over the positions ``s``
  before ``t`` (all compared positions when the outputs do not differ), where both sides
  chose the same token ``x_s`` after the same prefix: how far the two engines' numbers move
  where they agree. None when no position was compared or a side has no chosen logprobs.
- **label** (:func:`divergence_label`) at ``tie_margin`` (nats): ``near-tie`` when every
  margin is exact and ``|m| <= tie_margin``; ``decisive`` when some margin exceeds it (an
  exact ``|m| > tie_margin``, or a lower bound ``> tie_margin``); ``unknown`` otherwise (a
  side without logprobs at ``t``, a lower bound within ``tie_margin``, a non-finite margin).
  A greedy side's margin is >= 0 up to the rounding of a separate scoring pass, so ``|m|``
  treats such a negative margin as the near-tie it is.

The default ``tie_margin`` is 0.01 nats: float16 KV caches and flash-attention reorderings
of a float32 model were measured to move the chosen tokens' logprobs by up to ~1.4e-3 nats,
so floating-point reordering alone flips only tokens within a few times that of each other;
a bfloat16 engine moves logprobs by up to ~0.1 and may set more.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

DivergenceLabel = Literal["near-tie", "decisive", "unknown"]
LABELS: tuple[DivergenceLabel, ...] = ("near-tie", "decisive", "unknown")
"""Every label, in the order aggregates count them."""
DEFAULT_TIE_MARGIN = 0.01
"""Nats (see the module docstring)."""


@dataclass(frozen=True)
class Margin:
    """One side's margin at the first divergence (nats): exact, or a lower bound."""

    value: float
    exact: bool = True
    """False: the other side's token was outside this side's top-k, ``value`` is
    ``log p(own) - min(top-k)``, a lower bound of the margin."""


def full_row_margin(row: Sequence[float], own: int, other: int) -> Margin:
    """``row[own] - row[other]`` of a full-vocabulary logprob row (a list or a numpy row),
    in float64: exact."""
    return Margin(float(row[own]) - float(row[other]))


def top_k_margin(
    top: Mapping[Hashable, float] | None,
    own: Hashable,
    other: Hashable,
    *,
    own_logprob: float | None = None,
    other_logprob: float | None = None,
) -> Margin | None:
    """The margin from a top-k map (keyed by id or text): ``log p(own) - log p(other)``,
    each logprob given or read from ``top``; when ``other`` is not in ``top`` and not given,
    the lower bound ``log p(own) - min(top)``. None when ``log p(own)`` is not known."""
    top = top or {}
    own_lp = own_logprob if own_logprob is not None else top.get(own)
    if own_lp is None:
        return None
    other_lp = other_logprob if other_logprob is not None else top.get(other)
    if other_lp is not None:
        return Margin(float(own_lp) - float(other_lp))
    if not top:
        return None
    return Margin(float(own_lp) - min(float(v) for v in top.values()), exact=False)


def noise_floor(
    base_chosen: Sequence[float] | None, test_chosen: Sequence[float] | None, agreeing: int
) -> float | None:
    """``max |base_chosen[s] - test_chosen[s]|`` over ``s < agreeing`` (the positions where
    both sides chose the same token after the same prefix); NaN when any of those is NaN;
    None without positions or without a side's chosen logprobs."""
    if base_chosen is None or test_chosen is None:
        return None
    n = min(agreeing, len(base_chosen), len(test_chosen))
    if n <= 0:
        return None
    deltas = [
        abs(float(b) - float(t)) for b, t in zip(base_chosen[:n], test_chosen[:n], strict=True)
    ]
    return math.nan if any(math.isnan(d) for d in deltas) else max(deltas)


def divergence_label(
    diverged: bool, margins: Sequence[Margin | None], tie_margin: float = DEFAULT_TIE_MARGIN
) -> DivergenceLabel | None:
    """The label of a first divergence (see the module docstring); None when the outputs do
    not diverge."""
    if not diverged:
        return None
    if any(m is not None and not math.isfinite(m.value) for m in margins):
        return "unknown"
    if any(m is not None and (abs(m.value) if m.exact else m.value) > tie_margin for m in margins):
        return "decisive"
    if margins and all(m is not None and m.exact for m in margins):
        return "near-tie"
    return "unknown"


def count_labels(labels: Sequence[str | None]) -> dict[str, int]:
    """``{near-tie: n, decisive: m, unknown: k}`` over the labels of divergent items
    (None, no divergence, is not counted)."""
    return {label: sum(1 for x in labels if x == label) for label in LABELS}
