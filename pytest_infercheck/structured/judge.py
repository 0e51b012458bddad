"""The pure judgement of structured responses: each response read into a typed record
(:class:`PathResult`) with its validity faults, and two responses compared field by field
(:func:`compare_results`). ``structured-parity``
(:mod:`~pytest_infercheck.checks.structured_parity`) runs the requests and keeps these
records; everything here is a function of its arguments.

**Validity** (every choice of every answered response; each an :class:`Invalid` naming the
field and the path):

- ``arguments-not-json``: a call's arguments text does not parse as JSON;
- ``unknown-function``: a call to a function the request did not offer;
- ``arguments-schema``: arguments that violate the function's ``parameters`` JSON schema
  (``jsonschema``, the schema's own draft, 2020-12 by default:
  :func:`~pytest_infercheck.tools.instance_problem`);
- ``response-format``: with a ``response_format``, content that is not JSON or violates its
  schema (a reasoning block returned apart is not content);
- ``tool-choice``: ``none`` with a call in ``tool_calls``, ``required`` without one, a named
  function and a call in ``tool_calls`` to another (or none);
- ``finish-reason``: ``finish_reason: tool_calls`` with no call in ``tool_calls``;
- ``choices``: a number of choices other than the request's ``n``;
- ``malformed``: a response the path's reader could not read (:class:`MalformedResponse`).

Calls counted by ``tool_choice`` and ``finish_reason`` are those the server parsed (place
``tool_calls``); a ``<tool_call>`` left in ``content`` is the model's text, which a server
returning it unparsed did not call.

**Differences** (a response against its reference; each a :class:`Difference` naming the
field, the side and the reference):

- ``tool_calls``: the calls (count, function names, arguments as JSON values:
  :meth:`~pytest_infercheck.tools.ToolCall.canonical`) wherever they landed;
- ``tool_calls.place``: the same calls, landed in ``tool_calls`` on one side and left in
  ``content`` on the other;
- ``finish_reason``;
- ``content``: the text (None and ``""`` are the same). On a side with calls left in content,
  the content compared is its text without the ``<tool_call>...</tool_call>`` blocks,
  stripped: the calls are compared as calls and their place as ``tool_calls.place``;
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

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..records import OMIT_WHEN_EMPTY
from ..tools import ToolCall, canonical_json, instance_problem
from ..tools import schema_problem as tools_schema_problem
from .records import (
    MalformedResponse,
    StructuredChoice,
    StructuredRequest,
    StructuredResponse,
    UnsupportedRequest,
)
from .request import response_schema

FIELDS: tuple[str, ...] = (
    "tool_calls",
    "tool_calls.place",
    "finish_reason",
    "content",
    "reasoning_content",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "n",
)
"""Every field a difference can name, in the order an item compares them."""
FieldName = Literal[
    "tool_calls",
    "tool_calls.place",
    "finish_reason",
    "content",
    "reasoning_content",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "n",
]
INVALID_KINDS: tuple[str, ...] = (
    "malformed",
    "choices",
    "arguments-not-json",
    "unknown-function",
    "arguments-schema",
    "response-format",
    "tool-choice",
    "finish-reason",
)
Status = Literal["answered", "unsupported", "error", "malformed"]
"""What came back through a path: an answer, a refusal of what the server does not support
(with its message: recorded, not failed), a server error or a response the reader could not
read (both fail the item)."""

TOOL_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
"""A Hermes / Qwen 2.5 call written in text."""
SHOWN = 160
"""Characters of a text quoted in a difference."""


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallRecord:
    """One call as a response gave it."""

    name: str
    arguments: str
    """The arguments' canonical JSON (:func:`~pytest_infercheck.tools.canonical_json`), or
    their raw text when they are not JSON (:attr:`valid` False)."""
    valid: bool
    """The arguments parsed as JSON."""
    place: str
    """``tool_calls`` (parsed by the server) or ``content`` (left in the text)."""

    @property
    def identity(self) -> tuple[str, str, bool]:
        """What makes two calls the same call (name and arguments as JSON values), wherever
        they landed."""
        return self.name, self.arguments, self.valid

    def shown(self) -> str:
        """``add({"a":12,"b":34})`` (raw arguments: ``add('{"a": 1' not JSON)``)."""
        args = self.arguments if self.valid else f"{self.arguments!r} not JSON"
        return f"{self.name}({args})"


@dataclass(frozen=True)
class ChoiceRecord:
    """One choice of a response."""

    content: str | None
    reasoning: str | None
    calls: list[CallRecord]
    finish_reason: str | None


@dataclass(frozen=True)
class Invalid:
    """A validity fault of one response (see the module docstring)."""

    kind: str
    """One of :data:`INVALID_KINDS`."""
    text: str
    """The violation, naming the field and the path (``tool_calls: chat-stream: add
    arguments are not JSON: '{"a": 1'``)."""


@dataclass(frozen=True)
class PathResult:
    """What one path of one target answered to the item's request."""

    target: str
    """The target's label (``tiny@llama``)."""
    path: str
    status: str
    """A :data:`Status`."""
    message: str | None = None
    """The server's message when it refused (``unsupported``), failed (``error``) or the
    reader's when it could not read the answer (``malformed``)."""
    choices: list[ChoiceRecord] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    notes: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """What the reader noticed but could still read (a stream's ``tool_calls: null``)."""
    invalid: list[Invalid] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Its validity faults (each a violation of the item)."""


@dataclass(frozen=True)
class Difference:
    """One field that differs between a response and its reference."""

    field: str
    """One of :data:`FIELDS`."""
    side: str
    """The response compared (``chat-stream``, ``chat-n2 choice 2``, ``vllm chat``)."""
    reference: str
    """What it was compared with (``chat``, ``llama chat``)."""
    text: str
    """The difference in words, naming the field and both sides."""


@dataclass(frozen=True)
class Comparison:
    """One response against its reference."""

    side: str
    reference: str
    compared: bool
    """False when a side has no answer (:attr:`why_not`)."""
    why_not: str | None = None
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """What could not be judged (a count not reported, prompt ids not known)."""


# -- reading a response -------------------------------------------------------------------------


def call_record(call: ToolCall, place: str) -> CallRecord:
    """A call as a record: its arguments' canonical JSON, or their raw text."""
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
    target: str, path: str, answer: StructuredResponse | BaseException, request: StructuredRequest
) -> PathResult:
    """What ``path`` answered (a response, or the exception its request raised) as a record,
    with its validity faults against ``request`` (:func:`validity`).

    ``UnsupportedRequest`` is ``unsupported``, ``MalformedResponse`` ``malformed`` (an
    ``Invalid`` of kind ``malformed`` too), any other exception ``error``; the message
    is kept."""
    if isinstance(answer, UnsupportedRequest):
        return PathResult(target, path, "unsupported", str(answer))
    if isinstance(answer, MalformedResponse):
        text = f"malformed: {path}: {answer}"
        return PathResult(
            target, path, "malformed", str(answer), invalid=[Invalid("malformed", text)]
        )
    if isinstance(answer, BaseException):
        return PathResult(target, path, "error", f"{type(answer).__name__}: {answer}")
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


# -- validity -----------------------------------------------------------------------------------


def choice_label(path: str, index: int, n: int) -> str:
    """``chat-n2 choice 2`` for the second of several choices; ``chat`` for the only one."""
    return path if n == 1 else f"{path} choice {index + 1}"


def validity(
    path: str, choices: Sequence[ChoiceRecord], request: StructuredRequest
) -> list[Invalid]:
    """Every validity fault of a response to ``request`` through ``path`` (module
    docstring)."""
    out: list[Invalid] = []
    if len(choices) != request.n:
        out.append(
            Invalid("choices", f"n: {path} returned {len(choices)} choices for n: {request.n}")
        )
    tools = {tool.name: tool.parameters for tool in request.tools}
    schema = response_schema(request.response_format)
    for i, choice in enumerate(choices):
        label = choice_label(path, i, len(choices))
        out += call_validity(label, choice.calls, tools)
        out += tool_choice_validity(label, choice, request.tool_choice)
        parsed = [c for c in choice.calls if c.place == "tool_calls"]
        if choice.finish_reason == "tool_calls" and not parsed:
            where = " (calls left in content)" if choice.calls else ""
            out.append(
                Invalid(
                    "finish-reason",
                    f"finish_reason: {label} says 'tool_calls' but the response has no "
                    f"tool_calls{where}",
                )
            )
        if schema is not None:
            out += content_validity(label, choice.content, schema)
    return out


def call_validity(
    label: str, calls: Sequence[CallRecord], tools: Mapping[str, Mapping[str, Any]]
) -> list[Invalid]:
    """Arguments that are not JSON, calls to functions not offered, arguments violating
    their function's schema."""
    out = []
    offered = ", ".join(tools) or "none"
    for call in calls:
        where = "" if call.place == "tool_calls" else " (left in content)"
        if not call.valid:
            out.append(
                Invalid(
                    "arguments-not-json",
                    f"tool_calls: {label}: {call.name} arguments are not JSON{where}: "
                    f"{_clip(call.arguments)!r}",
                )
            )
        elif call.name not in tools:
            out.append(
                Invalid(
                    "unknown-function",
                    f"tool_calls: {label}: call to {call.name!r}{where}, a function not offered "
                    f"(offered: {offered})",
                )
            )
        else:
            problem = schema_problem(tools[call.name], json.loads(call.arguments))
            if problem is not None:
                out.append(
                    Invalid(
                        "arguments-schema",
                        f"tool_calls: {label}: {call.shown()}{where} violates {call.name}'s "
                        f"parameters schema: {problem}",
                    )
                )
    return out


def tool_choice_validity(
    label: str, choice: ChoiceRecord, tool_choice: str | Mapping[str, Any] | None
) -> list[Invalid]:
    """The calls the server parsed against ``tool_choice``."""
    parsed = [c for c in choice.calls if c.place == "tool_calls"]
    if tool_choice == "none" and parsed:
        names = ", ".join(c.shown() for c in parsed)
        return [Invalid("tool-choice", f"tool_choice: {label}: 'none' but it called {names}")]
    if tool_choice == "required" and not parsed:
        return [Invalid("tool-choice", f"tool_choice: {label}: 'required' but no tool_calls")]
    wanted = named_function(tool_choice)
    if wanted is not None and (not parsed or any(c.name != wanted for c in parsed)):
        got = ", ".join(c.shown() for c in parsed) or "no tool_calls"
        return [Invalid("tool-choice", f"tool_choice: {label}: function {wanted!r} but {got}")]
    return []


def named_function(tool_choice: str | Mapping[str, Any] | None) -> str | None:
    """The function a named ``tool_choice`` (``{"type": "function", "function": {"name":
    ...}}``) requires, else None."""
    if not isinstance(tool_choice, Mapping):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
    return name if isinstance(name, str) else None


def content_validity(label: str, content: str | None, schema: Mapping[str, Any]) -> list[Invalid]:
    """``content`` must be JSON valid against ``schema`` (``response_format``)."""
    text = content or ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [
            Invalid(
                "response-format",
                f"content: {label}: not JSON ({exc}), response_format asks for JSON: "
                f"{_clip(text)!r}",
            )
        ]
    problem = schema_problem(schema, value)
    if problem is None:
        return []
    return [
        Invalid(
            "response-format",
            f"content: {label}: violates the response_format schema: {problem}: {_clip(text)!r}",
        )
    ]


def schema_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    """Why ``value`` is not valid against the JSON schema ``schema`` (its most relevant
    error, with where it is: :func:`~pytest_infercheck.tools.instance_problem`), None when it
    is valid. A schema that is not a valid JSON schema is a problem too (the check cannot
    judge against it; suites refuse one when they load)."""
    invalid = tools_schema_problem(schema)
    if invalid is not None:
        return f"the schema itself is {invalid}"
    return instance_problem(value, schema)


# -- comparing two responses --------------------------------------------------------------------


def visible_content(choice: ChoiceRecord) -> str:
    """The content a difference compares: the text, with the ``<tool_call>`` blocks of calls
    left in content removed and the rest stripped (module docstring); None as ``""``."""
    text = choice.content or ""
    if any(c.place == "content" for c in choice.calls):
        return TOOL_CALL_BLOCK.sub("", text).strip()
    return text


def _clip(text: str, limit: int = SHOWN) -> str:
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit})"


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
            f"{_clip(text)!r} vs {_clip(ref_text)!r}",
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
            f"returned it apart: {_clip(ref_reasoning)!r}"
        )
    if not ref_reasoning and reasoning.strip() and reasoning.strip() in (reference.content or ""):
        return (
            f"reasoning_content split: {label} returned the reasoning apart, {ref_label} left "
            f"it in content: {_clip(reasoning)!r}"
        )
    return (
        f"reasoning_content differs: {label} vs {ref_label}: {_clip(reasoning)!r} vs "
        f"{_clip(ref_reasoning)!r}"
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
