"""Prompt suites: loading, validating and addressing the prompts that infercheck runs.

A suite is a file of prompt records, either JSON Lines (``.jsonl``: one JSON object per line) or
YAML (``.yaml`` / ``.yml``: a top-level list of records, or a mapping with a ``prompts:`` list).
Eight suites ship with the package (see :func:`bundled_suite_names`) and can be referred to by name.

Each record accepts these keys:

``id``
    Optional stable identifier (``^[A-Za-z0-9_.-]+$``, not one of :data:`RESERVED_IDS`). When it
    is missing, one is derived from the prompt text with :func:`derive_prompt_id`.
``prompt`` (alias ``text``)
    The user message (non-empty); exactly one of ``prompt`` and ``messages`` is required.
``messages``
    A conversation instead of ``prompt`` (see :mod:`.conversation`): a list of turns, each
    ``{"role": ..., "content": ...}`` or ``{"role": "assistant", "generate": true}`` (produced
    by the target and fed back). An optional first ``system`` turn, then ``user`` and
    ``assistant`` turns alternating, starting with ``user`` and ending with ``user`` or with
    tool results. With ``tools``, an assistant turn may call them (``"tool_calls": [{"name":
    ..., "arguments": {...}}, ...]``, ``content`` then optional) and must then be followed by
    one ``{"role": "tool", "name": ..., "content": ...}`` turn per call, in the calls' order,
    each naming its call's function; after the results comes an assistant turn (the answer to
    them, given, ``generate`` or calling again) or the end of the conversation (the target
    answers the results). The prompt's ``text`` is the last user turn's, ``system`` the
    system turn's; ``answer`` / ``answer_kind`` apply to the target's answer to the last
    turn. Without an ``id``, one is derived from every turn. A ``system`` key beside
    ``messages`` is an error (give a system turn).
``category``
    Optional short topic tag.
``max_tokens``
    Optional positive integer generation budget.
``answer`` / ``answer_kind``
    Optional reference answer (a string; JSON/YAML numbers and booleans are converted to strings)
    and how to compare it: one of :data:`ANSWER_KINDS`. ``answer_kind`` is required whenever
    ``answer`` is given; it may be given alone (e.g. ``code`` with no reference solution).
    The answer must be one value of its kind as read by the parser that scores outputs
    (:func:`~pytest_infercheck.metrics.answers.parse_reference`): ``"12,34"`` is not a number.
    Of ``answer_kind: tool_call`` (which needs ``tools``), ``answer`` is one call ``{"name":
    ..., "arguments": {...}}`` or a non-empty list of them, each naming an offered tool with
    arguments valid against its ``parameters``; it is kept as
    :func:`~pytest_infercheck.tools.canonical_calls` of the calls.
``system``
    Optional system message.
``tools``
    Optional non-empty list of functions offered to the model, as OpenAI function schemas:
    ``{"type": "function", "function": {"name": ..., "description": ..., "parameters":
    {...}}}`` with a name of letters, digits, ``_`` and ``-`` (at most 64, unique in the
    list), an optional description and ``parameters`` a valid JSON schema of ``type:
    object`` (``{"type": "object", "properties": {}}``: no arguments).
``tool_choice``
    Optional, with ``tools``: ``auto``, ``none``, ``required`` or ``{"type": "function",
    "function": {"name": ...}}`` naming an offered tool (sent to servers as OpenAI
    ``tool_choice``; a chat template does not see it). ``none`` contradicts a ``tool_call``
    answer, and a named function one that calls another function.
``response_format``
    Optional JSON schema (the schema itself, not OpenAI's ``{"type": "json_schema", ...}``
    wrapper) the answer's content must follow; it must be a valid schema (of the draft its
    ``$schema`` names, else 2020-12).

Any other key is an error. Every problem is reported as a :class:`SuiteError` whose message
starts with ``path:line:`` so that it can be located in the file, and names the field (and
turn, tool or call) at fault.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
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
from .tools import Tool, ToolCall, canonical_calls, canonical_json, schema_problem
from .yamlpos import SourceError, load_positioned

__all__ = [
    "ANSWER_KINDS",
    "RESERVED_IDS",
    "SUITE_SUFFIXES",
    "Prompt",
    "Suite",
    "SuiteError",
    "bundled_suite_names",
    "bundled_suites_dir",
    "derive_prompt_id",
    "load_suite",
    "parse_turns",
]

RESERVED_IDS = frozenset({"aggregate", "self-check"})
"""Prompt ids that are used by infercheck itself for synthetic test items."""

ANSWER_KINDS = frozenset({"number", "boolean", "choice", "code", "json", "exact", "tool_call"})
"""Allowed values of ``answer_kind``."""

SUITE_SUFFIXES = (".jsonl", ".yaml", ".yml")
"""File suffixes recognised as suite files."""

_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_RECORD_KEYS = (
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
_TURN_KEYS = ("role", "content", "generate", "tool_calls", "name")
_ROLES = ("system", "user", "assistant", "tool")
_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOOL_CHOICES = ("auto", "none", "required")


class SuiteError(SourceError):
    """A suite could not be found, parsed or validated.

    The message is ``"<path>:<line>: <reason>"`` (or ``"<path>: <reason>"`` for problems that
    concern the whole file, such as a missing or empty file).
    """


@dataclass(frozen=True)
class Prompt:
    """One validated prompt of a suite."""

    id: str
    text: str
    category: str | None
    max_tokens: int | None
    answer: str | None
    answer_kind: str | None
    system: str | None
    """The system message (of a conversation: its system turn's content)."""
    source: str
    """Where the record was defined, as ``"file:line"``."""
    messages: tuple[Turn, ...] | None = None
    """The conversation's turns (see :mod:`.conversation`); None: a single-turn ``prompt``
    (``text`` and ``system``). Of a conversation, ``text`` is the last user turn's."""
    tools: tuple[Tool, ...] = ()
    """The functions offered to the model (:mod:`.tools`); empty: none."""
    tool_choice: str | Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    """OpenAI ``tool_choice`` (``auto``, ``none``, ``required`` or a named function).
    Compared, not hashed (a dict), as is ``response_format``."""
    response_format: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    """A JSON schema the answer's content must follow (constrained decoding)."""


@dataclass(frozen=True)
class Suite:
    """A named, ordered collection of prompts loaded from one file."""

    name: str
    path: Path
    prompts: tuple[Prompt, ...]

    def limited(self, n: int | None) -> Suite:
        """Return a suite with only the first ``n`` prompts in file order (``None``: all)."""
        if n is None:
            return self
        if n < 0:
            raise ValueError(f"prompt limit must be >= 0, got {n}")
        return dataclasses.replace(self, prompts=self.prompts[:n])


def bundled_suites_dir() -> Path:
    """Directory holding the bundled suites.

    In an installed wheel the suites live next to this module (``pytest_infercheck/suites/``);
    in a source checkout they are the repository's top-level ``suites/`` directory.
    """
    installed = Path(__file__).parent / "suites"
    if installed.is_dir():
        return installed
    return Path(__file__).parent.parent / "suites"


def bundled_suite_names() -> list[str]:
    """Sorted names (file stems) of the bundled suites."""
    directory = bundled_suites_dir()
    if not directory.is_dir():
        return []
    return sorted(
        {p.stem for p in directory.iterdir() if p.is_file() and p.suffix in SUITE_SUFFIXES}
    )


def derive_prompt_id(text: str) -> str:
    """Stable id for a prompt without one: ``"p"`` + first 10 hex digits of sha256(text)."""
    return "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def load_suite(ref: str, base_dir: Path) -> Suite:
    """Load and validate a suite.

    ``ref`` is either the name of a bundled suite (e.g. ``"reasoning"``) or a path, relative to
    ``base_dir`` unless absolute, to a ``.jsonl``, ``.yaml`` or ``.yml`` file. The suite is named
    after the bundled suite or the file stem.

    Raises:
        SuiteError: the suite does not exist or is invalid; the message names file and line.
    """
    path, name = _resolve(ref, base_dir)
    try:
        content = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SuiteError(path, None, f"file is not valid UTF-8: {exc.reason}") from exc
    except OSError as exc:
        raise SuiteError(path, None, f"cannot read suite file: {exc.strerror or exc}") from exc

    if path.suffix == ".jsonl":
        records = list(_jsonl_records(path, content))
    else:
        records = list(_yaml_records(path, content))
    if not records:
        raise SuiteError(path, None, "suite contains no prompts")

    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for line, raw in records:
        prompt = _validate_record(path, line, raw)
        if prompt.id in first_line:
            note = "" if "id" in raw else " (derived from the prompt text)"
            lines = f"lines {first_line[prompt.id]} and {line}"
            raise SuiteError(path, line, f"duplicate prompt id {prompt.id!r}{note}: {lines}")
        first_line[prompt.id] = line
        prompts.append(prompt)
    return Suite(name=name, path=path, prompts=tuple(prompts))


# --------------------------------------------------------------------------------------------
# Resolution


def _resolve(ref: str, base_dir: Path) -> tuple[Path, str]:
    """Map a suite reference to (file path, suite name)."""
    names = bundled_suite_names()
    if ref in names:
        directory = bundled_suites_dir()
        for suffix in SUITE_SUFFIXES:
            candidate = directory / f"{ref}{suffix}"
            if candidate.is_file():
                return candidate, ref

    path = Path(ref).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    available = ", ".join(names) if names else "(none found)"
    if not path.exists():
        raise SuiteError(
            path,
            None,
            f"suite {ref!r} not found: it is neither a bundled suite nor an existing file "
            f"(bundled suites: {available})",
        )
    if not path.is_file():
        raise SuiteError(path, None, f"suite {ref!r} is not a file (bundled suites: {available})")
    if path.suffix not in SUITE_SUFFIXES:
        raise SuiteError(
            path,
            None,
            f"unsupported suite file type {path.suffix or '(no suffix)'!r}: "
            f"expected one of {', '.join(SUITE_SUFFIXES)} (bundled suites: {available})",
        )
    return path, path.stem


# --------------------------------------------------------------------------------------------
# Parsing


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads` that refuses repeated keys."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    """``parse_constant`` for :func:`json.loads`: NaN and Infinity are not valid JSON."""
    raise ValueError(f"{name} is not allowed")


def _jsonl_records(path: Path, content: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, record) for each non-blank, non-comment JSONL line."""
    # Split on "\n" only: str.splitlines() would also split on characters such as U+2028 that
    # may legitimately appear inside JSON strings, and the line numbers would drift.
    for number, line in enumerate(content.split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", "#")):
            continue
        try:
            record = json.loads(
                stripped,
                object_pairs_hook=_reject_duplicate_keys,
                parse_float=Decimal,
                parse_constant=_reject_constant,
            )
        except json.JSONDecodeError as exc:
            raise SuiteError(path, number, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
        except ValueError as exc:
            raise SuiteError(path, number, f"invalid JSON: {exc}") from exc
        if not isinstance(record, dict):
            raise SuiteError(path, number, f"expected a JSON object, got {_type_name(record)}")
        yield number, record


def _yaml_records(path: Path, content: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, record) for each record of a YAML suite: a top-level list,
    or a mapping whose only key is ``prompts:``."""
    try:
        source = load_positioned(path, content)
    except SourceError as exc:
        raise SuiteError(exc.path, exc.line, exc.reason) from exc
    items: Any = source.data
    prefix: tuple[str, ...] = ()
    if items is None:
        return
    if isinstance(items, dict):
        for key in items:
            if key != "prompts":
                raise SuiteError(
                    path,
                    source.line_of((key,)),
                    f"unknown top-level key {key!r}: a suite mapping may only contain 'prompts'",
                )
        if "prompts" not in items:
            raise SuiteError(path, 1, "top-level mapping has no 'prompts' key")
        items, prefix = items["prompts"], ("prompts",)
    if not isinstance(items, list):
        raise SuiteError(
            path,
            source.line_of(prefix),
            "expected a list of prompt records (or a mapping with a 'prompts:' list)",
        )
    for index, record in enumerate(items):
        line = source.line_of((*prefix, index)) or 1
        if not isinstance(record, dict):
            raise SuiteError(path, line, f"expected a mapping, got {_type_name(record)}")
        yield line, record


def _type_name(value: Any) -> str:
    """Human-readable JSON-ish type name of a parsed value."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


# --------------------------------------------------------------------------------------------
# Validation


class _PromptRecord(BaseModel):
    """Schema of one prompt record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: StrictStr | None = None
    prompt: StrictStr | None = Field(default=None, validation_alias=AliasChoices("prompt", "text"))
    messages: tuple[Turn, ...] | None = None
    category: StrictStr | None = None
    max_tokens: StrictInt | None = Field(default=None, gt=0)
    answer: StrictStr | tuple[ToolCall, ...] | None = None
    """A reference answer; of ``answer_kind: tool_call`` the reference calls (parsed, not yet
    checked against the tools: :func:`_check_tool_use`)."""
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
        if not _ID_RE.match(value):
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
    def _check_prompt_or_messages(self) -> _PromptRecord:
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
            return _parse_calls(value if isinstance(value, list) else [value], "")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _parse_tools(cls, value: Any) -> tuple[Tool, ...]:
        return parse_tools(value)

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _check_tool_choice(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value in _TOOL_CHOICES):
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
            f"expected one of {', '.join(_TOOL_CHOICES)} or "
            '{"type": "function", "function": {"name": ...}}, got '
            f"{_shown(value)}"
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
    def _check_answer(self) -> _PromptRecord:
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
        problem = _answer_problem(self.answer, self.answer_kind)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_tools(self) -> _PromptRecord:
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
        problem = _tool_use_problem(self)
        if problem:
            raise ValueError(problem)
        return self


_REFERENCE_FORMS = {
    "number": "one number, e.g. 1234, 1,234.5 (thousands separators only in groups of 3), "
    "-0.3, 1e3, 3/4, \\frac{3}{4}, 50% or $12",
    "boolean": "one of yes/no/true/false",
    "choice": "one letter A-E, e.g. C or (c)",
    "json": "exactly one JSON object or array",
    "code": "non-blank code",
    "exact": "non-blank text",
}


def _answer_problem(answer: str, kind: str) -> str | None:
    """Describe why ``answer`` is not a valid reference of ``kind``, or return ``None``.

    The reference is parsed by :func:`~pytest_infercheck.metrics.answers.parse_reference`, the
    parser that scores it, so a reference that could never be matched (``"12,34"``) is an
    error here rather than a prompt whose answers silently compare as "changed".
    """
    if parse_reference(answer, kind) is not None:
        return None
    return f"answer {answer!r} is not a valid {kind!r} reference: expected {_REFERENCE_FORMS[kind]}"


def parse_turns(value: Any) -> tuple[Turn, ...]:
    """Validate a ``messages`` list (the rules of the module docstring) into its turns: the
    shape of each turn and their order. Whether the calls name offered tools with valid
    arguments is checked with the prompt's ``tools`` (:func:`_tool_use_problem`).

    Raises:
        ValueError: the list is malformed; the message names the offending turn (0-based).
    """
    if not isinstance(value, list) or not value:
        raise ValueError("'messages' must be a non-empty list of turns")
    turns = [_parse_turn(index, raw) for index, raw in enumerate(value)]
    _check_order(turns)
    return tuple(turns)


def _parse_turn(index: int, raw: Any) -> Turn:
    """One turn of ``messages`` (its shape only)."""
    where = f"turn {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {_type_name(raw)}")
    unknown = [key for key in raw if key not in _TURN_KEYS]
    if unknown:
        raise ValueError(
            f"{where}: unknown key {unknown[0]!r} (allowed keys: {', '.join(_TURN_KEYS)})"
        )
    role = raw.get("role")
    if role not in _ROLES:
        raise ValueError(f"{where}: 'role' must be one of {', '.join(_ROLES)}, got {role!r}")
    if "name" in raw and role != "tool":
        raise ValueError(f"{where}: only a tool turn has a 'name' (the function it answers)")
    if "tool_calls" in raw and role != "assistant":
        raise ValueError(f"{where}: only an assistant turn can have 'tool_calls'")
    if "generate" in raw:
        if raw["generate"] is not True:
            raise ValueError(f"{where}: 'generate' must be true (or left out)")
        if role != "assistant":
            raise ValueError(f"{where}: only an assistant turn can be 'generate'")
        if "content" in raw:
            raise ValueError(f"{where}: a 'generate' turn has no 'content'")
        if "tool_calls" in raw:
            raise ValueError(
                f"{where}: a 'generate' turn has no 'tool_calls' (give the calls, or generate)"
            )
        return Turn("assistant", None)
    content = raw.get("content")
    if "tool_calls" in raw:
        calls = raw["tool_calls"]
        if not isinstance(calls, list) or not calls:
            raise ValueError(f"{where}: 'tool_calls' must be a non-empty list of calls")
        if "content" in raw and not isinstance(content, str):
            raise ValueError(
                f"{where}: 'content' beside 'tool_calls' must be a string (or left out)"
            )
        return Turn("assistant", content or "", _parse_calls(calls, f"{where}: "))
    if not isinstance(content, str) or not content.strip():
        raise ValueError(
            f"{where}: 'content' must be a non-empty string (or, for an assistant turn, "
            "'generate': true or 'tool_calls')"
        )
    if role == "tool":
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: a tool turn needs 'name': the function whose result it is")
        return Turn("tool", content, name=name)
    return Turn(role, content)


def _check_order(turns: list[Turn]) -> None:
    """An optional first system turn, then user and assistant alternating, starting with user;
    an assistant turn with calls followed by one tool turn per call, in order, naming its
    call's function, then an assistant turn or the end; the last turn a user turn or the
    last result of a call."""
    start = 1 if turns[0].role == "system" else 0
    pending: list[tuple[int, int, ToolCall]] = []
    """The calls not yet answered: (turn index, call index, call)."""
    for index, turn in enumerate(turns[start:], start=start):
        previous = turns[index - 1] if index > start else None
        if turn.role == "system":
            raise ValueError(f"turn {index}: a system turn may only be the first turn")
        if pending:
            at, number, call = pending.pop(0)
            if turn.role != "tool":
                raise ValueError(
                    f"turn {index}: expected a tool turn (the result of call {number} of turn "
                    f"{at}, {call.name}), got {turn.role}"
                )
            if turn.name != call.name:
                raise ValueError(
                    f"turn {index}: the tool turn answers call {number} of turn {at}, "
                    f"{call.name}, but names {turn.name!r}"
                )
            continue
        if turn.role == "tool":
            raise ValueError(
                f"turn {index}: a tool turn must follow an assistant turn with 'tool_calls' "
                "(one tool turn per call, in order)"
            )
        if previous is not None and previous.role == "tool":
            expected = "assistant"
        else:
            expected = "user" if previous is None or previous.role == "assistant" else "assistant"
        if turn.role != expected:
            where = "first" if previous is None else f"after a {previous.role} turn"
            article = "an" if expected == "assistant" else "a"
            raise ValueError(
                f"turn {index}: expected {article} {expected} turn {where}, got {turn.role}"
            )
        pending = [(index, number, call) for number, call in enumerate(turn.tool_calls)]
    if len(turns) == start:
        raise ValueError("the conversation has no user turn")
    if pending:
        at, number, call = pending[0]
        raise ValueError(
            f"turn {at}: call {number} ({call.name}) has no tool turn with its result after it"
        )
    if turns[-1].role not in ("user", "tool"):
        raise ValueError(
            f"turn {len(turns) - 1}: the last turn must be a user turn or a tool result "
            "(the target answers it)"
        )


def _parse_calls(value: list[Any], where: str) -> tuple[ToolCall, ...]:
    """Tool calls written ``{"name": ..., "arguments": {...}}`` (their shape only; whether
    they name offered tools with valid arguments: :func:`_calls_problem`). ``where``
    prefixes each error (e.g. ``"turn 2: "``); numbers become floats or ints
    (:func:`plain_json`).

    Raises:
        ValueError: a call is malformed; the message names it by index.
    """
    if not value:
        raise ValueError(f"{where}expected at least one call")
    calls: list[ToolCall] = []
    for number, raw in enumerate(value):
        at = f"{where}call {number}"
        if not isinstance(raw, dict) or set(raw) != {"name", "arguments"}:
            got = _type_name(raw) if not isinstance(raw, dict) else f"keys {sorted(raw)}"
            raise ValueError(
                f'{at}: a call is {{"name": ..., "arguments": {{...}}}} (both keys, no '
                f"others), got {got}"
            )
        if not isinstance(raw["name"], str) or not raw["name"]:
            raise ValueError(f"{at}: 'name' must be a non-empty string")
        if not isinstance(raw["arguments"], dict):
            raise ValueError(
                f"{at} ({raw['name']}): 'arguments' must be an object (of the tool's "
                f"parameters), got {_type_name(raw['arguments'])}"
            )
        calls.append(ToolCall(raw["name"], plain_json(raw["arguments"])))
    return tuple(calls)


def parse_tools(value: Any) -> tuple[Tool, ...]:
    """A ``tools`` list of OpenAI function schemas as :class:`~.tools.Tool` (the rules of the
    module docstring).

    Raises:
        ValueError: an entry is malformed; the message names it by index (and name).
    """
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ValueError(
            "expected a non-empty list of OpenAI function schemas (leave 'tools' out to offer none)"
        )
    tools: list[Tool] = []
    for index, raw in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(raw, dict) or set(raw) != {"type", "function"}:
            got = _type_name(raw) if not isinstance(raw, dict) else f"keys {sorted(raw)}"
            raise ValueError(
                f'{where}: expected {{"type": "function", "function": {{...}}}}, got {got}'
            )
        if raw["type"] != "function":
            raise ValueError(f"{where}: 'type' must be 'function', got {_shown(raw['type'])}")
        function = raw["function"]
        if not isinstance(function, dict):
            raise ValueError(f"{where}: 'function' must be an object")
        unknown = sorted(set(function) - {"name", "description", "parameters"})
        if unknown:
            raise ValueError(
                f"{where}: unknown key {unknown[0]!r} in 'function' (allowed keys: name, "
                "description, parameters)"
            )
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME_RE.match(name):
            raise ValueError(
                f"{where}: 'name' must be 1-64 letters, digits, '_' or '-', got {_shown(name)}"
            )
        where = f"{where} ({name})"
        if any(tool.name == name for tool in tools):
            raise ValueError(f"{where}: the name is offered twice")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise ValueError(f"{where}: 'description' must be a string")
        if "parameters" not in function:
            raise ValueError(
                f"{where}: missing 'parameters' (the arguments' JSON schema; "
                '{"type": "object", "properties": {}} for none)'
            )
        parameters = plain_json(function["parameters"])
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ValueError(f"{where}: 'parameters' must be a JSON schema with type 'object'")
        problem = schema_problem(parameters)
        if problem:
            raise ValueError(f"{where}: 'parameters' is {problem}")
        tools.append(Tool(name, parameters, description))
    return tuple(tools)


def plain_json(value: Any) -> Any:
    """``value`` with the :class:`~decimal.Decimal` floats of the JSONL reader made floats (a
    tool's schema and a call's arguments are sent and compared as JSON, which
    ``json.dumps`` cannot write as Decimals)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {key: plain_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_json(item) for item in value]
    return value


def _tool_use_problem(record: _PromptRecord) -> str | None:
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
        problem = _calls_problem(turn.tool_calls, offered, f"turn {index}: ")
        if problem:
            return f"field 'messages': {problem}"
        # A tool turn names its call's function (_check_order), checked here as offered.
    if record.answer_kind == "tool_call" and isinstance(record.answer, tuple):
        problem = _calls_problem(record.answer, offered, "")
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


def _calls_problem(
    calls: Sequence[ToolCall], offered: Mapping[str, Tool], where: str
) -> str | None:
    """The first call of ``calls`` that names no tool of ``offered`` or whose arguments are
    not valid against its tool's ``parameters``, described; None: all are valid."""
    for number, call in enumerate(calls):
        tool = offered.get(call.name)
        if tool is None:
            return (
                f"{where}call {number} calls {call.name!r}, which is not an offered tool "
                f"(offered: {', '.join(offered)})"
            )
        problem = tool.arguments_problem(call.arguments)
        if problem:
            return (
                f"{where}call {number} ({call.name}): arguments {canonical_json(call.arguments)} "
                f"do not follow its parameters: {problem}"
            )
    return None


def _shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (for error messages)."""
    text = json.dumps(plain_json(value), ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _turn_payload(turn: Turn) -> list[Any]:
    """A turn as hashed into a derived conversation id: ``[role, content]``, plus its calls
    and function name when it has them (so plain conversations keep their ids)."""
    if not turn.tool_calls and turn.name is None:
        return [turn.role, turn.content]
    return [
        turn.role,
        turn.content,
        [json.loads(c.canonical()) for c in turn.tool_calls],
        turn.name,
    ]


def _conversation_id(turns: tuple[Turn, ...], offer: dict[str, Any]) -> str:
    """The derived id of a conversation: :func:`derive_prompt_id` of its turns as JSON (and
    of ``offer``, its tools, tool choice and response format, when it has any)."""
    payload: list[Any] = [_turn_payload(turn) for turn in turns]
    if offer:
        payload = [payload, offer]
    return derive_prompt_id(json.dumps(payload, ensure_ascii=False))


def _offer(record: _PromptRecord) -> dict[str, Any]:
    """What a record offers beside its text (tools, tool choice, response format) as JSON
    values, keyed by field; empty when none (the derived id then stays the text's)."""
    offer: dict[str, Any] = {}
    if record.tools:
        offer["tools"] = [tool.openai() for tool in record.tools]
    if record.tool_choice is not None:
        offer["tool_choice"] = record.tool_choice
    if record.response_format is not None:
        offer["response_format"] = record.response_format
    return offer


def _validate_record(path: Path, line: int, raw: dict[str, Any]) -> Prompt:
    """Validate one raw record and build its :class:`Prompt`."""
    if "prompt" in raw and "text" in raw:
        raise SuiteError(path, line, "both 'prompt' and its alias 'text' are given; use one")
    try:
        record = _PromptRecord.model_validate(raw)
    except ValidationError as exc:
        raise SuiteError(path, line, _describe_validation_error(exc)) from exc
    turns = record.messages
    offer = _offer(record)
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
        derived = _conversation_id(turns, offer)
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


def _describe_validation_error(exc: ValidationError) -> str:
    """Turn pydantic errors into one message that names every offending field."""
    messages: list[str] = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            messages.append(f"unknown key {field!r} (allowed keys: {', '.join(_RECORD_KEYS)})")
        elif error["type"] == "missing":
            messages.append(f"missing required field {field!r}")
        elif field:
            messages.append(f"field {field!r}: {message}")
        else:
            messages.append(message)
    return "; ".join(messages)
