"""Model output made safe for a terminal: control characters escaped, long text trimmed, and
the first difference of two outputs marked; counts said in words."""

from __future__ import annotations

from collections.abc import Mapping

TRIM = 160
"""Characters of an output shown in a failure text."""


def safe_text(text: str, limit: int = TRIM) -> str:
    """Model output made safe for a terminal: control characters escaped, long text trimmed."""
    escaped = "".join(
        ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


def mark_divergence(text: str, other: str, limit: int = TRIM) -> str:
    """``text`` with ``⟦`` inserted where it first differs from ``other`` (trimmed around it)."""
    cut = next((i for i, (a, b) in enumerate(zip(text, other, strict=False)) if a != b), None)
    if cut is None:
        cut = min(len(text), len(other)) if len(text) != len(other) else None
    if cut is None:
        return safe_text(text, limit)
    head = text[:cut]
    head = ("…" + head[-(limit // 2) :]) if len(head) > limit // 2 else head
    return f"{safe_text(head, limit)}⟦{safe_text(text[cut:], limit // 2)}"


def counted(counts: Mapping[str, int]) -> str:
    """Counts in words, in the mapping's order, zeros left out: ``{"correct_to_wrong": 3,
    "unchanged": 0, "near-tie": 1}`` -> ``3 correct to wrong, 1 near-tie``; ``none`` when
    every count is 0 (never a Python dict in a failure text)."""
    said = [f"{n} {str(k).replace('_', ' ')}" for k, n in counts.items() if n]
    return ", ".join(said) or "none"
