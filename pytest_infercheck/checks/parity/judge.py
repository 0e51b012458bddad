"""The judge facet of stream-parity and endpoint-parity: an item's evidence and the
thresholds to its record, its own findings and the waivers it offers. Pure: no cache, no
backend, no I/O. The framework adds the written gates (:mod:`.spec`) and the conduct rules
(a failed request fails the item with the server's message).

An item's findings:

- each side's own faults (:func:`.compare.compare_generations`), and those of the
  continuations past a near-tie (source ``fault``);
- stream-parity: outputs that differ (source ``outputs-differ``); ``logprob_tolerance`` at
  its default when the entry does not write it, on a measured drift (:func:`.spec.
  default_gate`);
- endpoint-parity: ``min_similarity`` at 1.0 when the entry does not write it, on a measured
  similarity; an answer flip ``flips.fail_item_on`` names (source ``flips.fail_item_on``).

``fail_on: decisive`` (:func:`past_the_tie`) offers a waiver of the differing (stream:
``outputs-differ``; endpoint: ``min_similarity``) when the outputs part at a ``near-tie``
token, judged past it only when what follows was judged: the other path, continued from
the reference's tokens up to and including the near-tie, reproduces the reference's
remaining tokens (a later near-tie is continued past in turn, up to the continuations
gathered). A later decisive disagreement fails the item (source ``decisive-after-near-tie``);
a later unlabelled one, a continuation that could not be had or a near-tie on a path that
cannot be continued (endpoint-parity) leave the waiver unapplied, and the item says why.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ...metrics.answers import fails_item
from ...metrics.consistency import read_generation
from ...metrics.faults import Fault
from ...metrics.ties import describe_tie
from ...render.text import mark_divergence, safe_text
from ...verdict.gate import Violation
from ...verdict.measure import Unmeasured
from ...verdict.waiver import Waiver
from ..framework.kind import Judged
from .compare import SideComparison, continuation_divergence
from .evidence import ParityEvidence
from .records import EndpointSide, ParityIncomplete, ParityPrompt, StreamSide
from .spec import LOGPROB_TOLERANCE, MIN_SIMILARITY, Endpoint, StreamMode, default_gate

if TYPE_CHECKING:
    from ...backends.base import Generation
    from ...verdict.gate import Gate
    from ..framework.plan import ItemPlan
    from .spec import EndpointParityThresholds, StreamParityThresholds

RULE = "fail_on: decisive"


def stream_side(mode: StreamMode, generation: Generation) -> StreamSide:
    """``generation`` as a side of a stream-parity item."""
    return StreamSide(generation.text, generation.token_ids, generation.finish_reason, mode)


def endpoint_side(endpoint: Endpoint, generation: Generation) -> EndpointSide:
    """``generation`` as a side of an endpoint-parity item (with the templated text sent to
    ``completions``)."""
    return EndpointSide(
        generation.text,
        generation.token_ids,
        generation.finish_reason,
        endpoint,
        generation.prompt_text,
    )


def incomplete(evidence: ParityEvidence) -> Judged:
    """The item of a side that produced no output: no comparison; its failed requests fail
    it (the framework's rule), a lacking path is said."""
    conduct = evidence.conduct
    record = ParityIncomplete(
        prompt_id=evidence.prompt.id,
        target=evidence.target,
        reference=evidence.labels[0],
        other=evidence.labels[1],
        failures=[f.text() for f in conduct.failures],
        unsupported=[u.text() for u in conduct.unsupported],
    )
    return Judged(
        record, role="incomplete", text=f"prompt {evidence.prompt.id}: {evidence.missing()}"
    )


def _tokens(anchors: list[int]) -> str:
    return f"token {anchors[0]}" if len(anchors) == 1 else f"tokens {anchors}"


def past_the_tie(
    evidence: ParityEvidence, comparison: SideComparison, covers: frozenset[str], fail_on: str
) -> tuple[Waiver | None, list[Violation], str | None]:
    """``fail_on: decisive``'s waiver of the item (see the module docstring), the findings
    past the near-tie and what was judged there, in words (None: no near-tie to waive)."""
    tie = comparison.tie
    if fail_on != "decisive" or tie is None or tie.divergence_label != "near-tie":
        return None, [], None
    ref, other = evidence.labels
    reference = evidence.reference
    assert reference is not None
    n_ref = len(reference.token_ids or [])
    anchors = [tie.token]
    if tie.token + 1 >= n_ref:
        why = f"the near-tie at token {tie.token} is the {ref} output's last token: nothing follows"
        return Waiver(RULE, covers, True, why), [], why
    if evidence.unforced is not None:
        why = f"what follows the near-tie at token {tie.token} is not judged: {evidence.unforced}"
        return Waiver(RULE, covers, False, why), [], why
    for forced in evidence.forced:
        if forced.start != anchors[-1] + 1:
            break
        later = continuation_divergence(
            reference, forced.generation, forced.start, evidence.tie_margin
        )
        continued = f"the {other} path continued from the {ref} tokens after the near-tie at"
        if later is None:
            why = (
                f"{continued} {_tokens(anchors)} reproduces its remaining "
                f"{n_ref - forced.start} tokens"
            )
            return Waiver(RULE, covers, True, why), [], why
        if later.divergence_label == "near-tie":
            anchors.append(later.token)
            if later.token + 1 >= n_ref:
                why = (
                    f"{continued} {_tokens(anchors[:-1])} parts from them only at a near-tie "
                    f"at the {ref} output's last token {later.token}: nothing follows"
                )
                return Waiver(RULE, covers, True, why), [], why
            continue
        said = describe_tie(later, (ref, f"{other} continued"))
        if later.divergence_label == "decisive":
            text = f"{continued} {_tokens(anchors)} parts from them: {said}"
            return None, [Violation(text, "decisive-after-near-tie")], text
        why = f"{continued} {_tokens(anchors)} parts from them unlabelled ({said}): not judged"
        return Waiver(RULE, covers, False, why), [], why
    why = (
        f"what follows the near-tie at {_tokens(anchors)} is not judged: no continuation of the "
        f"{other} path from token {anchors[-1] + 1} was had"
    )
    return Waiver(RULE, covers, False, why), [], why


def continued_faults(evidence: ParityEvidence) -> list[Fault]:
    """The continuations' own faults (a NaN logprob, ...), each named by where it started."""
    other = evidence.labels[1]
    return [
        fault
        for forced in evidence.forced
        for fault in read_generation(
            f"the {other} output continued from token {forced.start}", forced.generation
        ).faults
    ]


def default_violations(
    gate: Gate, evidence: ParityEvidence, thresholds: Any, what: str | None = None
) -> list[Violation]:
    """``gate`` at its default when the entry does not write it, on a measured value
    (``what``: the measure in words, instead of the gate's)."""
    default = default_gate(gate, thresholds)
    measure = evidence.measures[gate.measure_name(thresholds)]
    if default is None or isinstance(measure, Unmeasured):
        return []
    judging = default[0] if what is None else dataclasses.replace(default[0], what=what)
    found = judging.judge(default[1], evidence.measures)
    return [] if found is None else [found]


def _record(
    evidence: ParityEvidence,
    comparison: SideComparison,
    sides: tuple[StreamSide, StreamSide] | tuple[EndpointSide, EndpointSide],
    faults: list[Fault],
    after_tie: str | None,
) -> ParityPrompt:
    return ParityPrompt(
        prompt_id=evidence.prompt.id,
        target=evidence.target,
        reference=sides[0],
        other=sides[1],
        match=comparison.match,
        first_divergence=comparison.first_divergence,
        divergence_unit=comparison.divergence_unit,
        similarity=comparison.similarity,
        answers=comparison.answers,
        flip=comparison.flip,
        logprob_drift=comparison.logprob_drift,
        faults=faults,
        tie=comparison.tie,
        after_tie=after_tie,
    )


def item_text(evidence: ParityEvidence, record: ParityPrompt, drift: bool) -> str:
    """The item's report: the prompt, both outputs with their divergence marked, where they
    part and how, what was judged past a near-tie, and (``drift``) the logprob drift."""
    ref, other = evidence.reference, evidence.other
    assert ref is not None and other is not None
    labels = evidence.labels
    width = max(len(label) for label in labels)
    lines = [
        f"prompt {evidence.prompt.id}: {safe_text(evidence.prompt.text)}",
        f"  {labels[0]:<{width}}: {mark_divergence(ref.text, other.text)}",
        f"  {labels[1]:<{width}}: {mark_divergence(other.text, ref.text)}",
        f"  first divergence: {record.first_divergence} ({record.divergence_unit}), "
        f"similarity {record.similarity:.4f}, answers {record.answers}",
    ]
    if record.tie is not None:
        lines.append(f"  {describe_tie(record.tie, labels)}")
    if record.after_tie is not None:
        lines.append(f"  after the near-tie: {record.after_tie}")
    if drift:
        measured = evidence.measures["logprob_drift"]
        shown = (
            f"not measured: {measured.reason}"
            if isinstance(measured, Unmeasured)
            else (f"{measured:.3g}")
        )
        lines.append(f"  logprob drift over the shared tokens: {shown}")
    return "\n".join(lines)


def judge_stream(
    plan: ItemPlan, evidence: ParityEvidence, thresholds: StreamParityThresholds
) -> Judged:
    """A stream-parity item (see the module docstring)."""
    comparison = evidence.comparison
    if comparison is None:
        return incomplete(evidence)
    ref, other = evidence.reference, evidence.other
    assert ref is not None and other is not None
    labels = evidence.labels
    waiver, later, after_tie = past_the_tie(
        evidence, comparison, frozenset({"outputs-differ"}), thresholds.fail_on
    )
    faults = [*comparison.faults, *continued_faults(evidence)]
    violations = [Violation(f.text, "fault") for f in faults]
    if not comparison.match:
        violations.append(
            Violation(
                f"the {labels[1]} output differs from the {labels[0]} one (first divergence "
                f"at {comparison.divergence_unit} {comparison.first_divergence})",
                "outputs-differ",
            )
        )
    violations += later
    violations += default_violations(LOGPROB_TOLERANCE, evidence, thresholds)
    sides = (stream_side("non-streamed", ref), stream_side("streamed", other))
    record = _record(evidence, comparison, sides, faults, after_tie)
    return Judged(
        record,
        violations,
        [] if waiver is None else [waiver],
        degenerate=comparison.degenerate,
        text=item_text(evidence, record, drift=True),
    )


def judge_endpoint(
    plan: ItemPlan, evidence: ParityEvidence, thresholds: EndpointParityThresholds
) -> Judged:
    """An endpoint-parity item (see the module docstring)."""
    comparison = evidence.comparison
    if comparison is None:
        return incomplete(evidence)
    ref, other = evidence.reference, evidence.other
    assert ref is not None and other is not None
    waiver, later, after_tie = past_the_tie(
        evidence, comparison, frozenset({"min_similarity"}), thresholds.fail_on
    )
    faults = [*comparison.faults, *continued_faults(evidence)]
    violations = [Violation(f.text, "fault") for f in faults]
    ref_label, other_label = evidence.labels
    violations += default_violations(
        MIN_SIMILARITY, evidence, thresholds, f"{other_label} vs {ref_label}: similarity"
    )
    violations += later
    fail_on = thresholds.flips.fail_item_on
    if fails_item(comparison.flip, fail_on):
        violations.append(
            Violation(
                f"answer flip {comparison.flip} (fail_item_on: {fail_on})", "flips.fail_item_on"
            )
        )
    labels = evidence.labels
    sides = (
        endpoint_side(labels[0], ref),  # type: ignore[arg-type]
        endpoint_side(labels[1], other),  # type: ignore[arg-type]
    )
    record = _record(evidence, comparison, sides, faults, after_tie)
    return Judged(
        record,
        violations,
        [] if waiver is None else [waiver],
        degenerate=comparison.degenerate,
        text=item_text(evidence, record, drift=False),
    )
