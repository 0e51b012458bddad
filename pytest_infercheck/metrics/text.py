"""Comparison of two generations: where they diverge, how similar they are, how bad it is."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from enum import Enum

__all__ = ["Severity", "first_divergence", "severity", "similarity"]

MINOR_THRESHOLD = 0.8
"""Similarity at or above which a non-identical pair of generations is ``minor``."""
MODERATE_THRESHOLD = 0.5
"""Similarity at or above which a non-identical pair of generations is ``moderate``."""


def first_divergence(a: Sequence[object], b: Sequence[object]) -> int | None:
    """Index of the first position where the token ids of ``a`` and ``b`` differ.

    If one sequence is a strict prefix of the other, that is the length of the shorter one;
    ``None`` if the sequences are identical.
    """
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    if len(a) == len(b):
        return None
    return min(len(a), len(b))


def similarity(a: str, b: str) -> float:
    """``difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()``, i.e. ``2 M / (|a| +
    |b|)`` with ``M`` the number of matched characters; two empty strings give 1.0."""
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class Severity(str, Enum):
    """How far a test generation drifted from the baseline generation."""

    IDENTICAL = "identical"
    MINOR = "minor"
    MODERATE = "moderate"
    SEVERE = "severe"

    def __str__(self) -> str:
        return self.value


def severity(identical: bool, similarity: float) -> Severity:
    """Tier of a divergence: ``identical`` if the generations are identical, else ``minor``
    if ``similarity >= 0.8``, ``moderate`` if ``similarity >= 0.5``, else ``severe``."""
    if identical:
        return Severity.IDENTICAL
    if similarity >= MINOR_THRESHOLD:
        return Severity.MINOR
    if similarity >= MODERATE_THRESHOLD:
        return Severity.MODERATE
    return Severity.SEVERE
