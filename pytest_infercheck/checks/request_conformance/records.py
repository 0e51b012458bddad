"""The records of request-conformance: what its items and its aggregate keep (JSON, reports
and merges read them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ObservedAnswer:
    """What one answer to a probe held."""

    mode: str
    text: str
    finish_reason: str
    tokens: int | None
    """Tokens returned: ids (end-of-sequence included), else logprob entries; None: neither."""
    completion_tokens: int | None
    prompt_tokens: int | None
    choices: int = 1


@dataclass
class ConformanceItem:
    """The record of one prompt x probe (role ``probe``)."""

    prompt_id: str
    probe: str
    target: str
    asked: dict[str, Any]
    """The probe's request parameters beyond the greedy defaults (empty when not sent)."""
    expected: str
    """A conforming answer, in words (empty when the probe was not sent)."""
    answers: list[ObservedAnswer]
    findings: list[str] = field(default_factory=list)
    reference: str | None = None
    """The greedy reference's text."""
    notes: list[str] = field(default_factory=list)
    not_sent: str | None = None
    """Why the probe was not sent: ``not exercised: ...`` (decided from the matrix) or
    ``unsupported: ...`` (the readiness probe); None when it was."""


@dataclass
class ConformanceAggregate:
    """The record of a request-conformance check x suite."""

    target: str
    items: int
    probes: dict[str, dict[str, int]]
    """Per probe: ``conforming``, ``failed`` and ``not sent`` (unsupported or not exercised)
    items."""
    engines: dict[str, dict[str, Any]]
