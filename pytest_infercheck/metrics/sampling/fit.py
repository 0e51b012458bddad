"""The goodness-of-fit test of sampled counts against an expected distribution."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .params import Expected

__all__ = ["MIN_EXPECTED", "Fit", "goodness_of_fit"]

MIN_EXPECTED = 5.0
"""Cells with an expected count below this are pooled."""


@dataclass(frozen=True)
class Fit:
    """The outcome of :func:`goodness_of_fit`.

    ``statistic``: G (Williams-corrected); ``dof``: cells - 1; ``p_value``: ``P(chi2(dof) >=
    G)``; ``pooled``: the tokens merged into one cell because their expected count was below
    5; ``outside_support``: sampled tokens with zero expected probability that are not
    boundary tokens (the check fails at once on any); ``detectable_tv``: the smallest total
    variation distance from the expected distribution that this test detects with 80%
    power at ``alpha`` (:func:`~.power.detectable_tv`); ``samples``: the counts' total."""

    statistic: float
    dof: int
    p_value: float
    pooled: tuple[int, ...]
    outside_support: tuple[int, ...]
    detectable_tv: float
    samples: int


def goodness_of_fit(
    counts: Mapping[int, int], expected: Expected, *, alpha: float = 0.001, power: float = 0.8
) -> Fit:
    """Test ``counts`` (token id -> times sampled) against ``expected``."""
    raise NotImplementedError
