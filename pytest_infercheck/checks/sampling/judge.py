"""The ``sampling`` judge facet: an item's evidence to its record (pure). Its findings are
the gates' (:mod:`.spec`: ``alpha`` reads a position's ``fit``, ``seed`` a seed item's
``seed``, :mod:`.evidence`); the framework adds the failed requests."""

from __future__ import annotations

from typing import Any

from ...verdict.measure import Unmeasured
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import Analysis, PositionEvidence, SeedEvidence
from .records import SampledToken, SamplingPosition, SamplingSeed
from .spec import SamplingThresholds

SHOWN_TOKENS = 12


def judge(plan: ItemPlan, evidence: Any, thresholds: SamplingThresholds) -> Judged:
    if isinstance(evidence, SeedEvidence):
        return Judged(seed_record(evidence))
    return Judged(position_record(evidence))


def position_record(e: PositionEvidence) -> SamplingPosition:
    record = SamplingPosition(
        prompt_id=e.prompt_id,
        target=e.target,
        reference=e.reference,
        engine=e.engine,
        params=e.params,
        position=e.position,
        context=e.context,
        samples=sum(e.counts.values()),
        alpha=e.alpha,
        family=e.family,
    )
    a = e.analysis
    if isinstance(a, Unmeasured):
        record.not_measured = a.reason
        return record
    record.statistic = a.fit.statistic
    record.dof = a.fit.dof
    record.p_value = a.fit.p_value
    record.detectable_tv = a.fit.detectable_tv
    record.support = len(set(a.expected.probs) | set(a.expected.boundary))
    record.boundary = sorted(a.expected.boundary)
    record.outside_support = list(a.fit.outside_support)
    record.pooled = len(a.fit.pooled)
    record.tokens = tokens_of(e, a)
    return record


def tokens_of(e: PositionEvidence, a: Analysis) -> list[SampledToken]:
    """The most expected tokens, then any drawn outside the support."""
    n = sum(e.counts.values())
    shown = [t for t in a.expected.probs if n * a.expected.probs[t] >= 0.05 or e.counts.get(t)]
    order = sorted(shown, key=lambda t: -a.expected.probs[t])[:SHOWN_TOKENS]
    order += [t for t in a.fit.outside_support if t not in order][:SHOWN_TOKENS]
    return [
        SampledToken(
            t,
            e.pieces.get(t),
            e.counts.get(t, 0),
            None if t in a.expected.boundary else n * a.expected.probs.get(t, 0.0),
        )
        for t in order
    ]


def seed_record(e: SeedEvidence) -> SamplingSeed:
    alone = {tuple(o) for o in e.alone}
    both = alone | {tuple(o) for o in e.together}
    return SamplingSeed(
        prompt_id=e.prompt_id,
        target=e.target,
        params=e.params,
        seed=e.seed,
        alone_distinct=len(alone),
        together_distinct=len(both),
        seeds=len(e.seeds),
        seeds_distinct=len({tuple(o) for o in e.seeds.values()}),
        coincidence=e.coincidence,
        outputs=[list(o) for o in sorted(both)][:8],
    )
