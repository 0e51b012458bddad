"""The inputs and the expected distribution of a sampling check, and their validation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["BOUNDARY_RTOL", "TAIL", "Expected", "SamplingParams", "finite_map", "pooled"]

BOUNDARY_RTOL = 1e-4
"""Relative tolerance within which a token's inclusion in a truncated support is numerical
noise (engines compute in float32 or lower and sort ties in any order): see
:class:`Expected`."""

TAIL = -1
"""The token id that stands for the pooled tail (the tokens a top-k reference did not list)
in :attr:`~.fit.Fit.pooled`."""


@dataclass(frozen=True)
class SamplingParams:
    """The sampling parameters under test. ``None`` (and ``top_k`` 0, ``top_p`` 1, ``min_p``
    0) means the truncation is not applied: the caller sends the neutral value to an engine
    whose default would truncate (llama-server: ``top_k`` 40, ``top_p`` 0.95, ``min_p``
    0.05; see ``backends/params.py`` ``NEUTRAL``).

    ``temperature`` > 0 and finite (0 is greedy decoding, not a distribution); ``top_k`` >= 0;
    ``0 < top_p <= 1``; ``0 <= min_p <= 1``. Raises ``ValueError`` otherwise."""

    temperature: float
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
            raise ValueError(f"temperature must be finite and > 0, got {t!r}")
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0
        ):
            raise ValueError(f"top_k must be an integer >= 0, got {self.top_k!r}")
        if self.top_p is not None and not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and not (math.isfinite(self.min_p) and 0 <= self.min_p <= 1):
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p!r}")

    @property
    def k(self) -> int | None:
        """``top_k`` when it truncates (None: off)."""
        return self.top_k if self.top_k else None

    @property
    def p(self) -> float | None:
        """``top_p`` when it truncates (None: off)."""
        return self.top_p if self.top_p is not None and self.top_p < 1 else None

    @property
    def m(self) -> float | None:
        """``min_p`` when it truncates (None: off)."""
        return self.min_p if self.min_p else None


@dataclass(frozen=True)
class Expected:
    """The distribution an engine should sample from at one position.

    ``probs``: token id -> probability, the support only (every value > 0). ``tail``: the
    pooled probability of the tokens the reference did not list (0 with a full vocabulary, or
    when the truncation excludes them all); ``sum(probs) + tail == 1``.

    ``boundary``: tokens whose membership of the support is within numerical noise, by the
    rule (``r`` = :data:`BOUNDARY_RTOL`, ``p_i`` the probability of token ``i`` in the
    distribution the truncation is applied to, ranked ``p_(1) >= p_(2) >= ...``):

    * top-k: ``|p_i - p_(k)| <= r * p_(k)`` or ``|p_i - p_(k+1)| <= r * p_(k+1)`` for a token
      on the other side of the cut (a tie across the k-th place is broken in any order);
    * top-p: ``|C_i - top_p| <= r * top_p``, ``C_i`` the probability of the tokens ranked
      above ``i`` (every engine here keeps ``i`` iff ``C_i < top_p``), and ties across the
      cut as for top-k;
    * min-p: ``|p_i - min_p * p_(1)| <= r * min_p * p_(1)``.

    A boundary token may or may not be in ``probs`` (the exact-arithmetic decision);
    :func:`~.fit.goodness_of_fit` drops the samples of boundary tokens and tests the rest
    against ``probs`` restricted to the non-boundary support, renormalised: that conditional
    distribution is the same whether the engine kept a boundary token or not (truncation
    renormalises proportionally).

    ``excluded``: tokens the reference listed that the truncation removed (not boundary). With
    ``tail`` > 0 a sampled token in none of ``probs``, ``boundary`` and ``excluded`` counts in
    the tail; with ``tail`` 0 it is outside the support.
    """

    probs: dict[int, float]
    boundary: frozenset[int] = frozenset()
    tail: float = 0.0
    excluded: frozenset[int] = field(default_factory=frozenset)


def finite_map(values: Mapping[int, float], what: str) -> dict[int, float]:
    """``values`` as ``{int: float}``, raising ``ValueError`` naming ``what`` and the token on
    a NaN or infinite value (the kind reports it as unmeasured)."""
    out: dict[int, float] = {}
    for token, value in values.items():
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"{what} of token {token} is not finite ({v!r})")
        out[int(token)] = v
    return out


def pooled(expected: Expected, groups: Sequence[Sequence[int]]) -> Expected:
    """``expected`` with each group of tokens the draws cannot tell apart (a server that
    returns text only, where several tokens have one text) made one cell, named by the
    group's first id: its probability the sum of its members'; in ``boundary`` when a
    member is (its draws are left out of the test, as a boundary token's are); in
    ``excluded`` when every member is excluded and none is in the support or the boundary.
    A group of one id changes nothing. ``sum(probs) + tail`` stays 1."""
    probs = dict(expected.probs)
    boundary = set(expected.boundary)
    excluded = set(expected.excluded)
    for group in groups:
        if len(group) < 2:
            continue
        head, members = group[0], set(group)
        mass = sum(probs.pop(t, 0.0) for t in members)
        in_boundary = bool(members & boundary)
        in_excluded = bool(members & excluded)
        boundary -= members
        excluded -= members
        if mass > 0:
            probs[head] = mass
        if in_boundary:
            boundary.add(head)
        elif mass == 0 and in_excluded:
            excluded.add(head)
    return Expected(probs, frozenset(boundary), expected.tail, frozenset(excluded))
