"""One suite record validated (:class:`PromptRecord`, pydantic) and made a
:class:`~.suite_spec.Prompt` (:func:`validate_record`): its keys and their values, its
reference answer read by the parser that scores outputs, and how it uses its tools; every
problem one message naming the field."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from .conversation import Turn
from .metrics.answers import parse_reference
from .suite_ids import conversation_id, derive_prompt_id, offer_of
from .suite_spec import ANSWER_KINDS, RESERVED_IDS, Prompt, SuiteError
from .suite_turns import calls_problem, parse_calls, parse_tools, parse_turns, plain_json, shown
from .tools import Tool, ToolCall, canonical_calls, schema_problem

ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
RECORD_KEYS = (
    "id",
    "prompt",
    "text",
    "messages",
    "category",
    "max_tokens",
    "answer",
    "answer_kind",
    "system",
    "tools",
    "tool_choice",
    "response_format",
)
TOOL_CHOICES = ("auto", "none", "required")


class PromptRecord(BaseModel):
    """Schema of one prompt record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: StrictStr | None = None
    prompt: StrictStr | None = Field(default=None, validation_alias=AliasChoices("prompt", "text"))
    messages: tuple[Turn, ...] | None = None
    category: StrictStr | None = None
    max_tokens: StrictInt | None = Field(default=None, gt=0)
    answer: StrictStr | tuple[ToolCall, ...] | None = None
    """A reference answer; of ``answer_kind: tool_call`` the reference calls (parsed, not yet
    checked against the tools: :func:`~.suite_records.tool_use_problem`)."""
    answer_kind: StrictStr | None = None
    system: StrictStr | None = None
    tools: tuple[Tool, ...] = ()
    tool_choice: StrictStr | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not ID_RE.match(value):
            raise ValueError(f"invalid id {value!r}: use only letters, digits, '_', '.' and '-'")
        if value.lower() in RESERVED_IDS:
            raise ValueError(
                f"id {value!r} is reserved (reserved ids: {', '.join(sorted(RESERVED_IDS))})"
            )
        return value

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("prompt must not be empty")
        return value

    @field_validator("messages", mode="before")
    @classmethod
    def _parse_messages(cls, value: Any) -> tuple[Turn, ...] | None:
        return None if value is None else parse_turns(value)

    @model_validator(mode="after")
    def _check_prompt_or_messages(self) -> PromptRecord:
        if self.messages is None and self.prompt is None:
            raise ValueError("missing required field 'prompt' (or 'messages')")
        if self.messages is not None and self.prompt is not None:
            raise ValueError("both 'prompt' and 'messages' are given; use one")
        if self.messages is not None and self.system is not None:
            raise ValueError(
                "'system' is given beside 'messages': give the system prompt as the first turn"
            )
        return self

    @field_validator("category")
    @classmethod
    def _check_category(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("category must not be empty")
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _coerce_answer(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (int, float, Decimal)):
            return str(value)
        if isinstance(value, (dict, list)):
            # One call or a list of calls (answer_kind tool_call, checked by _check_answer).
            return parse_calls(value if isinstance(value, list) else [value], "")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _parse_tools(cls, value: Any) -> tuple[Tool, ...]:
        return parse_tools(value)

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _check_tool_choice(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value in TOOL_CHOICES):
            return value
        if isinstance(value, dict):
            function = value.get("function")
            if (
                set(value) == {"type", "function"}
                and value["type"] == "function"
                and isinstance(function, dict)
                and set(function) == {"name"}
                and isinstance(function["name"], str)
            ):
                return value
        raise ValueError(
            f"expected one of {', '.join(TOOL_CHOICES)} or "
            '{"type": "function", "function": {"name": ...}}, got '
            f"{shown(value)}"
        )

    @field_validator("response_format", mode="before")
    @classmethod
    def _check_response_format(cls, value: Any) -> Any:
        if value is None:
            return None
        value = plain_json(value)
        if isinstance(value, dict) and value.get("type") in ("json_schema", "json_object"):
            raise ValueError(
                "give the JSON schema itself, not OpenAI's "
                f'{{"type": {value["type"]!r}, ...}} wrapper'
            )
        problem = schema_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("answer_kind")
    @classmethod
    def _check_answer_kind(cls, value: str | None) -> str | None:
        if value is not None and value not in ANSWER_KINDS:
            kinds = ", ".join(sorted(ANSWER_KINDS))
            raise ValueError(f"unknown answer_kind {value!r} (expected one of: {kinds})")
        return value

    @model_validator(mode="after")
    def _check_answer(self) -> PromptRecord:
        if self.answer_kind == "tool_call" and not self.tools:
            raise ValueError("answer_kind 'tool_call' needs 'tools' (the functions offered)")
        if self.answer is None:
            return self
        if self.answer_kind is None:
            raise ValueError("'answer' is given without 'answer_kind'")
        if self.answer_kind == "tool_call":
            if isinstance(self.answer, str):
                raise ValueError(
                    "field 'answer': a 'tool_call' answer is one call {\"name\": ..., "
                    '"arguments": {...}} or a list of them, not a string'
                )
            return self
        if not isinstance(self.answer, str):
            raise ValueError(
                f"field 'answer': an object or list is a 'tool_call' answer, but answer_kind "
                f"is {self.answer_kind!r} (a {self.answer_kind!r} answer is a string)"
            )
        if not self.answer.strip():
            raise ValueError("'answer' must not be empty")
        problem = answer_problem(self.answer, self.answer_kind)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_tools(self) -> PromptRecord:
        if not self.tools:
            if self.tool_choice is not None:
                raise ValueError("'tool_choice' is given without 'tools'")
            calling = [i for i, t in enumerate(self.messages or ()) if t.tool_calls]
            if calling:
                raise ValueError(
                    f"field 'messages': turn {calling[0]}: calls tools, but the prompt offers "
                    "none (give 'tools')"
                )
            return self
        problem = tool_use_problem(self)
        if problem:
            raise ValueError(problem)
        return self


REFERENCE_FORMS = {
    "number": "one number, e.g. 1234, 1,234.5 (thousands separators only in groups of 3), "
    "-0.3, 1e3, 3/4, \\frac{3}{4}, 50% or $12",
    "boolean": "one of yes/no/true/false",
    "choice": "one letter A-E, e.g. C or (c)",
    "json": "exactly one JSON object or array",
    "code": "non-blank code",
    "exact": "non-blank text",
}


def answer_problem(answer: str, kind: str) -> str | None:
    """Describe why ``answer`` is not a valid reference of ``kind``, or return ``None``.

    The reference is parsed by :func:`~pytest_infercheck.metrics.answers.parse_reference`, the
    parser that scores it, so a reference that could never be matched (``"12,34"``) is an
    error here rather than a prompt whose answers silently compare as "changed".
    """
    if parse_reference(answer, kind) is not None:
        return None
    return f"answer {answer!r} is not a valid {kind!r} reference: expected {REFERENCE_FORMS[kind]}"


def tool_use_problem(record: PromptRecord) -> str | None:
    """What is wrong with how ``record`` uses its ``tools``: a call of a history turn or of
    the reference answer that names no offered tool or has invalid arguments, a
    ``tool_choice`` naming no offered tool or contradicting the answer; None: nothing."""
    offered = {tool.name: tool for tool in record.tools}
    choice = record.tool_choice
    if isinstance(choice, dict):
        chosen = choice["function"]["name"]
        if chosen not in offered:
            return (
                f"field 'tool_choice': names {chosen!r}, which is not an offered tool "
                f"(offered: {', '.join(offered)})"
            )
    for index, turn in enumerate(record.messages or ()):
        problem = calls_problem(turn.tool_calls, offered, f"turn {index}: ")
        if problem:
            return f"field 'messages': {problem}"
        # A tool turn names its call's function (_check_order), checked here as offered.
    if record.answer_kind == "tool_call" and isinstance(record.answer, tuple):
        problem = calls_problem(record.answer, offered, "")
        if problem:
            return f"field 'answer': {problem}"
        if choice == "none":
            return "field 'answer': a 'tool_call' answer, but tool_choice is 'none'"
        if isinstance(choice, dict):
            other = [c.name for c in record.answer if c.name != choice["function"]["name"]]
            if other:
                return (
                    f"field 'answer': calls {other[0]!r}, but tool_choice names "
                    f"{choice['function']['name']!r}"
                )
    return None


def validate_record(path: Path, line: int, raw: dict[str, Any]) -> Prompt:
    """Validate one raw record and build its :class:`Prompt`."""
    if "prompt" in raw and "text" in raw:
        raise SuiteError(path, line, "both 'prompt' and its alias 'text' are given; use one")
    try:
        record = PromptRecord.model_validate(raw)
    except ValidationError as exc:
        raise SuiteError(path, line, describe_validation_error(exc)) from exc
    turns = record.messages
    offer = offer_of(record.tools, record.tool_choice, record.response_format)
    if turns is None:
        assert record.prompt is not None  # the model validator requires one of the two
        text, system = record.prompt, record.system
        if offer:
            derived = derive_prompt_id(json.dumps([text, offer], ensure_ascii=False))
        else:
            derived = derive_prompt_id(text)
    else:
        text = next(turn.content or "" for turn in reversed(turns) if turn.role == "user")
        system = turns[0].content if turns[0].role == "system" else None
        derived = conversation_id(turns, offer)
    answer = record.answer
    return Prompt(
        id=record.id if record.id is not None else derived,
        text=text,
        category=record.category,
        max_tokens=record.max_tokens,
        answer=canonical_calls(answer) if isinstance(answer, tuple) else answer,
        answer_kind=record.answer_kind,
        system=system,
        source=f"{path}:{line}",
        messages=turns,
        tools=record.tools,
        tool_choice=record.tool_choice,
        response_format=record.response_format,
    )


def describe_validation_error(exc: ValidationError) -> str:
    """Turn pydantic errors into one message that names every offending field."""
    messages: list[str] = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            messages.append(f"unknown key {field!r} (allowed keys: {', '.join(RECORD_KEYS)})")
        elif error["type"] == "missing":
            messages.append(f"missing required field {field!r}")
        elif field:
            messages.append(f"field {field!r}: {message}")
        else:
            messages.append(message)
    return "; ".join(messages)
