"""The ``determinism`` judge facet: one prompt's evidence to its record and findings (pure).

Findings (the framework adds the gates of :mod:`.spec` and the conduct rules):

- each fault of a run's own output (``fault``): ``non-finite logprob in run 3 at positions
  2, 5 (NaN)``, ``logprob does not match its token ...``, ``empty generation: run 2
  generated no tokens while run 0 generated 3``;
- distinct outputs (``outputs-differ``): ``2 distinct outputs in 10 runs (modal share
  0.9000)``.

With ``fail_on: decisive``, distinct outputs whose every non-modal output parts from the
modal one at a ``near-tie`` are offered a :class:`~pytest_infercheck.verdict.waiver.Waiver`
(source ``near-tie``), which applies only when each was judged past its near-tie
(:func:`~pytest_infercheck.metrics.past_tie.judge_after_tie`: the modal output and the
other, teacher-forced on the target) with no decisive disagreement after it; otherwise the
finding stands and the item says why. A decisive disagreement after the near-tie is also a
finding of its own (``decisive-after-tie``), named first.
"""

from __future__ import annotations

import dataclasses

from ...metrics.past_tie import AfterTie, judge_after_tie
from ...metrics.ties import count_labels
from ...verdict.gate import Violation
from ...verdict.waiver import Waiver
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import DeterminismEvidence
from .records import DeterminismPrompt
from .spec import DeterminismThresholds

DECISIVE_RULE = "fail_on: decisive"
NEAR_TIE = "near-tie"
"""The source of the distinct-outputs finding that a near-tie waiver may cover."""


def judge(
    plan: ItemPlan, evidence: DeterminismEvidence, thresholds: DeterminismThresholds
) -> Judged:
    """The prompt's record, its findings and its waiver (see the module docstring)."""
    s = evidence.summary
    violations = [Violation(f.text, "fault") for f in s.faults]
    outputs = list(s.outputs)
    waivers: list[Waiver] = []
    labels = s.divergence_labels
    if s.distinct > 1:
        text = f"{s.distinct} distinct outputs in {s.runs} runs (modal share {s.modal_share:.4f})"
        all_near = len(labels) == s.distinct - 1 and all(x == "near-tie" for x in labels)
        if thresholds.fail_on == "decisive" and all_near:
            after = {
                n: judge_after_tie(
                    [
                        ("the modal output", evidence.rescored.get(0)),
                        (f"output #{n + 1}", evidence.rescored.get(n)),
                    ],
                    output.tie.token,
                    thresholds.tie_margin,
                )
                for n, output in enumerate(outputs)
                if n > 0 and output.tie is not None
            }
            outputs = [
                dataclasses.replace(o, after_tie=after.get(n)) for n, o in enumerate(outputs)
            ]
            violations += [
                Violation(
                    f"output #{n + 1} against the modal output: {a.why}", "decisive-after-tie"
                )
                for n, a in after.items()
                if a.decisive_at is not None
            ]
            violations.append(Violation(text, NEAR_TIE))
            waivers.append(near_tie_waiver(after))
        else:
            violations.append(Violation(text, "outputs-differ"))
    record = DeterminismPrompt(
        prompt_id=evidence.prompt_id,
        target=evidence.target,
        runs=s.runs,
        modal_share=s.modal_share,
        distinct=s.distinct,
        errors=s.errors,
        error_messages=evidence.messages,
        first_divergences=s.first_divergences,
        max_logprob_drift=s.max_logprob_drift,
        outputs=outputs,
        faults=s.faults,
        divergence_labels=count_labels(labels) if labels else {},
    )
    return Judged(record, violations, waivers, degenerate=s.degenerate)


def near_tie_waiver(after: dict[int, AfterTie]) -> Waiver:
    """The waiver of the near-tie finding: it applies only when every non-modal output was
    judged past its near-tie with no decisive disagreement after it (one found there is also
    a finding of its own)."""
    unjudged = [f"output #{n + 1}: {a.why}" for n, a in after.items() if not a.clean]
    if unjudged:
        return Waiver(DECISIVE_RULE, frozenset({NEAR_TIE}), False, "; ".join(unjudged))
    return Waiver(
        DECISIVE_RULE,
        frozenset({NEAR_TIE}),
        True,
        "every non-modal output parts from the modal one at a near-tie and was judged past "
        "it by teacher forcing",
    )
