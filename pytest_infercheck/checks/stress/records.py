"""The records of the ``stress`` kind: what its level items and its aggregate keep (JSON,
reports, merges read them; field names and shapes are stable). A reference and a level's
evidence cross between processes as JSON (:func:`~pytest_infercheck.records.plain_data` out,
:func:`~pytest_infercheck.records.load_record` back in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.degenerate import DegenerateScan
from ...metrics.faults import Faults
from ...metrics.past_tie import AfterTie
from ...metrics.sameness import DivergenceUnit
from ...metrics.ties import SideTokens, TieDivergence
from ...records import OMIT_WHEN_EMPTY, OMIT_WHEN_NONE
from ...tools import ToolCall


@dataclass
class Reference:
    """A prompt generated alone, one request at a time: what its outputs at every level are
    compared with."""

    text: str
    token_ids: list[int] | None
    """None when the backend gives no token ids."""
    finish_reason: str | None = None
    """Why it stopped (``stop``: its token ids end with the end-of-sequence token)."""
    token_texts: list[str] | None = None
    chosen_logprobs: list[float | None] | None = None
    """The reported logprobs of its tokens (None where not reported or not finite)."""
    top_logprobs: list[dict[str, float] | None] | None = None
    """Its top-k per token, keyed by ``top_keys``: token ids as strings (JSON object keys),
    which :meth:`side` turns back into ints, or token texts."""
    top_keys: str = "id"
    tool_calls: tuple[ToolCall, ...] = field(default=(), metadata=OMIT_WHEN_EMPTY)
    """The calls the server returned apart from the text (``Generation.tool_calls``);
    absent from the JSON when none."""

    def side(self) -> SideTokens:
        """The reference as a side of :func:`~pytest_infercheck.metrics.ties.tie_divergence`
        (top-k keyed by int ids again when ``top_keys`` is ``id``)."""
        top: list[Any] | None = self.top_logprobs
        if top is not None and self.top_keys == "id":
            top = [None if t is None else {int(k): v for k, v in t.items()} for t in top]
        return SideTokens(
            ids=self.token_ids,
            texts=self.token_texts,
            chosen=self.chosen_logprobs,
            top=top,
            top_keys=self.top_keys,
        )


@dataclass
class Mismatch:
    """An output of a level that differs from its reference (texts cut to
    :data:`~.measure.TEXT_CHARS`)."""

    prompt_id: str
    first_divergence: int | None
    """Where the output leaves the reference, in ``unit``."""
    unit: DivergenceUnit | None
    """``token`` (both sides have token ids) or ``char``."""
    reference: str
    output: str
    fault: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """``empty generation: ...`` when the output or its reference is empty and the other is
    not; None otherwise, and then absent from the JSON."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first divergent token, labelled (:mod:`~pytest_infercheck.metrics.ties`: margins
    of the reference, then the output); absent for a text-only divergence."""
    after_tie: AfterTie | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Under ``fail_on: decisive``, a near-tie output judged past its near-tie
    (:mod:`~pytest_infercheck.metrics.past_tie`); absent otherwise."""
    side: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """With ``beside``: the model whose request it is (the target's or a ``beside`` one);
    empty, and absent from the JSON, otherwise."""


@dataclass
class LogprobShift:
    """The largest ``|chosen logprob - its reference's|`` of a level: where it is."""

    delta: float
    request: int
    """The request's index in the level."""
    prompt_id: str
    token: int
    """The generated token's position (0: the first)."""
    side: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """With ``beside``: the model whose request it is."""


@dataclass
class SideCount:
    """With ``beside``: one model's requests of a level and how they fared."""

    requests: int
    consistent: int
    """Outputs equal to their reference (the model's output alone)."""
    logprob_diff: float | None = None
    """The largest ``|chosen logprob - its reference's|`` of its outputs (None: no output
    with logprobs on both)."""


@dataclass
class StressLevel:
    """The record of one concurrency level (role ``level``); see :mod:`.measure` for how
    each figure is measured."""

    target: str
    level: int
    """The concurrency level (``c<level>``)."""
    requests: int
    errors: dict[str, int]
    """Failed requests by kind (``http_503``, ``ReadTimeout``, ...), sorted by kind."""
    error_rate: float
    """Failed requests / ``requests``."""
    consistent: int
    """Outputs equal to their reference."""
    consistency: float
    """``consistent / requests`` (1.0 for no requests): an error counts as inconsistent."""
    flips: int
    """Outputs whose answer flipped against the reference's."""
    flip_rate: float
    """``flips / requests``."""
    latency_p50_s: float | None
    """Median latency of the successful requests; None when none succeeded."""
    latency_p95_s: float | None
    tokens_per_s: float | None
    """Tokens of the successful requests / the level's span; None when the engine reports no
    token counts (or none succeeded)."""
    achieved_concurrency: float | None
    """Time-weighted mean of requests in flight; None for a zero span."""
    max_in_flight: int
    mismatches: list[Mismatch]
    """The first :data:`~.measure.MAX_MISMATCHES` inconsistent outputs."""
    violations: list[str] = field(default_factory=list)
    """Why the level failed (its item's violations: :mod:`.judge`)."""
    measured_by: str = ""
    """The process that measured the level: an xdist worker (``gw0``) or ``main``."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Non-finite latencies and empty generations (see :mod:`.measure`): each is a
    violation. Absent from the JSON when there are none."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The divergence labels of every inconsistent output (not only the listed
    ``mismatches``) counted; absent when none diverges at a token."""
    degenerate: DegenerateScan | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The degenerate findings of the level's outputs (:mod:`~pytest_infercheck.metrics.
    degenerate`); absent from a record of an older version."""
    logprob_diff: float | None = field(default=None, metadata=OMIT_WHEN_NONE)
    """The largest ``|chosen logprob - its reference's|`` over every successful output's
    tokens before its first divergence (:mod:`.measure`); None, and absent from the JSON,
    when no output and its reference both carry logprobs (0.0 is kept: bit-equal)."""
    logprob_worst: LogprobShift | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Where :attr:`logprob_diff` is."""
    sides: dict[str, SideCount] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """With ``beside``: each model's requests by its name (the target's first); absent
    otherwise."""


@dataclass
class StressAggregate:
    """The record of a stress check x suite (role ``aggregate``): every level, whichever
    process measured it."""

    target: str
    levels: list[StressLevel]
    engines: dict[str, dict[str, Any]]
    """The target's engine identity, by target label."""
    divergence_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """The levels' divergence labels summed (absent in records made before labels)."""
