"""The typed form of one structured chat request and of a server's answer to it, whatever
path it took (see :mod:`pytest_infercheck.structured`).

Every path's reader (non-streamed, assembled from a stream's deltas, Anthropic
``tool_use`` blocks, Ollama) returns a :class:`StructuredResponse`. What can go wrong:

- :class:`Inexpressible`: the path cannot express the request (``response_format`` on
  Anthropic messages, ``n: 2`` on Ollama's ``/api/chat``, a path the client does not have),
  raised before anything is sent;
- :class:`RequestFailed`: the server answered an error status, a refusal (4xx) or a failure
  (5xx), with its own message: the item fails. Whether a path or feature is offered at all
  is what the backend's ability probe says (:mod:`.probe`), never a refusal of the check's
  own request;
- :class:`MalformedResponse`: an answer that cannot be read (not JSON, no choices).

Calls left in a text are read by the one parser of ``<tool_call>`` blocks,
:func:`~pytest_infercheck.tools.calls_in_text` (:func:`calls_left_in`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..backends.base import BackendError
from ..tools import Tool, ToolCall, calls_in_text

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


def calls_left_in(text: str | None) -> tuple[PlacedCall, ...]:
    """The calls a server left in ``text`` (``<tool_call>`` blocks, read by
    :func:`~pytest_infercheck.tools.calls_in_text`: a malformed block is a malformed call,
    never dropped), each placed in ``content``."""
    return tuple(PlacedCall(call, "content") for call in calls_in_text(text or ""))


class Inexpressible(ValueError):
    """The path cannot express the request: nothing was sent (an engine never raises it, so
    it is never an engine's refusal or failure)."""


class RequestFailed(BackendError):
    """The server answered a request with an error status: a refusal (4xx) or a failure
    (5xx); ``status`` and the server's own ``message`` are kept."""

    def __init__(self, label: str, status: int, message: str) -> None:
        super().__init__(f"{label}: HTTP {status}: {message}")
        self.status = status
        self.message = message


class MalformedResponse(BackendError):
    """A response that is not one the path defines (not JSON, no choices, a stream without
    its end): a failure of the item naming the path."""


@runtime_checkable
class StructuredChat(Protocol):
    """A backend that answers structured chat requests through some of the paths."""

    def structured_paths(self) -> tuple[Path, ...]:
        """The paths this backend can send (``messages`` only for a kind of server that may
        have ``/v1/messages``); which of them the server offers is probed
        (:func:`~.probe.probe_paths`)."""
        ...

    async def structured(self, request: StructuredRequest, path: Path) -> StructuredResponse:
        """``request`` sent through ``path`` and read back.

        Raises:
            Inexpressible: the path cannot express the request (nothing sent).
            RequestFailed: the server answered an error status.
            MalformedResponse: the answer could not be read as the path defines.
            BackendError: no answer (a transport error after the retries, a broken stream).
        """
        ...
