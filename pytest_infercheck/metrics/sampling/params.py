"""The inputs and the expected distribution of a sampling check, and their validation."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BOUNDARY_RTOL", "Expected", "SamplingParams"]

BOUNDARY_RTOL = 1e-4
"""Relative tolerance within which a token's inclusion in a truncated support is numerical
noise (engines compute in float32 / bfloat16, sort with ties in any order): see
:class:`Expected`."""


@dataclass(frozen=True)
class SamplingParams:
    """The sampling parameters under test. ``None`` (and ``top_k`` 0, ``top_p`` 1, ``min_p``
    0) means the truncation is not applied: the caller sends the neutral value to an engine
    whose default would truncate (llama-server: ``top_k`` 40, ``top_p`` 0.95, ``min_p``
    0.05; see ``backends/params.py`` ``NEUTRAL``).

    ``temperature`` > 0 (0 is greedy decoding, not a distribution); ``top_k`` >= 0;
    ``0 < top_p <= 1``; ``0 <= min_p <= 1``. Raises ``ValueError`` otherwise."""

    temperature: float
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None


@dataclass(frozen=True)
class Expected:
    """The distribution an engine should sample from at one position.

    ``probs``: token id -> probability, the support only (every value > 0). ``tail``: the
    pooled probability of the tokens the reference did not list (0 with a full vocabulary, or
    when the truncation excludes them all); ``sum(probs) + tail == 1``.

    ``boundary``: tokens whose membership of the support is within numerical noise, by the
    rule (``r`` = :data:`BOUNDARY_RTOL`):

    * top-k: ``|p_i - p_(k)| <= r * p_(k)``, ``p_(k)`` the k-th largest probability (a tie at
      the k-th place is broken in any order);
    * top-p: ``|C_i - top_p| <= r * top_p`` where ``C_i`` is the probability of the tokens
      ranked strictly above token ``i`` (the engines keep ``i`` iff ``C_i < top_p``), or
      ``|C_i + p_i - top_p| <= r * top_p`` (the crossing point itself is in the noise);
    * min-p: ``|p_i - min_p * p_max| <= r * min_p * p_max``.

    A boundary token may or may not be in ``probs``; :func:`~.fit.goodness_of_fit` drops the
    samples of boundary tokens and tests the rest against ``probs`` restricted to the
    non-boundary support, renormalised: that conditional distribution is the same whether the
    engine kept a boundary token or not (truncation renormalises proportionally).

    ``excluded``: tokens the reference listed that the truncation removed; with ``tail`` > 0
    a sampled token neither in ``probs``, ``boundary`` nor ``excluded`` counts in the tail.
    """

    probs: dict[int, float]
    boundary: frozenset[int] = frozenset()
    tail: float = 0.0
    excluded: frozenset[int] = field(default_factory=frozenset)
