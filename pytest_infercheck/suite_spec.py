"""The types of a prompt suite (:class:`Prompt`, :class:`Suite`, :class:`SuiteError`) and the
constants its records are checked against; loading and validation live in :mod:`.suites` and
the ``suite_*`` modules it uses (:mod:`.suite_files`: finding and reading the file;
:mod:`.suite_records`: one record's schema; :mod:`.suite_turns`: conversations, calls and
tools; :mod:`.suite_ids`: derived prompt ids)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .conversation import Turn
from .tools import Tool
from .yamlpos import SourceError

RESERVED_IDS = frozenset({"aggregate", "self-check"})
"""Prompt ids that are used by infercheck itself for synthetic test items."""

ANSWER_KINDS = frozenset({"number", "boolean", "choice", "code", "json", "exact", "tool_call"})
"""Allowed values of ``answer_kind``."""

SUITE_SUFFIXES = (".jsonl", ".yaml", ".yml")
"""File suffixes recognised as suite files."""


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
    bucket: str | None = None
    """A generated suite's group of the prompt (``context-ladder``: its length, ``2x``),
    which a comparison's aggregate reports apart; None in a suite file."""
    meta: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    """What a generated suite says of the prompt (``context-ladder``: its tokens)."""


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


def type_name(value: Any) -> str:
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
