"""The ``batch-invariance`` judge facet: one prompt's evidence to its record and findings
(pure).

Findings (the framework adds the gate of :mod:`.spec` and the conduct rules, among them a
failed batched request): a fault of the output alone (once), then per trial its batched
output's faults (``fault``), its tokens differing from the alone run (``outputs-differ``),
and, where the check does not write ``logprob_tolerance``, its logprobs moving beyond the
default tolerance (or by NaN; ``logprob_tolerance``).

With ``fail_on: decisive``, a trial whose tokens part from the alone run at a ``near-tie``
is offered a :class:`~pytest_infercheck.verdict.waiver.Waiver` of its difference (source
``near-tie:trial <n>``), which applies only when the trial was judged past its near-tie
(:func:`~pytest_infercheck.metrics.past_tie.judge_after_tie`: the output alone and the
batched one, teacher-forced on the target) with no decisive disagreement after it;
otherwise the difference stands and the item says why. A decisive disagreement after the
near-tie is also a finding of its own (``decisive-after-tie``), named first.
"""

from __future__ import annotations

import dataclasses
import math

from ...metrics.past_tie import AfterTie, judge_after_tie
from ...verdict.gate import Violation
from ...verdict.waiver import Waiver
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import BatchInvarianceEvidence
from .records import Trial
from .spec import BatchInvarianceThresholds, tolerance_written
from .trials import scan, where

DECISIVE_RULE = "fail_on: decisive"


def judge(
    plan: ItemPlan, evidence: BatchInvarianceEvidence, thresholds: BatchInvarianceThresholds
) -> Judged:
    """The prompt's record (its trials with what followed a near-tie), its findings and
    its waivers (see the module docstring)."""
    record = evidence.record
    violations = [Violation(f.text, "fault") for f in record.alone.faults]
    waivers: list[Waiver] = []
    trials: list[Trial] = []
    for t in record.trials:
        w = where(t)
        violations += [Violation(f"{w}: {f.text}", "fault") for f in t.faults]
        after: AfterTie | None = None
        if t.error is None and not t.match:
            differs = (
                f"{w}: output differs from the prompt alone at {t.first_divergence}: "
                f"{record.alone.text!r} alone vs {t.text!r} batched"
            )
            if (
                thresholds.fail_on == "decisive"
                and t.tie is not None
                and t.tie.divergence_label == "near-tie"
            ):
                source = f"near-tie:trial {t.trial}"
                after = judge_after_tie(
                    [
                        ("the output alone", evidence.rescored_alone),
                        ("the batched output", evidence.rescored.get(t.trial)),
                    ],
                    t.tie.token,
                    thresholds.tie_margin,
                )
                if after.decisive_at is not None:
                    violations.append(Violation(f"{w}: {after.why}", "decisive-after-tie"))
                violations.append(Violation(differs, source))
                waivers.append(Waiver(DECISIVE_RULE, frozenset({source}), after.clean, after.why))
            else:
                violations.append(Violation(differs, "outputs-differ"))
        diff = t.max_logprob_diff
        limit = thresholds.logprob_tolerance
        if not tolerance_written(thresholds) and diff is not None and not diff <= limit:
            violations.append(
                Violation(
                    f"{w}: logprobs moved by {diff:.3g} "
                    f"{'> ' if math.isfinite(diff) else '(not finite): fails '}"
                    f"logprob_tolerance {limit}",
                    "logprob_tolerance",
                )
            )
        trials.append(dataclasses.replace(t, after_tie=after))
    judged = dataclasses.replace(record, trials=trials)
    return Judged(judged, violations, waivers, degenerate=scan(record))
