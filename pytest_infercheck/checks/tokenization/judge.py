"""The judge facet of tokenization: an item's evidence to its record and findings. Pure.

The verdict (:func:`~pytest_infercheck.metrics.tokenization.compare_tokenizations`) is
``identical``, ``count-only`` (equal counts, ids not compared: a side gives only a count) or
``differs`` with its cause; an item that differs fails naming the first differing position,
both ids and their texts and the cause, unless the cause is a tokenizer property the check
allows (then it passes and still says it). An item whose side's request failed compares
nothing (role ``incomplete``) and fails with the server's message (the framework's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...metrics.tokenization import (
    TOKENIZER_PROPERTIES,
    WINDOW,
    Status,
    TokenSide,
    compare_tokenizations,
    leading_specials,
)
from ...render.text import safe_text
from ...verdict.gate import Violation
from ..framework.kind import Judged
from .evidence import TokenEvidence
from .records import TokenizationIncomplete, TokenizationPrompt, TokenSideRecord, WindowRow

if TYPE_CHECKING:
    from ...suites import Prompt
    from ..framework.plan import ItemPlan


def _with_lead(record: TokenSideRecord, side: TokenSide) -> TokenSideRecord:
    return TokenSideRecord(
        record.target, record.source, record.text, record.ids, record.count, leading_specials(side)
    )


def window(ref: TokenSide, other: TokenSide, start: int | None) -> list[WindowRow]:
    """Both sides' ids and texts at :data:`WINDOW` positions from ``start`` (none when
    ``start`` is None or no side has ids there)."""
    if start is None or ref.ids is None or other.ids is None:
        return []
    rows = []
    for p in range(start, start + WINDOW):
        if p >= len(ref.ids) and p >= len(other.ids):
            break
        rows.append(
            WindowRow(
                p,
                ref.ids[p] if p < len(ref.ids) else None,
                ref.pieces.get(p),
                other.ids[p] if p < len(other.ids) else None,
                other.pieces.get(p),
            )
        )
    return rows


def item_text(prompt: Prompt, record: TokenizationPrompt) -> str:
    """The item's report: the prompt, each side's source and size, the verdict and the
    window of tokens from the first difference."""
    lines = [f"prompt {prompt.id}: {safe_text(prompt.text)}"]
    for side in (record.reference, record.other):
        lines.append(f"  {side.target}: {side.count} tokens ({side.source})")
    allowed = " (allowed tokenizer property)" if record.allowed else ""
    lines.append(f"  {safe_text(record.explanation, limit=2000)}{allowed}")
    if record.window:
        width = max(len(record.reference.target), 12)
        lines.append(f"  {'pos':>5}  {record.reference.target:<{width}}  {record.other.target}")
        for row in record.window:
            lines.append(
                f"  {row.position:>5}  {_cell(row.reference_id, row.reference_piece):<{width}}"
                f"  {_cell(row.other_id, row.other_piece)}"
            )
    return "\n".join(lines)


def _cell(token: int | None, piece: str | None) -> str:
    if token is None:
        return "-"
    return f"{token} {safe_text(repr(piece)) if piece is not None else '?'}"


def item_violations(record: TokenizationPrompt) -> list[Violation]:
    """Why an item fails, from its verdict: tokenizations that differ, unless by an allowed
    tokenizer property."""
    if record.status == Status.DIFFERS.value and not record.allowed:
        text = f"{record.other.target} vs {record.reference.target}: {record.explanation}"
        return [Violation(text, "tokenization-differs")]
    return []


def judge(plan: ItemPlan, evidence: TokenEvidence, thresholds: Any) -> Judged:
    """An item's record, text and findings (see the module docstring)."""
    prompt = evidence.prompt
    ref, other = evidence.reference_tokens, evidence.other_tokens
    if evidence.reference is None or evidence.other is None or ref is None or other is None:
        failed = TokenizationIncomplete(
            prompt.id,
            evidence.labels[0],
            evidence.labels[1],
            [f.text() for f in evidence.conduct.failures],
        )
        return Judged(failed, role="incomplete", text=f"prompt {prompt.id}: nothing compared")
    verdict = compare_tokenizations(ref, other, evidence.labels)
    cause = verdict.cause
    allowed = cause is not None and cause in TOKENIZER_PROPERTIES and cause.value in evidence.allow
    record = TokenizationPrompt(
        prompt_id=prompt.id,
        reference=_with_lead(evidence.reference.side, ref),
        other=_with_lead(evidence.other.side, other),
        status=verdict.status.value,
        cause=cause.value if cause else None,
        allowed=allowed,
        first_difference=verdict.first_difference,
        text_difference=verdict.text_difference,
        explanation=verdict.explanation,
        window=window(ref, other, verdict.first_difference),
        unsupported=[u.text() for u in evidence.conduct.unsupported],
    )
    return Judged(record, item_violations(record), text=item_text(prompt, record))
