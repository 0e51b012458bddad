"""The records of structured responses (:mod:`.judge` reads and compares them,
:mod:`.validity` finds their faults): each path's answer (:class:`PathResult`), its choices
and calls, its validity faults (:class:`Invalid`) and the differences of two answers
(:class:`Comparison`). Plain dataclasses; their field names are the JSON results' keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..records import OMIT_WHEN_EMPTY

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
    "malformed-call",
    "choices",
    "arguments-not-json",
    "unknown-function",
    "arguments-schema",
    "response-format",
    "tool-choice",
    "finish-reason",
)
Status = Literal["answered", "unsupported", "not exercised", "error", "malformed"]
"""What came back through a path: an answer; nothing, because the target's probe found the
path lacking (``unsupported``) or the path cannot express the request (``not exercised``,
decided before sending); a failed request (``error``: a refusal or a server error, which
fails the item) or a response the reader could not read (``malformed``, a validity
fault)."""
SHOWN = 160
"""Characters of a text quoted in a difference."""


def clipped(text: str, limit: int = SHOWN) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit})"


@dataclass(frozen=True)
class CallRecord:
    """One call as a response gave it."""

    name: str
    arguments: str
    """The arguments' canonical JSON (:func:`~pytest_infercheck.tools.canonical_json`), or
    their raw text when they are not JSON (:attr:`valid` False; a malformed ``<tool_call>``
    block from text: the block's text, with an empty :attr:`name`)."""
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
        """``add({"a":12,"b":34})`` (raw arguments: ``add('{"a": 1' not JSON)``; a malformed
        block from text: ``malformed call '{"name": "add", ...}'``)."""
        if not self.name and not self.valid:
            return f"malformed call {self.arguments!r}"
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
    """Why there is no answer: what the target's probe saw of the lacking path
    (``unsupported``), why the path cannot express the request (``not exercised``), the
    server's status and message (``error``: refused or failed), the reader's complaint
    (``malformed``)."""
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


@dataclass(frozen=True)
class NotAnswered:
    """Why a path has no answer to read: its :data:`Status` (not ``answered``) and the
    message (the probe's evidence, why the path cannot express the request, the server's
    error, the reader's complaint)."""

    status: str
    message: str
