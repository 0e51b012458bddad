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
    ``assistant`` turns alternating, starting and ending with ``user``. The prompt's ``text``
    is the last user turn's, ``system`` the system turn's; ``answer`` / ``answer_kind`` apply
    to the last turn. Without an ``id``, one is derived from every turn. A ``system`` key
    beside ``messages`` is an error (give a system turn).
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
``system``
    Optional system message.

Any other key is an error. Every problem is reported as a :class:`SuiteError` whose message
starts with ``path:line:`` so that it can be located in the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
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
from .tools import Tool
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
)
_TURN_KEYS = ("role", "content", "generate")
_ROLES = ("system", "user", "assistant")


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
    tool_choice: str | Mapping[str, Any] | None = None
    """OpenAI ``tool_choice`` (``auto``, ``none``, ``required`` or a named function)."""
    response_format: Mapping[str, Any] | None = None
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
    answer: StrictStr | None = None
    answer_kind: StrictStr | None = None
    system: StrictStr | None = None

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
        if self.answer is None:
            return self
        if self.answer_kind is None:
            raise ValueError("'answer' is given without 'answer_kind'")
        if not self.answer.strip():
            raise ValueError("'answer' must not be empty")
        problem = _answer_problem(self.answer, self.answer_kind)
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
    """Validate a ``messages`` list (the rules of the module docstring) into its turns.

    Raises:
        ValueError: the list is malformed; the message names the offending turn (0-based).
    """
    if not isinstance(value, list) or not value:
        raise ValueError("'messages' must be a non-empty list of turns")
    turns: list[Turn] = []
    for index, raw in enumerate(value):
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
        if "generate" in raw:
            if raw["generate"] is not True:
                raise ValueError(f"{where}: 'generate' must be true (or left out)")
            if role != "assistant":
                raise ValueError(f"{where}: only an assistant turn can be 'generate'")
            if "content" in raw:
                raise ValueError(f"{where}: a 'generate' turn has no 'content'")
            turns.append(Turn("assistant", None))
            continue
        content = raw.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(
                f"{where}: 'content' must be a non-empty string (or, for an assistant turn, "
                "'generate': true)"
            )
        turns.append(Turn(role, content))
    _check_order(turns)
    return tuple(turns)


def _check_order(turns: list[Turn]) -> None:
    """An optional first system turn, then user and assistant alternating, starting and
    ending with user."""
    start = 1 if turns[0].role == "system" else 0
    for index, turn in enumerate(turns[start:], start=start):
        expected = "user" if (index - start) % 2 == 0 else "assistant"
        if turn.role != expected:
            where = "first" if index == start else f"after a {turns[index - 1].role} turn"
            if turn.role == "system":
                raise ValueError(f"turn {index}: a system turn may only be the first turn")
            article = "an" if expected == "assistant" else "a"
            raise ValueError(
                f"turn {index}: expected {article} {expected} turn {where}, got {turn.role}"
            )
    if len(turns) == start:
        raise ValueError("the conversation has no user turn")
    if turns[-1].role != "user":
        raise ValueError(
            f"turn {len(turns) - 1}: the last turn must be a user turn (the target answers it)"
        )


def _conversation_id(turns: tuple[Turn, ...]) -> str:
    """The derived id of a conversation: :func:`derive_prompt_id` of its turns as JSON."""
    payload = [[turn.role, turn.content] for turn in turns]
    return derive_prompt_id(json.dumps(payload, ensure_ascii=False))


def _validate_record(path: Path, line: int, raw: dict[str, Any]) -> Prompt:
    """Validate one raw record and build its :class:`Prompt`."""
    if "prompt" in raw and "text" in raw:
        raise SuiteError(path, line, "both 'prompt' and its alias 'text' are given; use one")
    try:
        record = _PromptRecord.model_validate(raw)
    except ValidationError as exc:
        raise SuiteError(path, line, _describe_validation_error(exc)) from exc
    turns = record.messages
    if turns is None:
        assert record.prompt is not None  # the model validator requires one of the two
        text, system = record.prompt, record.system
        derived = derive_prompt_id(text)
    else:
        text = turns[-1].content or ""
        system = turns[0].content if turns[0].role == "system" else None
        derived = _conversation_id(turns)
    return Prompt(
        id=record.id if record.id is not None else derived,
        text=text,
        category=record.category,
        max_tokens=record.max_tokens,
        answer=record.answer,
        answer_kind=record.answer_kind,
        system=system,
        source=f"{path}:{line}",
        messages=turns,
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
