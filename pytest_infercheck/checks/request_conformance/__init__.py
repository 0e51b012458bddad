"""request-conformance: does the engine do what a request asks? Deterministic probes, one
item per prompt x probe: stop strings (one token, several, spanning a token boundary, split
across stream chunks; excluded from the text unless asked; ``finish_reason: stop``),
``max_tokens`` honoured exactly (``finish_reason: length``), ``usage`` counts,
``min_tokens`` and ``ignore_eos`` where the engine takes them, ``n`` choices, the number of
top logprobs asked; streamed and non-streamed answers alike (:mod:`.probes`).

A probe the engine's kind does not take is not exercised (from the matrix; written in
``probes:``, a collection error at its line); one its server refuses at the readiness probe
is ``unsupported``; any other refusal or error fails the item with the server's message.
Facets: :mod:`.spec`, :mod:`.gather`, :mod:`.evidence`, :mod:`.judge`, :mod:`.summarize`,
:mod:`.present`.
"""

from __future__ import annotations

from ...specs import KindThresholds
from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import TargetContext, target_label
from .gather import ConformanceGather
from .judge import judge
from .present import PRESENT
from .records import ConformanceAggregate, ConformanceItem
from .spec import GATES, HARNESS, RequestConformanceSpec, plan, refuse
from .summarize import summarize

REQUEST_CONFORMANCE = CheckKind(
    name="request-conformance",
    spec=SpecFacet(
        options=RequestConformanceSpec,
        thresholds=KindThresholds,
        gates=GATES,
        label=target_label,
        context=TargetContext,
        records={"probe": ConformanceItem, "aggregate": ConformanceAggregate},
        plan=plan,
        refuse=refuse,
        harness=HARNESS,
    ),
    gather=ConformanceGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)

__all__ = ["REQUEST_CONFORMANCE", "ConformanceAggregate", "ConformanceItem"]
