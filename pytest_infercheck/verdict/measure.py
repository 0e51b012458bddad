"""Measures: what a gate reads, each a value or :class:`Unmeasured` with the reason.

A kind's evidence for an item (its ``gather`` facet) and its aggregate's summary name their
measures in a mapping, ``{"kl_mean": 0.012, "same_top_rate": Unmeasured("method
top-k-lower-bound: no argmax at the positions")}``; the framework's gates
(:mod:`.gate`) read them by name. A measure is never left out or ``None``: a gate whose
measure is missing would silently never apply, which is the failure this module exists to
prevent (``max_kl: not measured: method text, backend 'x' has logprobs: false``).

A value is a ``float``, a :class:`Reading` (a float with a qualifier that a violation must
repeat: ``lower bound``, ``estimate``), or a yes/no finding: a ``bool`` or a :class:`Finding`
(with what was found, such as where two outputs differ).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Unmeasured:
    """A measure that could not be measured for this item (or suite), and why, in words a
    user can act on: ``method text: backend 'vmlx' returns no logprobs``."""

    reason: str


@dataclass(frozen=True)
class Reading:
    """A measured float with what it is: ``qualifier`` is said beside the number wherever a
    gate reports it (``mean KL (lower bound) 0.31 > max_kl 0.05``)."""

    value: float
    qualifier: str = ""


@dataclass(frozen=True)
class Finding:
    """A yes/no measure with what was found: ``Finding(False, "differ at token 3: 5 vs 7")``
    (judged by a ``true`` gate; its detail is the violation's text)."""

    ok: bool
    detail: str = ""


MeasureValue = float | bool | Reading | Finding | Unmeasured
"""One measure of an item or a suite."""
Measures = Mapping[str, MeasureValue]
"""The measures of an item's evidence or an aggregate's summary, by name."""


def number(value: MeasureValue) -> float | None:
    """The float of a numeric measure (a :class:`Reading`'s value); None for a bool or an
    :class:`Unmeasured`."""
    if isinstance(value, Reading):
        return value.value
    if isinstance(value, bool | Finding | Unmeasured):
        return None
    return float(value)


def qualifier(value: MeasureValue) -> str:
    """`` (lower bound)`` for a qualified reading, else ``""``."""
    return f" ({value.qualifier})" if isinstance(value, Reading) and value.qualifier else ""


def measured_or(value: float | None, reason: str) -> float | Unmeasured:
    """``value``, or :class:`Unmeasured` with ``reason`` when it is None."""
    return Unmeasured(reason) if value is None else value


def is_finite(value: MeasureValue) -> bool:
    """Whether a numeric measure is finite (a bool or an unmeasured value counts as finite:
    it is judged otherwise)."""
    n = number(value)
    return n is None or math.isfinite(n)
