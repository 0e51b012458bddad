"""What a goodness-of-fit test could have seen: the detectable total-variation distance."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["detectable_tv"]


def detectable_tv(
    n: int, cells: Sequence[float], alpha: float, *, power: float = 0.8, hidden: float = 0.0
) -> float:
    """The smallest total-variation distance every alternative at that distance is detected
    at with probability >= ``power`` by a test at level ``alpha`` with ``n`` samples over
    ``cells`` (expected probabilities of the test's cells)."""
    raise NotImplementedError
