"""The records of the ``sampling`` kind: what its items and its aggregate keep (JSON,
reports, merges read them; field names and shapes are stable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SampledToken:
    """One token of a position's table: drawn ``count`` times, ``expected`` times expected
    (``samples`` x its expected probability; None for a boundary token)."""

    token: int
    text: str | None
    count: int
    expected: float | None


@dataclass
class SamplingPosition:
    """The record of one prompt x parameter set x position (role ``position``)."""

    prompt_id: str
    target: str
    reference: str
    engine: str
    """Whose documented order of temperature and truncations the expectation follows."""
    params: dict[str, Any]
    position: int
    context: list[int]
    """Greedy tokens teacher-forced before the position."""
    samples: int
    """Tokens drawn (the ones returned)."""
    alpha: float
    family: int
    """``m``: the statistical items of the check x suite (the item's level is alpha/m)."""
    statistic: float | None = None
    """G (Williams-corrected); None when nothing was compared."""
    dof: int | None = None
    p_value: float | None = None
    detectable_tv: float | None = None
    """The smallest total-variation distance from the expected that this item detects with
    80% power at alpha/m: what a pass could have seen."""
    support: int | None = None
    """Tokens in the expected support (boundary tokens included)."""
    boundary: list[int] = field(default_factory=list)
    outside_support: list[int] = field(default_factory=list)
    pooled: int = 0
    """Tokens pooled into one cell for expected counts below 5."""
    tokens: list[SampledToken] = field(default_factory=list)
    """The most drawn or expected tokens, most expected first (at most 12)."""
    not_measured: str | None = None


@dataclass
class SamplingSeed:
    """The record of a prompt's seed item (role ``seed``)."""

    prompt_id: str
    target: str
    params: dict[str, Any]
    seed: int
    alone_distinct: int
    together_distinct: int
    seeds: int
    seeds_distinct: int
    coincidence: float | None
    """Bound on the chance that the distinct seeds all give one output."""
    outputs: list[list[int]] = field(default_factory=list)
    """The distinct outputs of the repeated seed (alone and at once)."""


@dataclass
class SamplingAggregate:
    """The record of a sampling check x suite (role ``aggregate``)."""

    target: str
    positions: int
    """Statistical items aggregated."""
    compared: int
    """Of them, those with a test (not unmeasured)."""
    alpha: float
    holm_rejected: list[str]
    """Items Holm's step-down rejects at alpha over the compared ones."""
    min_p_value: float | None
    max_detectable_tv: float | None
    """The largest detectable TV of the compared items: every one of them would have seen a
    departure this large (80% power)."""
    seeds: int
    """Seed items aggregated."""
    engines: dict[str, dict[str, Any]]
