"""Tie-aware divergences: whether two outputs part at a near-tie or at a decisive choice.

Two greedy outputs that agree up to position ``t`` and differ at ``t`` saw the same prefix at
``t``; each side chose its own token there from its own distribution. With ``a`` the
baseline's token and ``b`` the test side's at ``t``:

- **margin** of the baseline: ``m_base = log p_base(a) - log p_base(b)``; of the test side:
  ``m_test = log p_test(b) - log p_test(a)``, each under its own distribution at ``t`` (nats).
  From a full-vocabulary row the margin is exact. From a top-k map (a server's top
  logprobs) it is exact when the other side's token is in the map; when it is not, the other
  token's log-probability is at most the smallest of the map, so ``m >= log p(own) -
  min(top-k)``: that **lower bound** is recorded, and :attr:`Margin.exact` is False. A map
  keyed by token text is read only through a text that names one token
  (:func:`~.keys.ambiguous_key`): two byte-fallback tokens both read ``\ufffd``, so the
  value under such a key may be another token's. Through an ambiguous key a margin is
  unknown (None) or a lower bound (:func:`top_k_margin`), never exact.
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
from typing import Any, Literal

from .keys import ambiguous_key, collided

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
    the lower bound ``log p(own) - min(top)``. None when ``log p(own)`` is not known.

    A text key is read only when it names one token (:func:`~.keys.ambiguous_key`: not
    U+FFFD, a lone surrogate, ``bytes:``, empty, nor a text two entries of the row carried):

    - ``own`` and ``other`` the same text (two tokens the texts cannot tell apart) and
      ``other``'s logprob not given: None;
    - ``own`` ambiguous and its logprob not given: None (``top[own]`` may be another token's);
    - ``other`` ambiguous, not given and in ``top``: the value there may be another token's,
      so no exact margin: ``log p(own) - top[other]`` when the map holds the largest logprob
      of the entries that carried the text (:class:`~.keys.TextTopK`), else ``log p(own) -
      max(top)``: each is at least ``log p(other)``, so a lower bound (``exact`` False);
    - ``other`` ambiguous and not in ``top``: no entry carried that text, so the other token
      is outside the top-k and ``log p(own) - min(top)`` is a lower bound as for any key.
    """
    top = top or {}
    if isinstance(own, str) and own == other and other_logprob is None:
        return None  # two tokens, one text: top[other] is as much own's as other's
    own_lp = own_logprob
    if own_lp is None and not ambiguous_key(own, top):
        own_lp = top.get(own)
    if own_lp is None:
        return None
    if other_logprob is not None:
        return Margin(float(own_lp) - float(other_logprob))
    other_lp = top.get(other)
    if other_lp is not None and not ambiguous_key(other, top):
        return Margin(float(own_lp) - float(other_lp))
    if other_lp is not None:
        above = other_lp if other in collided(top) else max(float(v) for v in top.values())
        return Margin(float(own_lp) - float(above), exact=False)
    if not top:
        return None
    return Margin(float(own_lp) - min(float(v) for v in top.values()), exact=False)


@dataclass(frozen=True)
class SideTokens:
    """What one side's generation exposes at its tokens, for :func:`pair_margins`: token ids
    and texts (None when not given), chosen logprobs (an element None where not reported),
    top-k maps keyed by ``top_keys`` (``id`` or ``text``), full-vocabulary rows (a list or a
    numpy array; None when not kept)."""

    ids: Sequence[int] | None = None
    texts: Sequence[str] | None = None
    chosen: Sequence[float | None] | None = None
    top: Sequence[Mapping[Hashable, float] | None] | None = None
    top_keys: str = "id"
    full: Any = None


def _token(side: SideTokens, at: int, keys: str) -> Hashable | None:
    tokens = side.ids if keys == "id" else side.texts
    return tokens[at] if tokens is not None and at < len(tokens) else None


def _side_margin(own: SideTokens, other: SideTokens, at: int) -> Margin | None:
    """``own``'s margin at ``at`` from its own numbers: its full row when it has one and both
    ids are known, else its top-k map with its chosen logprob (:func:`top_k_margin`), keyed
    by ids or texts as the map is."""
    mine, theirs = _token(own, at, "id"), _token(other, at, "id")
    if own.full is not None and at < len(own.full) and mine is not None and theirs is not None:
        return full_row_margin(own.full[at], int(mine), int(theirs))  # type: ignore[call-overload]
    mine, theirs = _token(own, at, own.top_keys), _token(other, at, own.top_keys)
    if mine is None or theirs is None:
        return None
    top = own.top[at] if own.top is not None and at < len(own.top) else None
    chosen = own.chosen[at] if own.chosen is not None and at < len(own.chosen) else None
    return top_k_margin(top, mine, theirs, own_logprob=chosen)


def pair_margins(a: SideTokens, b: SideTokens, at: int) -> tuple[Margin | None, Margin | None]:
    """Both sides' margins at their first divergent token ``at`` (same prefix before it),
    each under its own distribution: ``a``'s ``log p_a(a's token) - log p_a(b's token)`` and
    ``b``'s likewise, from full rows where a side has them, else from its top-k (exact, or a
    lower bound); None for a side without logprobs at ``at``."""
    return _side_margin(a, b, at), _side_margin(b, a, at)


def reported_noise_floor(
    a: Sequence[float | None] | None, b: Sequence[float | None] | None, agreeing: int
) -> float | None:
    """:func:`noise_floor` over the positions before ``agreeing`` where both sides reported a
    logprob (None elements, an engine's unreported positions, are left out)."""
    if a is None or b is None:
        return None
    n = min(agreeing, len(a), len(b))
    pairs = [(x, y) for x, y in zip(a[:n], b[:n], strict=True) if x is not None and y is not None]
    return noise_floor([x for x, _ in pairs], [y for _, y in pairs], len(pairs))


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


@dataclass
class TieDivergence:
    """A labelled first divergent token: the record field of a kind that compares two
    outputs of its own (determinism's runs, batch-invariance's trials, ...)."""

    token: int
    """The first divergent token's index."""
    divergence_label: str
    """:func:`divergence_label` at the check's ``tie_margin``."""
    margins: list[float | None]
    """The two sides' margins there (nats, :func:`pair_margins`); None for a side without
    logprobs there."""
    margins_exact: bool
    """False when a margin is a lower bound from a top-k."""
    noise_floor: float | None
    """:func:`reported_noise_floor` over the tokens before it."""


def tie_divergence(
    a: SideTokens, b: SideTokens, at: int, tie_margin: float = DEFAULT_TIE_MARGIN
) -> TieDivergence:
    """The labelled divergence of ``a`` and ``b`` at their first divergent token ``at``."""
    margins = pair_margins(a, b, at)
    return TieDivergence(
        token=at,
        divergence_label=divergence_label(True, margins, tie_margin) or "unknown",
        margins=[None if m is None else m.value for m in margins],
        margins_exact=all(m is None or m.exact for m in margins),
        noise_floor=reported_noise_floor(a.chosen, b.chosen, at),
    )


def describe_tie(tie: TieDivergence, sides: tuple[str, str]) -> str:
    """``near-tie at token 3 (margins: modal 0.0012, run 0.0007 nats; noise floor 4e-05)``;
    ``>=`` marks lower bounds."""
    bound = "" if tie.margins_exact else " (>= : a lower bound from a top-k)"
    margins = ", ".join(
        f"{side} {'n/a' if m is None else f'{m:.4g}'}"
        for side, m in zip(sides, tie.margins, strict=True)
    )
    floor = "n/a" if tie.noise_floor is None else f"{tie.noise_floor:.4g}"
    return (
        f"{tie.divergence_label} at token {tie.token} "
        f"(margins: {margins} nats{bound}; noise floor {floor})"
    )


def count_labels(labels: Sequence[str | None]) -> dict[str, int]:
    """``{near-tie: n, decisive: m, unknown: k}`` over the labels of divergent items
    (None, no divergence, is not counted)."""
    return {label: sum(1 for x in labels if x == label) for label in LABELS}
