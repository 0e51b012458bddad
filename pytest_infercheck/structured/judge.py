"""The pure judgement of structured responses: each response read into a typed record
(:class:`~.results.PathResult`) with its validity faults, and two responses compared field
by field (:func:`compare_results`). ``structured-parity``
(:mod:`~pytest_infercheck.checks.structured_parity`) gathers the answers and judges them
with these; everything here is a function of its arguments.

Validity faults (:mod:`.validity`) are found as a response is read.

**Differences** (a response against its reference; each a :class:`Difference` naming the
field, the side and the reference):

- ``tool_calls``: the calls (count, function names, arguments as JSON values:
  :meth:`~pytest_infercheck.tools.ToolCall.canonical`) wherever they landed;
- ``tool_calls.place``: the same calls, landed in ``tool_calls`` on one side and left in
  ``content`` on the other;
- ``finish_reason``;
- ``content``: the text (None and ``""`` are the same). On a side with calls left in content,
  the content compared is its text without the ``<tool_call>`` blocks as the one parser reads
  them (:func:`~pytest_infercheck.tools.text_without_calls`), stripped: the calls are
  compared as calls and their place as ``tool_calls.place``;
- ``reasoning_content``: the reasoning returned apart (``reasoning_content``,
  ``reasoning``, Anthropic ``thinking``; None and ``""`` the same); where one side has none
  and its content holds the other's reasoning, it says the reasoning was left in content;
- ``usage.prompt_tokens``: when the two sides received the same prompt ids (the caller says:
  ``same_prompt``), the counts must be equal; a count one side does not report is a note;
- ``usage.completion_tokens``: when, besides, the outputs are identical (every choice),
  the counts must be equal (a ``chat-n2`` answer: twice the reference's);
- ``n``: a ``chat-n2`` answer whose choices differ from each other (at temperature 0 they
  must be identical, and each is compared with the reference like any other response).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..tools import ToolCall, canonical_json, text_without_calls
from .records import StructuredChoice, StructuredRequest, StructuredResponse
from .results import (
    CallRecord,
    ChoiceRecord,
    Comparison,
    Difference,
    Invalid,
    NotAnswered,
    PathResult,
    clipped,
)
from .validity import choice_label, validity

# -- reading a response -------------------------------------------------------------------------


def call_record(call: ToolCall, place: str) -> CallRecord:
    """A call as a record: its arguments' canonical JSON, or their raw text (a malformed
    ``<tool_call>`` block from text: :data:`~pytest_infercheck.tools.MALFORMED` as its name,
    the block's text as its arguments)."""
    if call.arguments_valid:
        return CallRecord(call.name, canonical_json(call.arguments), True, place)
    return CallRecord(call.name, str(call.arguments), False, place)


def choice_record(choice: StructuredChoice) -> ChoiceRecord:
    return ChoiceRecord(
        content=choice.content,
        reasoning=choice.reasoning,
        calls=[call_record(c.call, c.place) for c in choice.calls],
        finish_reason=choice.finish_reason,
    )


def path_result(
    target: str, path: str, answer: StructuredResponse | NotAnswered, request: StructuredRequest
) -> PathResult:
    """What ``path`` answered (a response, or why it has none) as a record, with its
    validity faults against ``request`` (:func:`~.validity.validity`); a ``malformed``
    answer is an :class:`~.results.Invalid` of kind ``malformed`` too."""
    if isinstance(answer, NotAnswered):
        invalid = []
        if answer.status == "malformed":
            invalid.append(Invalid("malformed", f"malformed: {path}: {answer.message}"))
        return PathResult(target, path, answer.status, answer.message, invalid=invalid)
    choices = [choice_record(c) for c in answer.choices]
    usage = answer.usage
    return PathResult(
        target=target,
        path=path,
        status="answered",
        choices=choices,
        prompt_tokens=None if usage is None else usage.prompt_tokens,
        completion_tokens=None if usage is None else usage.completion_tokens,
        notes=list(answer.notes),
        invalid=validity(path, choices, request),
    )


# -- comparing two responses --------------------------------------------------------------------


def visible_content(choice: ChoiceRecord) -> str:
    """The content a difference compares: the text, with the ``<tool_call>`` blocks of calls
    left in content removed and the rest stripped (module docstring); None as ``""``."""
    text = choice.content or ""
    if any(c.place == "content" for c in choice.calls):
        return text_without_calls(text)
    return text


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _calls(calls: Sequence[CallRecord]) -> str:
    return "[" + ", ".join(c.shown() for c in calls) + "]"


def calls_detail(reference: Sequence[CallRecord], other: Sequence[CallRecord]) -> str | None:
    """How ``other``'s calls differ from ``reference``'s (count, then the first call whose
    function or arguments differ), None when they are the same calls."""
    if [c.identity for c in reference] == [c.identity for c in other]:
        return None
    if len(reference) != len(other):
        return f"{len(other)} vs {len(reference)} calls: {_calls(other)} vs {_calls(reference)}"
    for i, (a, b) in enumerate(zip(reference, other, strict=True)):
        if a.name != b.name:
            return f"call {i + 1} function {b.name!r} vs {a.name!r}: {b.shown()} vs {a.shown()}"
        if a.identity != b.identity:
            return f"call {i + 1} ({a.name}) arguments {b.shown()} vs {a.shown()}"
    return None  # pragma: no cover (identities differ somewhere)


def choice_differences(
    reference: ChoiceRecord, other: ChoiceRecord, ref_label: str, label: str
) -> list[Difference]:
    """Every field of ``other`` that differs from ``reference`` (tool calls, their place,
    finish reason, content, reasoning), each named with both sides' labels."""
    out: list[Difference] = []

    def add(name: str, text: str) -> None:
        out.append(Difference(name, label, ref_label, text))

    detail = calls_detail(reference.calls, other.calls)
    if detail is not None:
        add("tool_calls", f"tool_calls differ: {label} vs {ref_label}: {detail}")
    else:
        for i, (a, b) in enumerate(zip(reference.calls, other.calls, strict=True)):
            if a.place != b.place:
                add(
                    "tool_calls.place",
                    f"tool_calls place: {label} returned call {i + 1} {b.shown()} in "
                    f"{b.place}, {ref_label} in {a.place}",
                )
                break
    if reference.finish_reason != other.finish_reason:
        add(
            "finish_reason",
            f"finish_reason: {label} {other.finish_reason!r} vs {ref_label} "
            f"{reference.finish_reason!r}",
        )
    ref_text, text = visible_content(reference), visible_content(other)
    if ref_text != text:
        at = _first_difference(text, ref_text)
        add(
            "content",
            f"content differs: {label} vs {ref_label} (first at character {at}): "
            f"{clipped(text)!r} vs {clipped(ref_text)!r}",
        )
    ref_reasoning, reasoning = reference.reasoning or "", other.reasoning or ""
    if ref_reasoning != reasoning:
        add("reasoning_content", reasoning_detail(reference, other, ref_label, label))
    return out


def reasoning_detail(
    reference: ChoiceRecord, other: ChoiceRecord, ref_label: str, label: str
) -> str:
    """``reasoning_content`` differing in words: reasoning left in content by one side (the
    other's reasoning found in its content), or two reasoning texts."""
    ref_reasoning, reasoning = reference.reasoning or "", other.reasoning or ""
    if not reasoning and ref_reasoning.strip() and ref_reasoning.strip() in (other.content or ""):
        return (
            f"reasoning_content split: {label} left the reasoning in content, {ref_label} "
            f"returned it apart: {clipped(ref_reasoning)!r}"
        )
    if not ref_reasoning and reasoning.strip() and reasoning.strip() in (reference.content or ""):
        return (
            f"reasoning_content split: {label} returned the reasoning apart, {ref_label} left "
            f"it in content: {clipped(reasoning)!r}"
        )
    return (
        f"reasoning_content differs: {label} vs {ref_label}: {clipped(reasoning)!r} vs "
        f"{clipped(ref_reasoning)!r}"
    )


def not_answered(result: PathResult) -> str:
    """Why ``result`` has nothing to compare (``chat-stream unsupported: ...``)."""
    return f"{result.path} {result.status}" + (f": {result.message}" if result.message else "")


def compare_results(
    reference: PathResult,
    other: PathResult,
    ref_label: str,
    label: str,
    *,
    same_prompt: bool | None,
    prompt_note: str | None = None,
) -> Comparison:
    """``other`` against ``reference`` (module docstring): each of ``other``'s choices
    against the reference's first, a several-choice answer's choices against each other
    (``n``), then usage. ``same_prompt``: whether the two sides received the same prompt ids
    (True: the same target; across targets as their prompt ids say; None: not known, said in
    a note with ``prompt_note``)."""
    for side in (reference, other):
        if side.status != "answered" or not side.choices:
            why = not_answered(side) if side.status != "answered" else f"{side.path}: no choices"
            return Comparison(label, ref_label, False, why)
    ref_choice = reference.choices[0]
    n = len(other.choices)
    differences: list[Difference] = []
    for i, choice in enumerate(other.choices):
        differences += choice_differences(ref_choice, choice, ref_label, choice_label(label, i, n))
    for i in range(1, n):
        fields = [d.field for d in choice_differences(other.choices[0], other.choices[i], "", "")]
        if fields:
            differences.append(
                Difference(
                    "n",
                    choice_label(label, i, n),
                    choice_label(label, 0, n),
                    f"n: {label} choices {i + 1} and 1 differ at temperature 0 "
                    f"({', '.join(fields)})",
                )
            )
    usage, notes = usage_differences(
        reference, other, ref_label, label, same_prompt, identical=not differences
    )
    if same_prompt is None and prompt_note is not None:
        notes.insert(0, prompt_note)
    return Comparison(label, ref_label, True, None, differences + usage, notes)


def usage_differences(
    reference: PathResult,
    other: PathResult,
    ref_label: str,
    label: str,
    same_prompt: bool | None,
    *,
    identical: bool,
) -> tuple[list[Difference], list[str]]:
    """The usage rules (module docstring): the differences, and notes of what could not be
    judged."""
    out: list[Difference] = []
    notes: list[str] = []
    counts = (reference.prompt_tokens, other.prompt_tokens)
    if None in counts:
        missing = [p.path for p, c in zip((reference, other), counts, strict=True) if c is None]
        notes.append(f"usage.prompt_tokens not reported by {', '.join(missing)}: not compared")
    elif same_prompt and counts[0] != counts[1]:
        out.append(
            Difference(
                "usage.prompt_tokens",
                label,
                ref_label,
                f"usage.prompt_tokens: {label} {counts[1]} vs {ref_label} {counts[0]} "
                "(the same prompt ids)",
            )
        )
    elif not same_prompt and counts[0] != counts[1]:
        why = "prompt ids not known to be the same" if same_prompt is None else "prompt ids differ"
        notes.append(
            f"usage.prompt_tokens {label} {counts[1]} vs {ref_label} {counts[0]}: not judged "
            f"({why})"
        )
    if not (identical and same_prompt):
        return out, notes
    ref_done, done = reference.completion_tokens, other.completion_tokens
    if ref_done is None or done is None:
        missing = [p.path for p in (reference, other) if p.completion_tokens is None]
        notes.append(f"usage.completion_tokens not reported by {', '.join(missing)}: not compared")
        return out, notes
    expected = ref_done * len(other.choices) // max(1, len(reference.choices))
    if done != expected:
        times = f" ({len(other.choices)} x {ref_done})" if len(other.choices) > 1 else ""
        out.append(
            Difference(
                "usage.completion_tokens",
                label,
                ref_label,
                f"usage.completion_tokens: {label} {done} vs {ref_label} {expected}{times} "
                "with identical outputs",
            )
        )
    return out, notes
