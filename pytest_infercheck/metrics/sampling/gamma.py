"""The chi-square distribution without scipy."""

from __future__ import annotations

__all__ = ["chi2_isf", "chi2_sf", "ncx2_sf", "regularized_gamma_q"]


def regularized_gamma_q(a: float, x: float) -> float:
    """``Q(a, x) = Gamma(a, x) / Gamma(a)``, the regularized upper incomplete gamma."""
    raise NotImplementedError


def chi2_sf(x: float, dof: int) -> float:
    """``P(X > x)`` for ``X ~ chi2(dof)``: ``Q(dof / 2, x / 2)``."""
    raise NotImplementedError


def chi2_isf(q: float, dof: int) -> float:
    """The ``x`` with ``chi2_sf(x, dof) == q`` (the critical value at level ``q``)."""
    raise NotImplementedError


def ncx2_sf(x: float, dof: int, nc: float) -> float:
    """``P(X > x)`` for a noncentral chi-square with noncentrality ``nc``."""
    raise NotImplementedError
