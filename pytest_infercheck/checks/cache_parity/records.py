"""cache-parity's records: what an item and the aggregate hold, field by field (plain data:
they cross xdist and go into the JSON results as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ...metrics.degenerate import DegenerateScan
from ...metrics.faults import Faults
from ...metrics.ties import TieDivergence
from ...records import OMIT_WHEN_EMPTY

Hit = Literal["hit", "no-hit", "unreported"]
ReferenceKind = Literal["uncached", "first-request"]


def hit_of(cached_tokens: int | None) -> Hit:
    """``hit`` when the engine reported cached prompt tokens, ``no-hit`` for 0,
    ``unreported`` for None."""
    if cached_tokens is None:
        return "unreported"
    return "hit" if cached_tokens > 0 else "no-hit"


@dataclass
class ScenarioResult:
    """One scenario of a prompt, against its reference."""

    scenario: str
    exercised: bool
    """False: the scenario was not exercised, for a reason known before any request
    (:attr:`note` says which); nothing was compared."""
    note: str | None = None
    """Why not exercised, or what set it up (``after 5 prompts of 40 tokens``)."""
    match: bool | None = None
    """Same tokens and text as the reference; None when not compared."""
    first_divergence: int | None = None
    divergence_unit: str | None = None
    max_logprob_diff: float | None = None
    """``max_t |lp_ref[t] - lp[t]|`` where the tokens agree; None without logprobs."""
    text: str | None = None
    """The scenario's output (None when not compared)."""
    truncated: bool = False
    """Its tokens are a strict, non-empty prefix of the reference's."""
    cached_tokens: int | None = None
    """Prompt tokens the engine reported reused from its cache for this request."""
    hit: Hit | None = None
    """From :attr:`cached_tokens`: ``hit``, ``no-hit`` or ``unreported``."""
    reference: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The text of the scenario's own reference when it is not the prompt's (multi-turn)."""
    companion: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The other prompt the scenario sent (the prefix-sharing sibling, the first turn)."""
    first_turn: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Multi-turn's composed conversation: its first turn's answer, uncached (written into
    the conversation)."""
    first_turn_cached: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """... and that first turn's answer through the cache."""
    first_turn_match: bool | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Whether the two are the same (tokens and text)."""
    first_turn_logprob_diff: float | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """``max_t |lp_uncached[t] - lp_cached[t]|`` of the first turn where its tokens agree."""
    error: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Why it could not be compared: one of its requests (or the reference's) failed, with
    the server's message (a violation: the item fails)."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    degenerate: DegenerateScan = field(default_factory=DegenerateScan)
    """The degenerate findings of the generations it read (its output, and its own
    reference), by the one reading of every generation
    (:func:`~pytest_infercheck.metrics.consistency.read_generation`)."""


@dataclass
class CacheParityPrompt:
    """The record of one prompt's item (role ``prompt``)."""

    prompt_id: str
    target: str
    reference_kind: str
    """``uncached`` (the engine's uncached request) or ``first-request`` (an engine with no
    way around its cache: sent before every other request of this check for the prompt)."""
    reference_text: str
    reference_token_ids: list[int] | None
    reference_cached_tokens: int | None
    scenarios: list[ScenarioResult]
    reference_faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    reference_cold: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """How the reference was shown cold (``the reference cold by an uncached request``,
    ``the reference sent first, 0 cached tokens reported``)."""
    reference_error: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Why there is no reference: its request failed (the server's message)."""
    notes: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """What the item says besides its findings (``logprobs not compared: ...``)."""


@dataclass
class ScenarioCounts:
    """One scenario over the prompts of a check x suite."""

    compared: int = 0
    differ: int = 0
    """Compared prompts with a violation in this scenario."""
    no_hit: int = 0
    """Compared prompts that expected a hit and got 0 cached tokens."""
    unreported: int = 0
    """Compared prompts whose cache hits the engine did not report."""
    not_exercised: int = 0
    failed: int = 0
    """Prompts where a request of the scenario (or the reference) failed."""


@dataclass
class CacheParityAggregate:
    """The record of a cache-parity check x suite (role ``aggregate``)."""

    target: str
    prompts: int
    parity_prompts: int
    """Prompts without a violation."""
    reference_kind: str | None
    scenarios: dict[str, ScenarioCounts]
    engines: dict[str, dict[str, Any]]
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)


@dataclass
class CacheParityContext:
    """What the aggregate takes besides the items' records."""

    target: str
    engines: dict[str, dict[str, Any]]
