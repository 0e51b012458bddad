"""The records of the ``batch-invariance`` kind: what its items and its aggregate keep
(JSON, reports, merges read them; field names and shapes are stable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.degenerate import Degenerate
from ...metrics.faults import Faults
from ...metrics.past_tie import AfterTie
from ...metrics.ties import TieDivergence
from ...records import OMIT_WHEN_EMPTY


@dataclass
class AloneOutput:
    """The prompt generated alone: the reference of every trial."""

    text: str
    token_ids: list[int] | None
    """None when the backend gives no token ids."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of its own logprobs (each a violation); absent from the JSON when none."""
    degenerate: Degenerate | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Its degenerate stretch (:mod:`~pytest_infercheck.metrics.degenerate`), if any."""


@dataclass
class Trial:
    """One trial: the prompt (the needle) at ``position`` of a batch, against it alone."""

    trial: int
    """The trial's number (0, 1, ...)."""
    position: int
    """The needle's index in the batch."""
    batch: list[str]
    """The batch's prompt ids in order; a companion repeated ``n`` times is ``id*n``."""
    match: bool
    """The needle's batched generation is the same as alone (token ids where both sides have
    them, and text); False when its request failed."""
    first_divergence: int | None
    """Where it leaves the alone output (in ``divergence_unit``); None when it matches or
    failed."""
    max_logprob_diff: float | None
    """``max_t |lp_alone[t] - lp_batch[t]|`` over the positions both share a token; None
    without logprobs (or when the request failed)."""
    text: str | None
    """The needle's batched output; None when its request failed."""
    divergence_unit: str | None = None
    """``token`` or ``char``; None when it matches or failed (absent in results version 1)."""
    error: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """``<exception type>: <message>`` when the batched request failed; the key is absent from
    the JSON otherwise ."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of the batched output: of its own logprobs, and an empty generation against the
    output alone (each a violation); absent from the JSON when none."""
    degenerate: Degenerate | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The batched output's degenerate stretch, if any."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first divergent token from the alone output, labelled (:mod:`~pytest_infercheck.
    metrics.ties`: margins of the alone output, then the batched one); absent when the
    tokens do not diverge (a match, a failed request, a text-only difference)."""
    after_tie: AfterTie | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Under ``fail_on: decisive``, a near-tie trial judged past its near-tie
    (:mod:`~pytest_infercheck.metrics.past_tie`: both outputs teacher-forced); absent
    otherwise."""


@dataclass
class BatchInvariancePrompt:
    """The record of one prompt's item (role ``prompt``): alone, then its trials."""

    prompt_id: str
    target: str
    seed: int
    """The check's seed: with the prompt id, it draws the trials' positions and companions."""
    alone: AloneOutput
    trials: list[Trial]
    batched_by: str
    """How the backend ran a batch (:func:`~.trials.batched_by`)."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The trials' divergence labels counted (:attr:`Trial.tie`); absent when no trial's
    tokens diverge."""


@dataclass
class BatchInvarianceAggregate:
    """The record of a batch-invariance check x suite (role ``aggregate``)."""

    target: str
    prompts: int
    """Prompts aggregated (the suite, or the shard's selection)."""
    invariant_prompts: int
    """Prompts whose item passed (no violation in any trial)."""
    rate: float
    """``invariant_prompts / prompts`` (0.0 for no prompts)."""
    trials: int
    """Trials over all prompts."""
    batched_by: str | None
    """How the backend ran a batch; None for no prompts."""
    engines: dict[str, dict[str, Any]]
    """The target's engine identity, by target label."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The trials' divergence labels counted over the prompts (absent in records made
    before labels)."""
