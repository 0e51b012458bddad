"""The bound a measured false-failure rate is held to: the exact one-sided binomial bound.

A test of size at most ``alpha`` judged ``n`` times fails ``X ~ Binomial(n, s)`` times with
``s <= alpha``; :func:`binomial_upper` is the smallest ``c`` with ``P(Binomial(n, alpha) <= c)
>= confidence``, so a test of size <= alpha exceeds it with probability below ``1 -
confidence``. Used by ``tests/unit/test_sampling_size.py`` and the false-failure integration
tests."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pytest_infercheck.checks.sampling.evidence import PositionEvidence
from pytest_infercheck.metrics.sampling import chi2_sf
from pytest_infercheck.verdict.measure import Finding, Unmeasured

CONFIDENCE = 0.999
"""The confidence of the bound every false-failure test states."""


def binomial_upper(n: int, alpha: float, confidence: float = CONFIDENCE) -> int:
    """The smallest ``c`` with ``P(Binomial(n, alpha) <= c) >= confidence`` (the pmf summed
    in log space: ``log C(n, x) + x log alpha + (n - x) log(1 - alpha)``)."""
    if not (0 < alpha < 1 and 0 < confidence < 1 and n >= 1):
        raise ValueError(f"bad arguments ({n}, {alpha}, {confidence})")
    total = 0.0
    for x in range(n + 1):
        log_pmf = (
            math.lgamma(n + 1)
            - math.lgamma(x + 1)
            - math.lgamma(n - x + 1)
            + x * math.log(alpha)
            + (n - x) * math.log1p(-alpha)
        )
        total += math.exp(log_pmf)
        if total >= confidence:
            return x
    return n


LEVELS = (0.05, 0.001)
"""The levels a false-failure test judges each item at: 0.05, where 1,600 judgements have
the power to see an excess over alpha, and the default 0.001."""


@dataclass
class Tally:
    """Judgements of faithful draws at each of :data:`LEVELS`: ``failed`` by the kind's own
    judge (its valid p-value), ``chi_square`` by the chi-square p-value of the same
    statistic (the p-value the kind used before: for comparison only)."""

    judged: int = 0
    failed: dict[float, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    chi_square: dict[float, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    details: list[str] = field(default_factory=list)
    by_item: dict[str, list[int]] = field(default_factory=dict)
    """Per item (prompt, parameters, position): [judged, failed at each level]."""

    def add(self, evidence: PositionEvidence) -> None:
        """Judge ``evidence`` (family 1) at every level."""
        self.judged += 1
        mine = self.by_item.setdefault(
            f"{evidence.prompt_id} {evidence.params} @{evidence.position}", [0] * (1 + len(LEVELS))
        )
        mine[0] += 1
        for index, level in enumerate(LEVELS, 1):
            e = replace(evidence, alpha=level, family=1)
            fit = e.fit
            assert isinstance(fit, Finding), fit
            a = e.analysis
            assert not isinstance(a, Unmeasured), a
            statistical = fit.ok or "sampled distribution differs" in fit.detail
            old = a.fit.dof > 0 and chi2_sf(a.fit.statistic, a.fit.dof) < level
            if not fit.ok:
                mine[index] += 1
                self.failed[level] += 1
                self.details.append(f"{level}: {e.prompt_id} {e.params}: {fit.detail}")
            if not statistical or old:
                self.chi_square[level] += 1

    def bound(self, level: float) -> int:
        """The failures a test of size ``level`` stays within (:func:`binomial_upper`)."""
        return binomial_upper(self.judged, level)

    def line(self, name: str) -> str:
        """``name: at 0.05 81 of 1600 (0.0506; chi-square 0.0656), bound 108 (99.9%); ...``."""
        parts = [
            f"at {level:g} {self.failed[level]} of {self.judged} "
            f"({self.failed[level] / self.judged:.4f}; chi-square "
            f"{self.chi_square[level] / self.judged:.4f}), bound {self.bound(level)}"
            for level in LEVELS
        ]
        items = ", ".join(f"{k}: {v[1:]}/{v[0]}" for k, v in self.by_item.items())
        return (
            f"{name}: {'; '.join(parts)} ({CONFIDENCE:.1%} one-sided binomial)\n  by item: {items}"
        )
