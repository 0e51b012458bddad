"""cache-pollution's judge (pure): a hostile item's evidence to its record and findings.

An item fails when (:func:`hostile_findings`):

- a reference output carries a fault (:mod:`~pytest_infercheck.metrics.consistency`), before
  any hostile request or after this one (``non-finite logprob in the output of s01 after the
  invalid-utf8 request at position 2 (NaN)``), or became empty, or stopped being empty
  (``empty generation: s01 after the invalid-utf8 request generated no tokens while s01
  before it generated 3``; it is also a changed output);
- the server is not alive after the request;
- a reference output changed: token ids where the server returns them, else text
  (:func:`~pytest_infercheck.metrics.sameness.same_generation`).

What the server answered to the hostile request is recorded, not judged. A reference request
that failed is no finding here: the failed request itself fails the item (its
:class:`~pytest_infercheck.verdict.conduct.RequestFailure`); the record keeps its message
(:attr:`~.records.HostileRecord.failure`), which the aggregate names.
"""

from __future__ import annotations

from ...backends.base import Generation
from ...metrics.consistency import (
    Reading,
    empty_fault,
    read_generation,
)
from ...metrics.degenerate import Degenerate, DegenerateScan
from ...metrics.faults import Fault
from ...metrics.sameness import same_generation
from ...specs import KindThresholds
from ...verdict.gate import Violation
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import HostileEvidence, Outputs
from .records import ChangedOutput, HostileRecord
from .spec import HOSTILE_KINDS


def paired(before: Outputs, after: Outputs) -> tuple[Outputs, Outputs]:
    """The outputs of the prompts that answered both before and after, in the same order."""
    answered = dict(after)
    kept = [(pid, g) for pid, g in before if pid in answered]
    return kept, [(pid, answered[pid]) for pid, _ in kept]


def changed_outputs(before: Outputs, after: Outputs) -> list[ChangedOutput]:
    """Each prompt whose output is not the same
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`: ids and text)."""
    changed = []
    for (prompt_id, old), (_, new) in zip(before, after, strict=True):
        verdict = same_generation(old, new)
        if not verdict.same:
            changed.append(
                ChangedOutput(
                    prompt_id=prompt_id,
                    before=old.text,
                    after=new.text,
                    first_divergence=verdict.first_divergence,
                    divergence_unit=verdict.divergence_unit,
                )
            )
    return changed


def before_readings(before: Outputs) -> list[Reading]:
    """The reference outputs before any hostile request, each read on its own (its faults
    and degenerate finding, :func:`read_generation`)."""
    return [
        read_generation(f"the output of {prompt_id} before any hostile request", g)
        for prompt_id, g in before
    ]


def pollution_faults(
    kind: str, before: list[tuple[str, Generation]], after: list[tuple[str, Generation]]
) -> tuple[list[Fault], list[Degenerate | None]]:
    """The faults after the ``kind`` request: each reference output's own
    (:func:`read_generation`), and an output that is empty on one side of the request only
    (:func:`empty_fault`); and the outputs' degenerate findings."""
    faults = []
    findings = []
    for (prompt_id, old), (_, new) in zip(before, after, strict=True):
        reading = read_generation(f"the output of {prompt_id} after the {kind} request", new)
        faults += reading.faults
        findings.append(reading.degenerate)
        empty = empty_fault(
            (new.text, new.token_ids, new.finish_reason),
            (old.text, old.token_ids, old.finish_reason),
            a_name=f"{prompt_id} after the {kind} request",
            b_name=f"{prompt_id} before it",
        )
        if empty is not None:
            faults.append(empty)
    return faults, findings


def hostile_findings(record: HostileRecord) -> list[str]:
    """The judge's findings on a hostile item's record: its faults, the server dead after
    the request, reference outputs that changed."""
    violations = [f.text for f in record.faults]
    if not record.alive:
        violations.append(f"the server is not alive after the {record.hostile} request")
    if record.changed:
        violations.append(
            f"{len(record.changed)} of {record.prompts} reference outputs changed after the "
            f"{record.hostile} request: {', '.join(c.prompt_id for c in record.changed)}"
        )
    return violations


def hostile_violations(record: HostileRecord) -> list[str]:
    """Why a hostile item fails, from its record alone (as the aggregate judges each record
    again): :func:`hostile_findings`, and the reference prompts that failed around it."""
    violations = hostile_findings(record)
    if record.failure is not None:
        violations.append(
            f"the reference prompts failed around the {record.hostile} request: {record.failure}"
        )
    return violations


def judge(plan: ItemPlan, evidence: HostileEvidence, thresholds: KindThresholds) -> Judged:
    """The item of one hostile request (see the module docstring)."""
    kind = next(k for k in HOSTILE_KINDS if k == evidence.hostile)
    readings = before_readings(evidence.before)
    faults = [f for reading in readings for f in reading.faults]
    findings = [reading.degenerate for reading in readings]
    changed: list[ChangedOutput] = []
    if evidence.after is not None:
        before, after = paired(evidence.before, evidence.after)
        changed = changed_outputs(before, after)
        after_faults, after_findings = pollution_faults(kind, before, after)
        faults += after_faults
        findings += after_findings
    record = HostileRecord(
        target=evidence.target,
        hostile=kind,
        response=evidence.response,
        alive=evidence.alive,
        changed=changed,
        prompts=evidence.prompts,
        faults=faults,
        failure=evidence.failure,
    )
    violations = [Violation(v, "pollution") for v in hostile_findings(record)]
    return Judged(record, violations, degenerate=DegenerateScan.of(findings))
