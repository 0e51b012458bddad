"""The records of tokenization: what an item's and an aggregate's ``data`` hold, field by
field. Roles: ``prompt`` (:class:`TokenizationPrompt`), ``incomplete``
(:class:`TokenizationIncomplete`: a side's request failed, nothing was compared),
``aggregate`` (:class:`TokenizationAggregate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...records import OMIT_WHEN_EMPTY
from .spec import Source


@dataclass(frozen=True)
class TokenSideRecord:
    """One side's tokenization of the prompt."""

    target: str
    """The target's label (``adder@llama``)."""
    source: Source
    """Where the ids come from: the backend's ``render`` (mlx-lm's tokenizer, llama-server's
    ``/tokenize``), the server's ``/tokenize`` endpoint, only a count from ``usage``, or
    ``none`` (no count either)."""
    text: str | None
    """The rendered text (None where the server renders it unseen)."""
    ids: list[int] | None
    """The prompt's token ids (None: count only)."""
    count: int | None
    """The number of prompt tokens (``len(ids)``, or the server's count)."""
    leading_special: int = 0
    """Leading special tokens (BOS ...) found when the ids differ (0 when not asked)."""


@dataclass(frozen=True)
class WindowRow:
    """A token position from the first difference on, on both sides (None past an end)."""

    position: int
    reference_id: int | None
    reference_piece: str | None
    other_id: int | None
    other_piece: str | None


@dataclass(frozen=True)
class TokenizationPrompt:
    """The record of a tokenization item (role ``prompt``): one prompt, the reference and one
    other target."""

    prompt_id: str
    reference: TokenSideRecord
    other: TokenSideRecord
    status: str
    """``identical``, ``count-only`` (equal counts, ids not compared) or ``differs``."""
    cause: str | None
    """Why it differs (a :class:`~..metrics.tokenization.Cause` value), None otherwise."""
    allowed: bool
    """The difference is a tokenizer property the check allows (the item passes)."""
    first_difference: int | None
    """The first differing token position (None: identical, or counts only)."""
    text_difference: int | None
    """The first differing character of the rendered texts (``template`` only)."""
    explanation: str
    """The verdict in words."""
    window: list[WindowRow] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """The tokens from the first difference on, both sides (absent when identical)."""
    unsupported: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """What a side's probe found lacking (a server without ``/tokenize``: its ids were not
    asked for, its count was); absent when nothing."""


@dataclass(frozen=True)
class TokenizationIncomplete:
    """The record of a tokenization item (role ``incomplete``) where a side's request
    failed (its render, ``/tokenize``, the count): nothing was compared, and the item fails
    with the server's message."""

    prompt_id: str
    reference: str
    """The reference target's label."""
    other: str
    """The other target's label."""
    failures: list[str] = field(default_factory=list)
    """The requests that failed, each with the server's message."""


@dataclass(frozen=True)
class SideCounts:
    """One other target's items in an aggregate."""

    items: int
    identical: int
    count_only: int
    differing: int
    errors: int
    incomplete: int = field(default=0, metadata=OMIT_WHEN_EMPTY)
    """Items whose request failed (:class:`TokenizationIncomplete`)."""


@dataclass(frozen=True)
class TokenizationAggregate:
    """The record of a tokenization check x suite's aggregate (role ``aggregate``)."""

    target: str
    """The reference target's label."""
    items: int
    """Items aggregated (prompt x other target)."""
    identical: int
    count_only: int
    """Items where only prompt token counts were compared, and were equal."""
    differing: int
    """Items whose tokenizations differ (allowed ones included)."""
    allowed: int
    """Differing items whose cause is an allowed tokenizer property (they pass)."""
    by_cause: dict[str, int]
    """Differing items by cause."""
    n_errors: int
    errors: dict[str, str]
    """By item name: its error message."""
    failed: list[str]
    """The names of the failed items, sorted."""
    sides: dict[str, SideCounts]
    """By other target's label in item ids: its counts."""
    engines: dict[str, dict[str, Any]]
    """By target label: the engine's identity (``observed.tokenize`` says whether an
    OpenAI-compatible server has ``/tokenize``)."""
    incomplete: int = field(default=0, metadata=OMIT_WHEN_EMPTY)
    """Items that compared nothing: a side's request failed (:class:`TokenizationIncomplete`)."""
