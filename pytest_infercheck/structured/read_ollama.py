"""An Ollama ``/api/chat`` answer, whole or assembled from its NDJSON stream, read into a
:class:`~.records.StructuredResponse` (one choice; Ollama's API documentation,
``docs/api.md``, and its streaming-tools announcement of 2025-05-28).

``message.content`` fragments concatenated (None when no object carried any), likewise
``message.thinking``; ``message.tool_calls`` (each ``{function: {name, arguments}}``,
arguments a JSON object; newer servers add ``id`` and ``function.index``) in the order they
arrive: a stream sends each call whole, in one object; then the calls left in the content.
``done_reason`` as Ollama says it (``stop`` after a call too: Ollama has no
``tool_calls`` reason, and it is not renamed here). ``usage``: ``prompt_eval_count`` and
``eval_count`` of the last object.

:class:`~.records.MalformedResponse`: an object that is not one, a ``message`` that is not
an object, a call without a function name, an answer whose last object is not
``done: true``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .read_chat import openai_call, server_error, text_field
from .records import (
    MalformedResponse,
    Path,
    PlacedCall,
    StructuredChoice,
    StructuredResponse,
    calls_left_in,
)
from .usage import read_usage

ollama_call = openai_call
"""One ``tool_calls`` entry of an Ollama message: the OpenAI entry's reading (Ollama's
arguments are an object, which :meth:`~pytest_infercheck.tools.ToolCall.parse` takes as
they are)."""


def read_ollama_chat(objects: Sequence[Any], path: Path) -> StructuredResponse:
    """The object of a ``stream: false`` answer (one), or a stream's objects in order."""
    content: list[str] = []
    thinking: list[str] = []
    calls: list[PlacedCall] = []
    for number, doc in enumerate(objects):
        where = f"{path} object {number}"
        server_error(doc, where)
        if not isinstance(doc, dict):
            raise MalformedResponse(f"{where}: not an object: {doc!r:.200}")
        message = doc.get("message", {})
        if not isinstance(message, dict):
            raise MalformedResponse(f"{where}: message is not an object: {message!r:.200}")
        text = text_field(message, "content", where)
        if text is not None:
            content.append(text)
        thought = text_field(message, "thinking", where)
        if thought is not None:
            thinking.append(thought)
        entries = message.get("tool_calls")
        if entries is not None and not isinstance(entries, list):
            raise MalformedResponse(f"{where}: tool_calls is not a list: {entries!r:.200}")
        calls.extend(ollama_call(entry, where) for entry in entries or ())
    last = objects[-1] if objects else None
    if not isinstance(last, dict) or last.get("done") is not True:
        raise MalformedResponse(f"{path}: the answer ended without an object with done: true")
    text = "".join(content) if content else None
    reason = last.get("done_reason")
    choice = StructuredChoice(
        content=text,
        reasoning="".join(thinking) if thinking else None,
        calls=tuple(calls) + calls_left_in(text),
        finish_reason=reason if isinstance(reason, str) else None,
    )
    return StructuredResponse(
        path, (choice,), read_usage(last, "prompt_eval_count", "eval_count"), ()
    )
