"""structured-parity's judge facet: pure, from an item's evidence and the thresholds to its
record and findings (no cache, no backend, no I/O).

- the target's ``chat`` (non-streamed) answer is its reference; every other path's answer is
  compared with it (the same prompt ids, so ``usage.prompt_tokens`` must be equal);
- a target after the first: its ``chat`` answer is compared with the first target's
  ``chat`` answer, ``usage`` only where the request's prompt ids are known on both and agree
  (otherwise the counts are noted, not judged);
- every answer of the target is checked for validity.

The fields compared and the validity rules are those of
:mod:`~pytest_infercheck.structured.judge` and :mod:`~pytest_infercheck.structured.validity`.
The item's findings: its answers' validity faults (source ``invalid``), then the differences
of its comparisons whose field ``allow`` does not list (source: the field). Failed requests,
on the item's target or the reference, are the framework's rule (its conduct).
"""

from __future__ import annotations

from typing import Any

from ...structured.judge import compare_results, path_result
from ...structured.request import with_n
from ...structured.results import FIELDS, PathResult
from ...verdict.gate import Violation
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import PathAnswer, StructuredEvidence
from .records import StructuredParityPrompt
from .spec import REFERENCE, StructuredParityThresholds


def result_of(answer: PathAnswer, evidence: StructuredEvidence) -> PathResult:
    """A path's answer read into its record against the request it sent (``chat-n2``: the
    request with ``n: 2``)."""
    sent = with_n(evidence.request, 2) if answer.path == "chat-n2" else evidence.request
    return path_result(answer.target, answer.path, answer.answer, sent)


def record_of(evidence: StructuredEvidence) -> StructuredParityPrompt:
    """The item's record: each path's answer read, compared with ``chat`` and, for a target
    after the first, its ``chat`` with the first target's."""
    results = [result_of(a, evidence) for a in evidence.answers]
    reference = results[0]
    comparisons = [
        compare_results(reference, r, REFERENCE, r.path, same_prompt=True) for r in results[1:]
    ]
    first_chat = None
    if evidence.reference_chat is not None:
        first_chat = result_of(evidence.reference_chat, evidence)
        ids = evidence.prompt_ids
        comparisons.append(
            compare_results(
                first_chat,
                reference,
                f"{evidence.reference_side} {REFERENCE}",
                f"{evidence.side} {REFERENCE}",
                same_prompt=None if ids is None else ids.same,
                prompt_note=None if ids is None else f"prompt ids {ids.text}",
            )
        )
    return StructuredParityPrompt(
        prompt_id=evidence.prompt_id,
        target=evidence.target,
        side=evidence.side,
        reference_target=evidence.reference_target,
        request=evidence.facts,
        results=results,
        comparisons=comparisons,
        reference_chat=first_chat,
        prompt_ids=None if evidence.prompt_ids is None else evidence.prompt_ids.text,
    )


def findings(
    record: StructuredParityPrompt, thresholds: StructuredParityThresholds
) -> list[Violation]:
    """Why an item fails, from its record (see the module docstring)."""
    out = [Violation(i.text, "invalid") for r in record.results for i in r.invalid]
    allowed = set(thresholds.allow)
    out += [
        Violation(d.text, d.field)
        for c in record.comparisons
        for d in c.differences
        if d.field not in allowed
    ]
    return out


def failing_differences(
    record: StructuredParityPrompt, thresholds: StructuredParityThresholds
) -> int:
    """The item's differences that fail (their field not allowed)."""
    allowed = set(thresholds.allow)
    return sum(d.field not in allowed for c in record.comparisons for d in c.differences)


def differing_fields(record: StructuredParityPrompt) -> list[str]:
    """The fields that differ anywhere in the item, in
    :data:`~pytest_infercheck.structured.results.FIELDS` order."""
    found = {d.field for c in record.comparisons for d in c.differences}
    return [f for f in FIELDS if f in found]


def judge(plan: ItemPlan, evidence: Any, thresholds: Any) -> Judged:
    """The item's record and findings (see the module docstring)."""
    assert isinstance(evidence, StructuredEvidence)
    record = record_of(evidence)
    return Judged(record, findings(record, thresholds))
