"""A non-streamed chat completion read into a :class:`~.records.StructuredResponse`.

Per choice (ordered by ``index``): ``message.content`` as returned (a ``<think>`` block or a
``<tool_call>`` block left in it stays there: where the server put things is what is
compared); ``reasoning_content`` (llama-server, vLLM) or ``reasoning`` (vLLM's newer name);
``tool_calls`` with each call's JSON-string arguments parsed by :meth:`~..tools.ToolCall.
parse` (text that is not JSON stays text, ``arguments_valid=False``), then the calls left
in the content (:func:`~.records.calls_left_in`); ``finish_reason`` as the server
said it. ``usage``: ``prompt_tokens`` and ``completion_tokens``.

What is not a chat completion is :class:`~.records.MalformedResponse`: not an object, no
``choices`` (or an empty list), a choice without a ``message`` object, a content that is
neither text nor null, a ``tool_calls`` entry without a function name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends.base import BackendError
from ..tools import ToolCall
from .records import (
    MalformedResponse,
    Path,
    PlacedCall,
    StructuredChoice,
    StructuredResponse,
    calls_left_in,
)
from .usage import read_usage


def server_error(doc: Any, where: str) -> None:
    """Raise the error a server reported in a body or stream event (``{"error": ...}``)."""
    if isinstance(doc, dict) and doc.get("error") is not None:
        error = doc["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise BackendError(f"{where}: the server reported an error: {str(message)[:300]}")


def ordered_choices(choices: Sequence[Any], notes: list[str]) -> list[Any]:
    """``choices`` in the order of their ``index`` when they are numbered 0..n-1 (else as
    listed, noted)."""
    indices = [c.get("index") if isinstance(c, dict) else None for c in choices]
    numbered = [i for i in indices if isinstance(i, int) and not isinstance(i, bool)]
    if sorted(numbered) == list(range(len(choices))):
        return [choices[numbered.index(i)] for i in range(len(choices))]
    notes.append(f"choice indices {indices} are not 0..{len(choices) - 1}: read as listed")
    return list(choices)


def text_field(doc: dict[str, Any], key: str, where: str) -> str | None:
    """``doc[key]`` when it is text or absent/null; anything else is malformed."""
    value = doc.get(key)
    if value is None or isinstance(value, str):
        return value
    raise MalformedResponse(f"{where}: {key} is {type(value).__name__}, not text: {value!r:.200}")


def reasoning_of(doc: dict[str, Any], where: str, notes: list[str]) -> str | None:
    """``reasoning_content``, else ``reasoning`` (both given and different: noted)."""
    first = text_field(doc, "reasoning_content", where)
    second = text_field(doc, "reasoning", where)
    if first is not None and second is not None and first != second:
        notes.append(f"{where}: reasoning_content and reasoning differ; reasoning_content read")
    return first if first is not None else second


def openai_call(entry: Any, where: str) -> PlacedCall:
    """One ``tool_calls`` entry of a message."""
    function = entry.get("function") if isinstance(entry, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise MalformedResponse(f"{where}: a tool call without a function name: {entry!r:.200}")
    call_id = entry.get("id")
    arguments = function.get("arguments")
    return PlacedCall(
        ToolCall.parse(name, "" if arguments is None else arguments),
        "tool_calls",
        call_id if isinstance(call_id, str) else None,
    )


def read_chat(answer: Any, path: Path, *, asked_n: int = 1) -> StructuredResponse:
    """A ``/v1/chat/completions`` answer (``stream: false``) sent through ``path``; a
    number of choices other than ``asked_n`` is noted."""
    server_error(answer, path)
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse(f"{path}: a chat completion without choices: {answer!r:.300}")
    notes: list[str] = []
    read: list[StructuredChoice] = []
    for position, choice in enumerate(ordered_choices(choices, notes)):
        where = f"{path} choice {position}"
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise MalformedResponse(f"{where}: no message object: {choice!r:.300}")
        content = text_field(message, "content", where)
        entries = message.get("tool_calls")
        if entries is not None and not isinstance(entries, list):
            raise MalformedResponse(f"{where}: tool_calls is not a list: {entries!r:.200}")
        calls = tuple(openai_call(entry, where) for entry in entries or ())
        finish = choice.get("finish_reason")
        read.append(
            StructuredChoice(
                content=content,
                reasoning=reasoning_of(message, where, notes),
                calls=calls + calls_left_in(content),
                finish_reason=finish if isinstance(finish, str) else None,
            )
        )
    if len(read) != asked_n:
        notes.append(f"asked for {asked_n} choice(s), got {len(read)}")
    usage = read_usage(answer.get("usage"), "prompt_tokens", "completion_tokens")
    return StructuredResponse(path, tuple(read), usage, tuple(notes))
