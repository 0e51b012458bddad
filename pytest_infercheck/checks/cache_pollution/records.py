"""cache-pollution's records: what an item and the aggregate hold, field by field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.faults import Faults
from ...metrics.sameness import DivergenceUnit
from ...records import OMIT_WHEN_EMPTY
from .spec import HostileKind


@dataclass(frozen=True)
class ChangedOutput:
    """A reference prompt whose output changed after a hostile request."""

    prompt_id: str
    before: str
    """Its text before any hostile request."""
    after: str
    """Its text after this one."""
    first_divergence: int | None
    """Where the two first differ, in :attr:`divergence_unit`."""
    divergence_unit: DivergenceUnit | None = None
    """``token`` (over token ids) or ``char`` (over text); absent in version 1 results."""


@dataclass(frozen=True)
class HostileRecord:
    """The record of a cache-pollution item (role ``hostile``): one hostile request, and
    the reference prompts generated again after it."""

    target: str
    """The target's label (``adder@llama``)."""
    hostile: HostileKind
    response: str
    """What the server answered to the hostile request, in a few words (recorded, not
    judged): ``HTTP 400 ...``, ``HTTP 200, closed after the first event``, ..."""
    alive: bool
    """Whether the server's health endpoint answered after it."""
    changed: list[ChangedOutput]
    """The reference prompts whose output changed (empty: none, or the server is dead)."""
    prompts: int
    """How many reference prompts there are."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of the reference outputs, before any hostile request and after this one, and
    outputs that became empty (each a violation); absent from the JSON when none."""
    failure: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Why reference prompts could not be generated around the request (the server was
    alive but a request failed, with its message: a violation); None, and absent from the
    JSON, when they were."""


@dataclass(frozen=True)
class CachePollutionAggregate:
    """The record of a cache-pollution check x suite's aggregate (role ``aggregate``)."""

    target: str
    n_hostile: int
    """Hostile requests sent (the selected items)."""
    n_dead: int
    """After how many of them the server was not alive."""
    n_polluted: int
    """After how many of them a reference output changed."""
    n_failed: int
    """Items that failed (dead, polluted, or the reference prompts failed)."""
    prompts: int
    """How many reference prompts the suite has."""
    responses: dict[str, str]
    """By hostile kind: what the server answered."""
    engines: dict[str, dict[str, Any]]
    """By target label: the engine's identity (build, model path, ...)."""


@dataclass
class CachePollutionContext:
    """What the aggregate takes besides the hostile items' records (fields of
    :class:`CachePollutionAggregate`)."""

    target: str
    prompts: int
    """How many reference prompts the suite has."""
    engines: dict[str, dict[str, Any]]
