"""cache-parity: an engine's prompt cache must not change what it generates.

Per prompt (one item, ``cache-parity[<target>]::<suite>::<prompt id>``), on one target, a
cold **reference** is generated, then each **scenario** generates the prompt again through
the engine's cache and is compared with it. The facets:

- :mod:`.spec`: the options, the thresholds and their gates;
- :mod:`.gather`: every request, ordered so each reference is cold (uncached where the
  engine has such a request, else sent before anything of the check that could warm it),
  failed requests recorded, never judged;
- :mod:`.evidence` and :mod:`.compare`: what was gathered and the measures the gates read;
- :mod:`.judge`: pure: an item's findings and record;
- :mod:`.summarize`: pure: the aggregate from the items' records;
- :mod:`.present`: text, properties, views, the terminal table.
"""

from __future__ import annotations

from ..framework.kind import CheckKind, SpecFacet
from ..framework.target import target_label
from .gather import CacheParityGather
from .judge import judge
from .present import PRESENT
from .records import CacheParityAggregate, CacheParityContext, CacheParityPrompt
from .spec import GATES, HARNESS, CacheParitySpec, CacheParityThresholds, unmeasurable
from .summarize import summarize

CACHE_PARITY = CheckKind(
    name="cache-parity",
    spec=SpecFacet(
        options=CacheParitySpec,
        thresholds=CacheParityThresholds,
        gates=GATES,
        harness=HARNESS,
        label=target_label,
        context=CacheParityContext,
        records={"prompt": CacheParityPrompt, "aggregate": CacheParityAggregate},
        unmeasurable=unmeasurable,
    ),
    gather=CacheParityGather,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)
