"""The typed form of one structured chat request and of a server's answer to it, whatever
path it took (see :mod:`pytest_infercheck.structured`).

Every path's reader (non-streamed, assembled from a stream's deltas, Anthropic
``tool_use`` blocks, Ollama) returns a :class:`StructuredResponse`; a server that refuses a
request it does not support (llama-server allows ``n: 1`` only) raises
:class:`UnsupportedRequest` with the server's own message, which the check records as
``unsupported`` rather than failed. A response that cannot be read (not JSON, no choices) is
a :class:`MalformedResponse`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..backends.base import BackendError
from ..tools import Tool, ToolCall

Path = Literal["chat", "chat-stream", "chat-n2", "messages", "messages-stream"]
"""How a request was sent: chat completions non-streamed (the reference), streamed (assembled
from its deltas), with ``n: 2``; Anthropic messages, non-streamed or streamed."""

CallPlace = Literal["tool_calls", "content"]
"""Where a call landed: the response's ``tool_calls`` (parsed by the server) or its text
content (left unparsed: ``<tool_call>{...}</tool_call>`` in ``content``)."""


@dataclass(frozen=True)
class ChatTurn:
    """One message of a request, in the OpenAI chat shape."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    """An assistant turn's calls."""
    tool_call_id: str | None = None
    """A ``tool`` turn: the id of the call it answers."""
    name: str | None = None
    """A ``tool`` turn: the function whose result it is."""


@dataclass(frozen=True)
class StructuredRequest:
    """One request, path-independent: each reader sends it in its path's own shape."""

    messages: tuple[ChatTurn, ...]
    max_tokens: int
    tools: tuple[Tool, ...] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    response_format: Mapping[str, Any] | None = None
    """A JSON schema the content must follow (sent as OpenAI ``response_format:
    {"type": "json_schema", ...}``, llama-server ``json_schema``)."""
    n: int = 1
    temperature: float = 0.0
    seed: int | None = 0


@dataclass(frozen=True)
class PlacedCall:
    """A call as it came back: the call, where it landed, and the server's call id."""

    call: ToolCall
    place: CallPlace
    call_id: str | None = None


@dataclass(frozen=True)
class StructuredChoice:
    """One choice of a response."""

    content: str | None
    """The text content (None or ``""`` when the server returned none)."""
    reasoning: str | None
    """``reasoning_content`` (or ``reasoning``, Anthropic ``thinking``) returned apart."""
    calls: tuple[PlacedCall, ...]
    """Every call found: the response's ``tool_calls`` and any ``<tool_call>`` left in
    ``content``, in order."""
    finish_reason: str | None
    """As the server said it, Anthropic ``stop_reason`` mapped to the OpenAI name
    (``tool_use`` -> ``tool_calls``, ``end_turn``/``stop_sequence`` -> ``stop``,
    ``max_tokens`` -> ``length``)."""


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass(frozen=True)
class StructuredResponse:
    """A server's answer to a :class:`StructuredRequest` through one path."""

    path: Path
    choices: tuple[StructuredChoice, ...]
    usage: Usage | None
    notes: tuple[str, ...] = field(default=())
    """What the reader noticed but could still read (a stream's ``tool_calls: null`` delta, a
    call's arguments sent as ``""``), each a short sentence."""


class UnsupportedRequest(BackendError):
    """The server refused a request it does not support (its message is kept): recorded as
    ``unsupported``, never as a failure."""


class MalformedResponse(BackendError):
    """A response that is not one the path defines (not JSON, no choices, a stream without
    its end): a failure of the item naming the path."""


@runtime_checkable
class StructuredChat(Protocol):
    """A backend that answers structured chat requests through some of the paths."""

    def structured_paths(self) -> tuple[Path, ...]:
        """The paths this server offers (``messages`` only where it has
        ``/v1/messages``)."""
        ...

    async def structured(self, request: StructuredRequest, path: Path) -> StructuredResponse:
        """``request`` sent through ``path`` and read back.

        Raises:
            UnsupportedRequest: the server refused what it does not support.
            MalformedResponse: the answer could not be read as the path defines.
        """
        ...
