"""What request-conformance's gather facet returns for one item: the prompt's greedy
reference, the probe's request and every answer to it (streamed and not), and how the
gathering went. No measures: every finding is the judge's rule (no thresholds)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...backends.base import Generation
from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue
from .probes import Asked, Reference


@dataclass
class Answer:
    """One answer to the probe's request: ``mode`` (``non-streamed``, ``streamed``) and the
    generation (its other choices in ``others``)."""

    mode: str
    generation: Generation


@dataclass
class ConformanceEvidence:
    """One prompt x probe (see :mod:`.probes`). ``reference`` is None when the reference
    could not be had (its failure is in ``conduct``); ``asked`` None when the probe was not
    sent (unsupported or not exercised: in ``conduct``). ``prompt_tokens``: the prompt's
    token count as the engine tokenizes it (None: unknown, ``prompt_note`` says why).
    ``eos_id``: the end-of-sequence id the reference ended on, where the engine gives ids."""

    prompt_id: str
    probe: str
    target: str
    reference: Reference | None = None
    generation: Generation | None = None
    """The greedy reference as the engine answered it (its logprobs are judged too)."""
    asked: Asked | None = None
    answers: list[Answer] = field(default_factory=list)
    prompt_tokens: int | None = None
    prompt_note: str | None = None
    eos_id: int | None = None
    notes: list[str] = field(default_factory=list)
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        return {}
