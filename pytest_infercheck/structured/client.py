"""The :class:`~.records.StructuredChat` capability over a server's
:class:`~..backends.http.HttpClient` (its retries, API-key header and exchange recording
are the backend's own): each path's wire shape sent, its answer read.

Paths of an OpenAI-compatible server (:class:`ChatServerClient`):

- ``chat``: ``/v1/chat/completions``, ``stream: false``, the request's ``n``
  (:func:`~.read_chat.read_chat`);
- ``chat-stream``: the same with ``stream: true`` (:func:`~.read_chat_stream.
  assemble_chat_stream`);
- ``chat-n2``: ``chat`` with ``n: 2``;
- ``messages`` / ``messages-stream``: Anthropic ``/v1/messages``
  (:mod:`.read_messages`).

Ollama (:class:`OllamaChatClient`): ``chat`` and ``chat-stream`` are ``/api/chat`` with
``stream`` false or true (NDJSON).

What comes back:

- An error status, 4xx or 5xx: :class:`~.records.RequestFailed` with the status and the
  server's own message. A refusal is a failure like any other: whether the server offers a
  path at all (``/v1/messages``, ``n: 2`` on a llama-server with one slot) is what its
  ability probe decides before the check's requests (:mod:`.probe`), and a path it lacks
  is not sent.
- A path the client does not have (not in :meth:`ChatServerClient.structured_paths`), or
  a request the path cannot express (``response_format`` on messages):
  :class:`~.records.Inexpressible`, and nothing is sent.
- A 2xx body that is not JSON or is empty, a stream line that is not JSON, and any answer
  the path's reader cannot read (no choices, a stream without its end):
  :class:`~.records.MalformedResponse`.
- No answer (a timeout after the retries, a stream cut off) or an error event in a stream:
  the :class:`~..backends.http.HttpError` / :class:`~..backends.base.BackendError` it is.
"""

from __future__ import annotations

from typing import Any

from ..backends.http import DONE, HttpClient, HttpError, MalformedEvent
from ..backends.http import error_message as _message
from .read_chat import read_chat
from .read_chat_stream import assemble_chat_stream
from .read_messages import assemble_message_stream, read_message
from .read_ollama import read_ollama_chat
from .records import (
    Inexpressible,
    MalformedResponse,
    Path,
    RequestFailed,
    StructuredRequest,
    StructuredResponse,
)
from .wire_chat import chat_payload
from .wire_messages import messages_payload
from .wire_ollama import ollama_payload

CHAT_PATHS: tuple[Path, ...] = ("chat", "chat-stream", "chat-n2")
ALL_PATHS: tuple[Path, ...] = (*CHAT_PATHS, "messages", "messages-stream")


def classified(exc: HttpError, label: str) -> Exception:
    """The structured error of a failed request: unreadable -> :class:`MalformedResponse`,
    an error status -> :class:`RequestFailed` (with the server's message), else ``exc``
    itself (no answer)."""
    if isinstance(exc, MalformedEvent) or (exc.status is not None and exc.status < 400):
        return MalformedResponse(f"{label}: {exc}")
    if exc.status is not None:
        return RequestFailed(label, exc.status, _message(exc.body))
    return exc


async def post(http: HttpClient, label: str, url_path: str, body: Any) -> Any:
    """The decoded JSON answer of one POST, failures :func:`classified`."""
    try:
        return await http.request("POST", url_path, body)
    except HttpError as exc:
        raise classified(exc, label) from exc


async def post_stream(
    http: HttpClient, label: str, url_path: str, body: Any, *, sse: bool = True
) -> tuple[list[Any], bool]:
    """The decoded events of one streamed POST and whether ``data: [DONE]`` ended it,
    failures :func:`classified`."""
    events: list[Any] = []
    ended = False
    try:
        async for event in http.stream(url_path, body, sse=sse, mark_done=True):
            if event is DONE:
                ended = True
            else:
                events.append(event)
    except HttpError as exc:
        raise classified(exc, label) from exc
    return events, ended


class ChatServerClient:
    """An OpenAI-compatible chat server's paths (``paths``: those the client sends; which
    the server offers is probed)."""

    def __init__(self, http: HttpClient, model: str | None, paths: tuple[Path, ...]) -> None:
        self.http = http
        self.model = model
        """The ``model`` field sent (None: none, for servers that serve one model)."""
        self.paths = paths

    def structured_paths(self) -> tuple[Path, ...]:
        return self.paths

    async def structured(self, request: StructuredRequest, path: Path) -> StructuredResponse:
        label = f"{self.http.name} {path}"
        if path not in self.paths:
            raise Inexpressible(f"{label}: not offered (offered: {', '.join(self.paths)})")
        if path in ("chat", "chat-n2"):
            n = 2 if path == "chat-n2" else request.n
            body = chat_payload(request, self.model, n=n)
            answer = await post(self.http, label, "/v1/chat/completions", body)
            return read_chat(answer, path, asked_n=n)
        if path == "chat-stream":
            body = chat_payload(request, self.model, stream=True)
            events, ended = await post_stream(self.http, label, "/v1/chat/completions", body)
            return assemble_chat_stream(events, path, ended=ended, asked_n=request.n)
        stream = path == "messages-stream"
        body = messages_payload(request, self.model, stream=stream)
        if not stream:
            return read_message(await post(self.http, label, "/v1/messages", body), path)
        events, _ = await post_stream(self.http, label, "/v1/messages", body)
        return assemble_message_stream(events, path)


class OllamaChatClient:
    """Ollama's ``/api/chat``: ``chat`` and ``chat-stream``."""

    PATHS: tuple[Path, ...] = ("chat", "chat-stream")

    def __init__(self, http: HttpClient, model: str) -> None:
        self.http = http
        self.model = model

    def structured_paths(self) -> tuple[Path, ...]:
        return self.PATHS

    async def structured(self, request: StructuredRequest, path: Path) -> StructuredResponse:
        label = f"{self.http.name} {path}"
        if path not in self.PATHS:
            raise Inexpressible(f"{label}: not offered (offered: {', '.join(self.PATHS)})")
        stream = path == "chat-stream"
        body = ollama_payload(request, self.model, stream=stream)
        if not stream:
            return read_ollama_chat([await post(self.http, label, "/api/chat", body)], path)
        events, _ = await post_stream(self.http, label, "/api/chat", body, sse=False)
        return read_ollama_chat(events, path)
