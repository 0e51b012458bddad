"""What is wrong with one prompt's comparison whatever the thresholds, and the failure text a
person can act on.

Fail closed, before any threshold: every fault of :func:`item_faults` is a violation of its
own (:func:`~.judge.own_violations`), and each side aggregate names them.
"""

from __future__ import annotations

from ...metrics.answers import AnswerKind, shown_reference
from ...metrics.consistency import one_side_empty
from ...metrics.faults import Fault
from ...metrics.finite import check_scalar, check_values
from ...render.text import mark_divergence, safe_text
from .prompt import LOWER_BOUND_METHODS, TEXT_ONLY, PromptComparison


def empty_output(result: PromptComparison) -> Fault | None:
    """An ``empty generation`` fault (its ``where`` the empty side) when exactly one side
    generated nothing (:func:`~pytest_infercheck.metrics.consistency.is_empty`: no text, and
    no token but the end-of-sequence it stopped on; :func:`~pytest_infercheck.metrics.
    consistency.one_side_empty`), the other's size in tokens before its end-of-sequence when
    both sides have token ids, else in characters. Whatever the method: a text-only or top-k
    comparison of an empty output is a divergence, never a pass. A side whose server
    returned tool calls apart from an empty text generated those calls: not empty
    (:func:`~pytest_infercheck.metrics.consistency.output_text`)."""
    return one_side_empty(
        (result.base_text or result.base_tool_calls, result.base_ids, result.base_finish),
        (result.test_text or result.test_tool_calls, result.test_ids, result.test_finish),
        a_name=f"the baseline ({result.baseline})",
        b_name=f"the test ({result.test})",
    )


def item_faults(result: PromptComparison) -> list[Fault]:
    """Everything fail-closed about one comparison, each a violation of its own: the
    scoring's problems (:attr:`PromptComparison.problems`: non-finite or not normalised
    logprob rows, non-finite ``KL_t``), a non-finite ``KL_t`` in the record even when the
    scoring did not name it (a record read back, or made by hand), a non-finite similarity,
    an empty generation against a non-empty one, a non-finite divergence margin or noise
    floor (:mod:`~pytest_infercheck.metrics.ties`; such a divergence is labelled
    ``unknown``), then the faults of either side's own generations
    (:attr:`PromptComparison.faults`)."""
    problems: list[Fault] = list(result.problems)
    named_kl = any(p.fault == "non-finite KL" for p in problems)
    kl_problem = check_values("KL", result.kl_per_position)
    if kl_problem is not None and not named_kl:
        problems.append(kl_problem)
    similarity = check_scalar("similarity", result.similarity)
    if similarity is not None:
        problems.append(similarity)
    empty = empty_output(result)
    if empty is not None:
        problems.append(empty)
    if result.margins is not None:
        known = [m for m in result.margins if m is not None]
        margins = check_values("divergence margins", known, unit="side")
        if margins is not None:
            problems.append(margins)
    if result.noise_floor is not None:
        floor = check_scalar("noise floor", result.noise_floor)
        if floor is not None:
            problems.append(floor)
    return [*problems, *result.faults]


def describe(result: PromptComparison) -> str:
    """The report of a failed item above its violations: prompt, both outputs, answers,
    numbers."""
    lines = [f"prompt {result.prompt_id}: {safe_text(result.prompt_text)}"]
    lines.extend(turn_lines(result))
    if result.method == TEXT_ONLY:
        lines.append("method: text only (no comparable logprobs on both sides)")
    else:
        bound = ", KL a lower bound" if result.method in LOWER_BOUND_METHODS else ""
        lines.append(f"method: {result.method} over {len(result.kl_per_position)} positions{bound}")
    if result.method_note:
        lines.append(f"  ({safe_text(result.method_note, 400)})")
    where = result.sameness or "not compared"
    lines.append(
        f"baseline {result.baseline}: {mark_divergence(result.base_text, result.test_text)}"
    )
    lines.append(f"test     {result.test}: {mark_divergence(result.test_text, result.base_text)}")
    lines.append(f"  ({where}; ⟦ marks the first differing character)")
    lines.extend(origin_lines(result))
    tie = tie_line(result)
    if tie:
        lines.append(tie)
    past = past_line(result)
    if past:
        lines.append(past)
    if result.base_reasoning_chars or result.test_reasoning_chars:
        lines.append(
            f"reasoning returned apart from the answer: baseline {result.base_reasoning_chars} "
            f"chars, test {result.test_reasoning_chars} chars (outputs compared on the answer)"
        )
    if result.base_tool_calls or result.test_tool_calls:
        lines.append(
            "tool calls returned apart from the text: baseline "
            f"{safe_text(result.base_tool_calls or 'none', CALLS_SHOWN)}, test "
            f"{safe_text(result.test_tool_calls or 'none', CALLS_SHOWN)}"
        )
    if result.answer_kind is not None:
        limit = CALLS_SHOWN if result.answer_kind == AnswerKind.TOOL_CALL.value else ANSWER_SHOWN
        reference = shown_reference(result.reference, result.answer_kind)
        lines.append(
            f"answers ({result.answer_kind}): reference {_show(reference, limit)}, baseline "
            f"{_show(result.base_answer, limit)}, test {_show(result.test_answer, limit)} -> "
            f"{result.flip}"
        )
    if result.kl_mean is not None:
        lines.append(f"KL mean {result.kl_mean:.6g}, max {result.kl_max:.6g}")
    return "\n".join(lines)


def turn_lines(result: PromptComparison) -> list[str]:
    """Of a conversation: every turn, one line each (model output escaped), generated turns
    with both sides' outputs, the first divergent turn marked; nothing for a single-turn
    prompt."""
    if not result.turns:
        return []
    first = result.first_divergent_turn
    lines = [
        "conversation (first divergent turn: "
        + ("none" if first is None else str(first))
        + "; generated turns on the baseline's history):"
    ]
    for turn in result.turns:
        mark = " <- first divergent turn" if turn.index == first else ""
        if turn.kind == "given":
            lines.append(f"  turn {turn.index} {turn.role}: {safe_text(turn.base_text, 160)}")
            continue
        test = turn.test_text or ""
        lines.append(f"  turn {turn.index} {turn.kind} ({turn.sameness}){mark}:")
        lines.append(f"    baseline: {mark_divergence(turn.base_text, test, 160)}")
        lines.append(f"    test:     {mark_divergence(test, turn.base_text, 160)}")
    return lines


def origin_lines(result: PromptComparison) -> list[str]:
    """Where the divergence starts and which prompt each side received, for the failure
    text (model output and template text escaped): ``divergence starts at: detokenization
    - the tokens agree (...)`` and ``prompt: shared ids (the same tokenizer ...)``."""
    lines = []
    if result.divergence_origin is not None:
        lines.append(
            f"divergence starts at: {result.divergence_origin} - "
            f"{safe_text(result.origin_detail, 400)}"
        )
    elif result.origin_detail:
        lines.append(f"divergence: none ({safe_text(result.origin_detail, 400)})")
    if result.prompt_inputs is not None:
        inputs = result.prompt_inputs
        lines.append(f"prompt: {inputs.sharing} ({safe_text(inputs.reason, 300)})")
    return lines


def tie_line(result: PromptComparison) -> str:
    """The first divergence's label, margins and noise floor in a line (``first divergence
    at token 3: near-tie (margins: baseline 0.0012, test 0.0007 nats; noise floor 0.0004)``);
    "" when the outputs do not diverge token by token."""
    if result.divergence_label is None:
        return ""
    bound = "" if result.margins_exact else " (>= : a lower bound from a top-k)"
    margins = "no logprobs"
    if result.margins is not None:
        margins = ", ".join(
            f"{side} {'n/a' if m is None else f'{m:.4g}'}"
            for side, m in zip(("baseline", "test"), result.margins, strict=True)
        )
        margins += f" nats{bound}"
    floor = "n/a" if result.noise_floor is None else f"{result.noise_floor:.4g}"
    return (
        f"first divergence at token {result.first_divergence}: {result.divergence_label} "
        f"(margins: {margins}; noise floor {floor})"
    )


def past_line(result: PromptComparison) -> str:
    """What was judged after the first divergent token: ``past the first divergence
    (teacher-forced): 2 later disagreements (near-tie 1, decisive 1); the first not a
    near-tie at token 7: decisive (margins 2.1, 0.8 nats)``; "" without a divergence."""
    if result.judged_past is None:
        return ""
    if not result.judged_past:
        return f"past the first divergence: not judged (method {result.method})"
    labels = {k: v for k, v in result.later_labels.items() if v}
    n = sum(labels.values())
    counts = ", ".join(f"{k} {v}" for k, v in labels.items())
    line = (
        f"past the first divergence (teacher-forced): {n} later disagreement"
        f"{'' if n == 1 else 's'}" + (f" ({counts})" if counts else "")
    )
    later = result.later_first
    if later is not None:
        margins = ", ".join(f"{m:.4g}" for m in later.margins)
        line += (
            f"; the first not a near-tie at token {later.position}: {later.label} "
            f"(margins {margins} nats)"
        )
    return line


ANSWER_SHOWN = 40
"""Characters of an answer the failure text shows."""
CALLS_SHOWN = 200
"""Characters of a ``tool_call`` answer (its calls, readable) the failure text shows."""


def _show(value: str | None, limit: int = ANSWER_SHOWN) -> str:
    return "none" if value is None else repr(safe_text(value, limit))
