"""cache-pollution: one bad request must not change anyone else's answers.

The suite's prompts are generated once, one at a time, as the reference ("before"). Each
item then sends one hostile request (see :mod:`...backends.hostile`: context overflow,
invalid UTF-8, special tokens in the prompt, ``max_tokens: 0``, a client that disconnects
mid-stream), checks that the server is alive (its health endpoint), and generates the
reference prompts again, one at a time. What the server answered to the hostile request is
recorded, not judged; an item fails when the server is dead afterwards, any reference output
changed or carries a fault, or a reference request failed (with the server's message). Items
run in order, so later items also see earlier hostile requests. This is the class of bug
where one request corrupts a shared KV or prompt cache, a slot or a batch for every request
after it. The facets: :mod:`.spec`, :mod:`.gather`, :mod:`.evidence`, :mod:`.judge`,
:mod:`.summarize`, :mod:`.present`.
"""

from __future__ import annotations

from ...specs import KindThresholds
from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import target_label
from .gather import CachePollutionGather
from .judge import changed_outputs, hostile_violations, judge
from .present import PRESENT, summary_lines
from .records import (
    CachePollutionAggregate,
    CachePollutionContext,
    ChangedOutput,
    HostileRecord,
)
from .spec import GATES, HARNESS, HOSTILE_KINDS, CachePollutionSpec, plan
from .summarize import summarize

CACHE_POLLUTION = CheckKind(
    name="cache-pollution",
    spec=SpecFacet(
        options=CachePollutionSpec,
        thresholds=KindThresholds,
        gates=GATES,
        harness=HARNESS,
        label=target_label,
        context=CachePollutionContext,
        records={"hostile": HostileRecord, "aggregate": CachePollutionAggregate},
        plan=plan,
    ),
    gather=CachePollutionGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)

__all__ = [
    "CACHE_POLLUTION",
    "HOSTILE_KINDS",
    "CachePollutionAggregate",
    "CachePollutionContext",
    "ChangedOutput",
    "HostileRecord",
    "changed_outputs",
    "hostile_violations",
    "summary_lines",
]
