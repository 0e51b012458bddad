"""structured-parity's evidence of one item: what the gather facet (:mod:`.gather`) brought
back for one prompt and one target, ready for the pure judge (:mod:`.judge`).

Each path's answer is the server's response as read (:class:`~pytest_infercheck.structured.
records.StructuredResponse`) or why there is none (:class:`~pytest_infercheck.structured.
results.NotAnswered`): ``unsupported`` (the target's probe found the path lacking),
``not exercised`` (the path cannot express the request, nothing sent), ``error`` (the
request failed: a :class:`~pytest_infercheck.verdict.conduct.RequestFailure` in
:attr:`StructuredEvidence.conduct` too, which fails the item) or ``malformed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...structured.records import Path, StructuredRequest, StructuredResponse
from ...structured.results import NotAnswered
from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue
from .records import RequestFacts


@dataclass(frozen=True)
class PathAnswer:
    """What one path of one target answered to the item's request."""

    target: str
    """The target's label (``tiny@llama``)."""
    path: Path
    answer: StructuredResponse | NotAnswered


@dataclass(frozen=True)
class PromptIds:
    """Across targets: whether both targets render the request to the same prompt ids
    (``same``: True, False, or None when not known) and the item's words for it."""

    same: bool | None
    text: str


@dataclass
class StructuredEvidence:
    """One item's evidence (see the module docstring)."""

    prompt_id: str
    target: str
    """The target's label (``tiny@vllm``)."""
    side: str
    """Its label in item ids and texts (``vllm``)."""
    reference_target: str
    """The first target's label."""
    reference_side: str
    """The first target's label in item ids and texts (``llama``)."""
    request: StructuredRequest
    """The request, as ``chat`` sends it (``chat-n2`` asks ``n: 2`` of it)."""
    facts: RequestFacts
    answers: list[PathAnswer]
    """This target's answer through each path, ``chat`` first."""
    reference_chat: PathAnswer | None = None
    """A target after the first: the first target's ``chat`` answer."""
    prompt_ids: PromptIds | None = None
    """A target after the first: whether the two render the request alike."""
    conduct: Conduct = field(default_factory=Conduct)
    measures: Mapping[str, MeasureValue] = field(default_factory=dict)
    """None: no gate of this kind reads a measure (:data:`.spec.GATES`)."""
