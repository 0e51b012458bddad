"""The records of stream-parity and endpoint-parity: what an item's and an aggregate's
``data`` hold, field by field (:mod:`...records` makes them plain for the JSON results and
reads them back for a merge).

Roles: ``prompt`` (:class:`ParityPrompt`, both sides generated and compared),
``incomplete`` (:class:`ParityIncomplete`, a side produced no output: its request failed,
or its path is one the target's probe found lacking), ``aggregate``
(:class:`ParityAggregate`, :class:`EndpointParityAggregate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...metrics.faults import Faults
from ...metrics.sameness import DivergenceUnit
from ...metrics.ties import TieDivergence
from ...records import OMIT_WHEN_EMPTY
from .spec import Endpoint, StreamMode


@dataclass(frozen=True)
class ParitySide:
    """One side of a parity item: what one mode (stream-parity) or one endpoint
    (endpoint-parity) generated. Its label is the key ``mode`` (:class:`StreamSide`) or
    ``endpoint`` (:class:`EndpointSide`)."""

    text: str
    """The generated text."""
    token_ids: list[int] | None
    """Its token ids where the server returns them (llama-server), else None."""
    finish_reason: str
    """Why generation stopped (``stop``, ``length``, ...)."""

    @property
    def label(self) -> str:
        """The mode or endpoint this side was generated through."""
        raise NotImplementedError


@dataclass(frozen=True)
class StreamSide(ParitySide):
    """A side of a stream-parity item."""

    mode: StreamMode
    """``non-streamed`` (the reference) or ``streamed`` (assembled from its chunks)."""

    @property
    def label(self) -> str:
        return self.mode


@dataclass(frozen=True)
class EndpointSide(ParitySide):
    """A side of an endpoint-parity item."""

    endpoint: Endpoint
    """The endpoint the prompt's messages went through."""
    prompt_text: str | None = None
    """The templated text sent (``completions`` only; the chat endpoints template on the
    server)."""

    @property
    def label(self) -> str:
        return self.endpoint


@dataclass(frozen=True)
class ParityPrompt:
    """The record of a parity item (role ``prompt``): one prompt generated two ways (a mode
    or endpoint against the reference one) and compared."""

    prompt_id: str
    target: str
    """The target's label (``adder@llama``)."""
    reference: StreamSide | EndpointSide
    """The reference side: non-streamed, or the first of the check's ``endpoints``."""
    other: StreamSide | EndpointSide
    """The side compared with it: streamed, or the item's endpoint."""
    match: bool
    """Whether the two outputs are the same (token ids where both have them, and text)."""
    first_divergence: int | None
    """Where they first differ (None: nowhere), in :attr:`divergence_unit`."""
    divergence_unit: DivergenceUnit | None
    """``token`` (over token ids) or ``char`` (over text); None when they match."""
    similarity: float | None
    """difflib ratio of the two texts, 1.0 for the same text; None in a record read back when
    it was not finite (a fault of the item says so)."""
    answers: list[str | None]
    """The extracted answers ``[reference, other]`` (None: none found, or no answer kind)."""
    flip: str | None
    """How the answers relate (a :class:`~..metrics.answers.FlipKind` value); None when the
    prompt has no answer kind."""
    logprob_drift: float | None
    """max |logprob difference| of the chosen tokens over the positions where both sides have
    the same token after the same prefix (all of them when the outputs match, those before
    the first divergence otherwise), where both report a logprob; None when not measured (a
    side without logprobs, no such position), and in a record read back when it was not
    finite (a fault of the item says so)."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Faults of either side's own output, an empty generation against the other side, a
    non-finite similarity or logprob drift (each a violation); absent from the JSON when
    none."""
    tie: TieDivergence | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first divergent token, labelled (:mod:`~pytest_infercheck.metrics.ties`: margins
    of the reference side, then the other); absent when the outputs do not diverge at a
    token (a match, a text-only difference)."""
    after_tie: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """Under ``fail_on: decisive``, what was judged of the output after a near-tie
    divergence (the other path continued from the reference's tokens), or why nothing was;
    absent otherwise."""


@dataclass(frozen=True)
class ParityIncomplete:
    """The record of a parity item (role ``incomplete``) where a side produced no output:
    its request failed (the item fails with the server's message) or its path is one the
    target's probe found lacking (``unsupported``: the item compares nothing)."""

    prompt_id: str
    target: str
    reference: str
    """The reference side's label (``non-streamed``, the first endpoint)."""
    other: str
    """The other side's label (``streamed``, the item's endpoint)."""
    failures: list[str] = field(default_factory=list)
    """The requests that failed, each with the server's message."""
    unsupported: list[str] = field(default_factory=list)
    """The sides not generated because the target's probe found their path lacking."""


@dataclass(frozen=True)
class ParityAggregate:
    """The record of a parity check x suite's aggregate (role ``aggregate``)."""

    target: str
    items: int
    """Items aggregated (selected ones under ``-k`` or ``--infercheck-shard``)."""
    n_match: int
    """Items whose two outputs are the same."""
    n_mismatch: int
    """Items that ran and whose outputs differ."""
    n_failed: int
    """Items that broke a threshold or errored."""
    n_flips: int
    """Items whose answers flipped (:attr:`~..metrics.answers.FlipKind.is_flip`:
    ``wrong_to_wrong`` and ``unchanged`` are not flips)."""
    n_errors: int
    """Items that could not run (a backend error)."""
    errors: dict[str, str]
    """By item name: its error message."""
    failed: list[str]
    """The names of the failed items, sorted."""
    engines: dict[str, dict[str, Any]]
    """By target label: the engine's identity (build, model path, ...)."""
    divergence_labels: dict[str, int] = field(
        default_factory=dict, metadata=OMIT_WHEN_EMPTY, kw_only=True
    )
    """The items' divergence labels counted (:attr:`ParityPrompt.tie`; absent in records
    made before labels)."""
    unsupported: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY, kw_only=True)
    """The items that compared nothing because a path they need is one the target's probe
    found lacking, sorted (:class:`ParityIncomplete`)."""


@dataclass(frozen=True)
class EndpointCounts:
    """One endpoint's items in an endpoint-parity aggregate."""

    items: int
    match: int
    """Items whose output is the same as the reference endpoint's."""
    failed: int
    """Items that broke a threshold or errored."""
    unsupported: int = field(default=0, metadata=OMIT_WHEN_EMPTY)
    """Items not compared: the endpoint is one the target's probe found lacking."""


@dataclass(frozen=True)
class EndpointParityAggregate(ParityAggregate):
    """The record of an endpoint-parity aggregate: :class:`ParityAggregate` and the counts
    per endpoint."""

    reference: Endpoint
    """The reference endpoint (the first of ``endpoints``)."""
    endpoints: dict[str, EndpointCounts]
    """By other endpoint: its counts."""


@dataclass
class EndpointParityContext:
    """What an endpoint-parity aggregate takes besides its items' records (fields of
    :class:`EndpointParityAggregate`)."""

    target: str
    reference: Endpoint
    """The reference endpoint (the first of ``endpoints``)."""
    engines: dict[str, dict[str, Any]]
