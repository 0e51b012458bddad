"""The ``stress`` judge facet: one level's evidence to its record and findings (pure).

Findings: every fault of the level (non-finite latencies, empty generations, logprob
faults), whatever the thresholds (``fault``); the framework adds the gates of :mod:`.spec`
and the conduct rules.

With ``fail_on: decisive``, the outputs that leave their reference at a ``near-tie`` may
count as consistent, but only those judged past their near-tie
(:func:`~pytest_infercheck.metrics.past_tie.judge_after_tie`: the output and its reference
teacher-forced on the target, no later decisive disagreement): a
:class:`~pytest_infercheck.verdict.waiver.Waiver` of ``min_consistency`` that applies when
``(consistent + judged near-ties) / requests >= min_consistency``; otherwise the gate's
violation stands and the item says why (an output not scored, a decisive disagreement after
its near-tie).

With ``beside`` and ``logprob_tolerance`` not written, its default applies to the level's
``logprob_diff`` where logprobs were compared (a violation naming the request, its model and
token, and each model's largest difference); written, it is a gate of :mod:`.spec`.

The level's record carries its verdict (``violations``: what the framework will find, by
the same rules), so the terminal and HTML tables show it.
"""

from __future__ import annotations

import dataclasses
import math

from ...metrics.past_tie import AfterTie, judge_after_tie
from ...verdict.conduct import conduct_violations
from ...verdict.gate import Violation, judge_gates
from ...verdict.measure import Reading
from ...verdict.waiver import Waiver, apply_waivers
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import StressEvidence, logprob_reading
from .records import StressLevel
from .spec import GATES, StressThresholds, tolerance_written

DECISIVE_RULE = "fail_on: decisive"


def judge(plan: ItemPlan, evidence: StressEvidence, thresholds: StressThresholds) -> Judged:
    """The level's record, its findings and its waiver (see the module docstring)."""
    d = evidence.level
    violations = [Violation(f.text, "fault") for f in d.faults]
    diff, limit = d.logprob_diff, thresholds.logprob_tolerance
    if d.sides and not tolerance_written(thresholds) and diff is not None and not diff <= limit:
        reading = logprob_reading(d)
        where = reading.qualifier if isinstance(reading, Reading) else ""
        violations.append(
            Violation(
                f"logprobs moved by {diff:.3g} "
                f"{'> ' if math.isfinite(diff) else '(not finite): fails '}"
                f"logprob_tolerance {limit:g} ({where})",
                "logprob_tolerance",
            )
        )
    waivers: list[Waiver] = []
    mismatches = list(d.mismatches)
    if thresholds.fail_on == "decisive" and evidence.near_ties:
        afters = []
        for tie in evidence.near_ties:
            after = judge_after_tie(
                [
                    (f"{tie.prompt_id}'s reference", tie.reference),
                    (f"request {tie.request}", tie.output),
                ],
                tie.token,
                thresholds.tie_margin,
            )
            afters.append(after)
            if tie.slot is not None and tie.slot < len(mismatches):
                mismatches[tie.slot] = dataclasses.replace(mismatches[tie.slot], after_tie=after)
        waivers.append(consistency_waiver(d, afters, thresholds))
    everything = [
        *conduct_violations(evidence.conduct),
        *violations,
        *judge_gates(GATES, thresholds, evidence.measures, "item"),
    ]
    kept, _ = apply_waivers(everything, waivers)
    record = dataclasses.replace(d, mismatches=mismatches, violations=[v.text for v in kept])
    return Judged(record, violations, waivers, degenerate=d.degenerate)


def consistency_waiver(
    d: StressLevel, afters: list[AfterTie], thresholds: StressThresholds
) -> Waiver:
    """The waiver of ``min_consistency`` for the near-tie outputs judged past their
    near-tie (see the module docstring)."""
    n = d.requests
    clean = sum(a.clean for a in afters)
    counted = (d.consistent + clean) / n if n else 1.0
    limit = thresholds.min_consistency
    if counted >= limit:
        return Waiver(
            DECISIVE_RULE,
            frozenset({"min_consistency"}),
            True,
            f"{clean} outputs that leave their reference at a near-tie were judged past it by "
            f"teacher forcing and count as consistent: {d.consistent + clean}/{n} = "
            f"{counted:.3f} >= min_consistency {limit:g}",
        )
    unjudged = [a.why for a in afters if not a.clean]
    why = (
        f"counting the {clean} of {len(afters)} near-tie outputs judged past their near-tie, "
        f"consistency {counted:.3f} is still < min_consistency {limit:g}"
    )
    if unjudged:
        why += f"; {len(unjudged)} not: {unjudged[0]}"
    return Waiver(DECISIVE_RULE, frozenset({"min_consistency"}), False, why)
