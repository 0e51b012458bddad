"""The records of the ``determinism`` kind: what its items and its aggregate keep (JSON,
reports, merges read them; field names and shapes are stable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.determinism import DistinctOutput
from ...metrics.faults import Faults
from ...records import OMIT_WHEN_EMPTY

SCORE_INTERVAL = "95% Wilson interval of the pooled share of runs equal to their modal"


@dataclass
class DeterminismPrompt:
    """The record of one prompt's item (role ``prompt``): its runs at temperature 0."""

    prompt_id: str
    target: str
    """The target's label (``q4@local``)."""
    runs: int
    """Runs made, failed ones included."""
    modal_share: float
    """Runs equal to the most frequent output / ``runs`` (a failed run counts against it)."""
    distinct: int
    """Distinct successful outputs."""
    errors: int
    """Failed runs."""
    error_messages: list[str]
    """``run <i>: <error>`` of each failed run."""
    first_divergences: list[int | None]
    """Per run: the first index (token, else character) where it leaves the modal output;
    None when it equals it or failed."""
    max_logprob_drift: float | None
    """Largest logprob spread at one position among runs with identical tokens; None when no
    two such runs expose logprobs."""
    outputs: list[DistinctOutput]
    """The distinct outputs, modal first, then by count and first appearance."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of the runs' own outputs (non-finite logprobs, logprobs that do not match their
    token, an empty generation among non-empty runs): each is a violation. The key is absent
    from the JSON when there are none."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The non-modal outputs' divergence labels counted (``{near-tie: 1, decisive: 0,
    unknown: 0}``, each output's in :attr:`DistinctOutput.tie`); absent when the runs do not
    diverge token by token."""


@dataclass
class DeterminismAggregate:
    """The record of a determinism check x suite (role ``aggregate``)."""

    target: str
    runs: int
    """Runs per prompt."""
    prompts: int
    """Prompts aggregated (the suite, or the shard's selection)."""
    deterministic_prompts: int
    """Prompts whose runs all succeeded and gave one output."""
    score: float
    """The determinism score: mean modal share over the prompts."""
    score_low: float
    """Lower bound of :attr:`interval`."""
    score_high: float
    """Upper bound of :attr:`interval`."""
    interval: str
    """What ``score_low``/``score_high`` bound (:data:`SCORE_INTERVAL`)."""
    errors: int
    """Failed runs over all prompts."""
    max_logprob_drift: float | None
    """The largest prompt's ``max_logprob_drift``; None when no prompt has one."""
    engines: dict[str, dict[str, Any]]
    """The target's engine identity, by target label."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The non-modal outputs' divergence labels counted over the prompts (absent in records
    made before labels)."""


@dataclass
class DeterminismContext:
    """What the aggregate takes besides the prompts' records (fields of
    :class:`DeterminismAggregate`)."""

    target: str
    runs: int
    engines: dict[str, dict[str, Any]]
