"""structured-parity's records: an item's (role ``prompt``) and the aggregate's, with what
the aggregate needs besides its items' records. Their field names are the JSON results'
keys (reports, goldens and merges read them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...records import OMIT_WHEN_EMPTY
from ...structured.results import Comparison, PathResult


@dataclass(frozen=True)
class RequestFacts:
    """What the item's request held (the same for every path and target)."""

    prompt: str
    """The last user turn."""
    turns: int
    tools: list[str]
    """The offered functions' names."""
    tool_choice: str | None
    """``auto``, ``none``, ``required``, or a named function's canonical JSON; None: unset."""
    response_format: str | None
    """The JSON schema's canonical JSON; None: unset."""
    max_tokens: int
    filled: list[int] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """``generate`` turns (1-based) filled in with the first target's ``chat`` answer."""


@dataclass(frozen=True)
class StructuredParityPrompt:
    """The record of an item (role ``prompt``): one prompt through one target's paths."""

    prompt_id: str
    target: str
    """The target's label (``tiny@vllm``)."""
    side: str
    """Its label in item ids and texts (``vllm``)."""
    reference_target: str
    """The first target's label (this target's for the first)."""
    request: RequestFacts
    results: list[PathResult]
    """This target's answer through each path, ``chat`` first."""
    comparisons: list[Comparison]
    """Each other path against ``chat``; for a target after the first, then its ``chat``
    against the first target's."""
    reference_chat: PathResult | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first target's ``chat`` answer (a target after the first)."""
    prompt_ids: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Across targets: whether the request's prompt ids agree (``same``, ``differ at
    position 12``, ``unknown: ...``)."""


@dataclass(frozen=True)
class TargetCounts:
    """One target's items in an aggregate."""

    items: int
    passed: int
    differences: int
    """Differences that fail (not allowed)."""
    invalid: int
    unsupported: int
    """Answers recorded ``unsupported`` (the target's probe found the path lacking)."""
    errors: int
    """Errored items and answers that failed (a refused or failed request, malformed)."""


@dataclass(frozen=True)
class PathCounts:
    """One path over the items of an aggregate (``cross-target``: the comparisons of a
    target's ``chat`` with the first target's)."""

    answered: int = 0
    unsupported: int = 0
    """Not sent: the target's probe found the path lacking."""
    failed: int = 0
    """Refused or failed requests and malformed answers."""
    compared: int = 0
    """Comparisons with its reference that had both answers."""
    differing: int = 0
    """Compared ones with a difference that fails."""
    not_exercised: int = 0
    """Not sent: the path cannot express the request (``response_format`` on messages)."""


@dataclass(frozen=True)
class StructuredParityAggregate:
    """The record of a structured-parity check x suite (role ``aggregate``)."""

    target: str
    """The first target's label."""
    targets: list[str]
    sides: list[str]
    """Each target's label in item ids, in order."""
    items: int
    passed: int
    failed: list[str]
    """The names of the failed items, sorted."""
    n_errors: int
    """Items without a record (the target is not a structured chat server, a
    ``generate`` turn could not be filled in)."""
    errors: dict[str, str]
    """By item name: why it produced no record."""
    failed_answers: int
    """Answers that failed: a refused or failed request or a malformed answer (each fails
    its item)."""
    differences: dict[str, int]
    """Differences found by field (allowed ones too), in
    :data:`~pytest_infercheck.structured.results.FIELDS` order."""
    allowed: int
    """Differences that passed by ``allow``."""
    invalid: dict[str, int]
    """Validity faults by kind."""
    unsupported: dict[str, str]
    """By ``target path``: what the target's probe saw of the lacking path."""
    paths: dict[str, PathCounts]
    per_target: dict[str, TargetCounts]
    """By target label in item ids."""
    engines: dict[str, dict[str, Any]]


@dataclass
class StructuredParityContext:
    """What the aggregate needs besides its items' records (fields of
    :class:`StructuredParityAggregate`, so a merge reads it back from a shard's
    aggregate)."""

    target: str
    """The first target's label."""
    targets: list[str]
    sides: list[str]
    """Each target's label in item ids, in order."""
    engines: dict[str, dict[str, Any]]
