"""Waivers: a rule that lets an item pass a finding, applied only to what was judged.

``fail_on: decisive`` waives a near-tie first divergence: the findings that only say the
outputs differ there (``expect: identical``, ``min_similarity``). A waiver applies only when
the rest of the output was judged past the waived point (teacher-forced on the baseline's
continuation, with no later decisive disagreement); otherwise the findings stand and the item
says why the waiver was not applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .gate import Violation


@dataclass(frozen=True)
class Waiver:
    """``rule`` (``fail_on: decisive``) would waive the violations whose source is in
    ``covers``; ``judged_past`` says whether what follows the waived point was judged, and
    ``why`` how (or why not)."""

    rule: str
    covers: frozenset[str]
    judged_past: bool
    why: str


def apply_waivers(
    violations: Sequence[Violation], waivers: Sequence[Waiver]
) -> tuple[list[Violation], list[str]]:
    """``violations`` without those a waiver that judged past its point covers, and notes:
    what each waiver waived, or why it was not applied (its covered violations kept)."""
    kept = list(violations)
    notes: list[str] = []
    for waiver in waivers:
        covered = [v for v in kept if v.source in waiver.covers]
        if not covered:
            continue
        if waiver.judged_past:
            kept = [v for v in kept if v not in covered]
            notes.append(
                f"{waiver.rule} waived: {'; '.join(v.text for v in covered)} ({waiver.why})"
            )
        else:
            notes.append(f"{waiver.rule} not applied: {waiver.why}")
    return kept, notes
