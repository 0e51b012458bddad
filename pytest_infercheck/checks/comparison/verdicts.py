"""Thresholds applied to one prompt's comparison, and the failure text a person can act on."""

from __future__ import annotations

from ...metrics.answers import fails_item
from ...render.text import mark_divergence, safe_text
from ...specs import Thresholds
from .prompt import TEACHER_FORCED, TEXT_ONLY, PromptComparison


def item_violations(result: PromptComparison, thresholds: Thresholds) -> list[str]:
    """Every per-item threshold that ``result`` breaks, as ``measured vs limit`` lines."""
    out: list[str] = []
    mean, peak = result.kl_mean, result.kl_max
    lower = "" if result.method == TEACHER_FORCED else " (lower bound)"
    if thresholds.max_kl is not None and mean is not None and mean > thresholds.max_kl:
        out.append(f"mean KL{lower} {mean:.6g} > max_kl {thresholds.max_kl:g}")
    if (
        thresholds.max_kl_position is not None
        and peak is not None
        and peak > thresholds.max_kl_position
    ):
        out.append(f"max KL_t{lower} {peak:.6g} > max_kl_position {thresholds.max_kl_position:g}")
    if thresholds.min_similarity is not None and result.similarity < thresholds.min_similarity:
        out.append(
            f"text similarity {result.similarity:.4f} < min_similarity "
            f"{thresholds.min_similarity:g}"
        )
    fail_on = thresholds.flips.fail_item_on
    if fails_item(result.flip, fail_on):
        out.append(f"answer flip {result.flip} (fail_item_on: {fail_on})")
    return out


def describe(result: PromptComparison) -> str:
    """The report of a failed item above its violations: prompt, both outputs, answers,
    numbers."""
    lines = [f"prompt {result.prompt_id}: {safe_text(result.prompt_text)}"]
    if result.method == TEXT_ONLY:
        lines.append("method: text only (no comparable logprobs on both sides)")
    else:
        lines.append(f"method: {result.method} over {len(result.kl_per_position)} positions")
    where = result.sameness or "not compared"
    lines.append(
        f"baseline {result.baseline}: {mark_divergence(result.base_text, result.test_text)}"
    )
    lines.append(f"test     {result.test}: {mark_divergence(result.test_text, result.base_text)}")
    lines.append(f"  ({where}; ⟦ marks the first differing character)")
    if result.base_reasoning_chars or result.test_reasoning_chars:
        lines.append(
            f"reasoning returned apart from the answer: baseline {result.base_reasoning_chars} "
            f"chars, test {result.test_reasoning_chars} chars (outputs compared on the answer)"
        )
    if result.answer_kind is not None:
        lines.append(
            f"answers ({result.answer_kind}): reference {_show(result.reference)}, baseline "
            f"{_show(result.base_answer)}, test {_show(result.test_answer)} -> {result.flip}"
        )
    if result.kl_mean is not None:
        lines.append(f"KL mean {result.kl_mean:.6g}, max {result.kl_max:.6g}")
    return "\n".join(lines)


def _show(value: str | None) -> str:
    return "none" if value is None else repr(safe_text(value, 40))
