"""Holm's step-down procedure across the items of one check."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["holm"]


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which hypotheses Holm's step-down rejects at family-wise level ``alpha``, in the
    order given."""
    raise NotImplementedError
