"""An Anthropic ``/v1/messages`` answer, whole or assembled from its event stream, read into
a :class:`~.records.StructuredResponse` (one choice).

Blocks, in order: ``text`` blocks joined are the content (None without any), ``thinking``
blocks joined the reasoning, each ``tool_use`` block a call placed in ``tool_calls`` with
its ``id`` and its ``input`` (a JSON object) as arguments; then the calls left in the text.
``stop_reason`` mapped to the OpenAI name (:data:`FINISH`; another value kept as it is).
``usage``: the prompt is ``input_tokens`` plus ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` (Anthropic counts the tokens read from or written to the
prompt cache apart from ``input_tokens``: llama-server answers a repeated prompt with
``input_tokens: 1, cache_read_input_tokens: 218`` for a 219-token prompt), the completion
``output_tokens``.

The stream: ``message_start`` (its ``message.usage``; a later ``message_delta`` carrying
``input_tokens`` replaces it), ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``thinking_delta``, ``input_json_delta`` whose
``partial_json`` fragments are concatenated and parsed once complete) /
``content_block_stop``, ``message_delta`` (``stop_reason``, ``usage.output_tokens``),
``message_stop``. A delta for a block never started is noted (and read); a tool_use whose
input arrived as no fragment at all keeps its start's ``input``.

:class:`~.records.MalformedResponse`: not a message (no ``content`` list), a block that is
not an object, a ``tool_use`` without a name, a stream without ``message_stop``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..tools import ToolCall
from .read_chat import server_error
from .records import (
    MalformedResponse,
    Path,
    PlacedCall,
    StructuredChoice,
    StructuredResponse,
    Usage,
    calls_left_in,
)
from .usage import count

FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
"""Anthropic ``stop_reason`` -> OpenAI ``finish_reason``."""


def finish_reason(stop: Any) -> str | None:
    """``stop_reason`` under its OpenAI name (:data:`FINISH`), other text as it is."""
    return FINISH.get(stop, stop) if isinstance(stop, str) else None


def tool_use_call(block: dict[str, Any], arguments: Any, where: str) -> PlacedCall:
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedResponse(f"{where}: a tool_use block without a name: {block!r:.200}")
    call_id = block.get("id")
    return PlacedCall(
        ToolCall.parse(name, arguments), "tool_calls", call_id if isinstance(call_id, str) else None
    )


def _choice(
    blocks: Sequence[tuple[dict[str, Any], Any]], stop: Any, where: str
) -> StructuredChoice:
    """One choice from ``(block, tool_use arguments)`` pairs."""
    text = [str(b.get("text") or "") for b, _ in blocks if b.get("type") == "text"]
    thinking = [str(b.get("thinking") or "") for b, _ in blocks if b.get("type") == "thinking"]
    calls = tuple(tool_use_call(b, a, where) for b, a in blocks if b.get("type") == "tool_use")
    content = "".join(text) if text else None
    return StructuredChoice(
        content=content,
        reasoning="".join(thinking) if thinking else None,
        calls=calls + calls_left_in(content),
        finish_reason=finish_reason(stop),
    )


CACHE_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens")
"""Prompt tokens the messages API counts apart from ``input_tokens``."""


def prompt_count(usage: dict[str, Any]) -> int | None:
    """``input_tokens`` plus the cache counts given (None without ``input_tokens``)."""
    tokens = count(usage.get("input_tokens"))
    if tokens is None:
        return None
    return tokens + sum(count(usage.get(key)) or 0 for key in CACHE_KEYS)


def _usage(prompt: int | None, output_tokens: Any) -> Usage | None:
    completion = count(output_tokens)
    return None if prompt is None and completion is None else Usage(prompt, completion)


def read_message(answer: Any, path: Path) -> StructuredResponse:
    """A whole ``/v1/messages`` answer (``stream: false``)."""
    server_error(answer, path)
    content = answer.get("content") if isinstance(answer, dict) else None
    if not isinstance(answer, dict) or not isinstance(content, list):
        raise MalformedResponse(f"{path}: not a message (no content list): {answer!r:.300}")
    notes: list[str] = []
    blocks: list[tuple[dict[str, Any], Any]] = []
    for block in content:
        if not isinstance(block, dict):
            raise MalformedResponse(
                f"{path}: a content block that is not an object: {block!r:.200}"
            )
        if block.get("type") not in ("text", "thinking", "tool_use", "redacted_thinking"):
            notes.append(f"{path}: a content block of type {block.get('type')!r}, not read")
        blocks.append((block, block.get("input", {})))
    usage = _obj(answer.get("usage"))
    return StructuredResponse(
        path,
        (_choice(blocks, answer.get("stop_reason"), path),),
        _usage(prompt_count(usage), usage.get("output_tokens")),
        tuple(notes),
    )


@dataclass
class _Block:
    start: dict[str, Any]
    text: list[str] = field(default_factory=list)
    json: list[str] = field(default_factory=list)


def assemble_message_stream(events: Sequence[Any], path: Path) -> StructuredResponse:
    """The events of one streamed ``/v1/messages`` answer, in order, as one response."""
    notes: list[str] = []
    blocks: dict[int, _Block] = {}
    stop: Any = None
    prompt: int | None = None
    output_tokens: Any = None
    ended = False
    for number, event in enumerate(events):
        where = f"{path} event {number}"
        server_error(event, where)
        if not isinstance(event, dict):
            raise MalformedResponse(f"{where}: not an object: {event!r:.200}")
        kind = event.get("type")
        if kind == "message_start":
            usage = _obj(_obj(event.get("message")).get("usage"))
            prompt = prompt_count(usage) if "input_tokens" in usage else prompt
            output_tokens = usage.get("output_tokens", output_tokens)
        elif kind == "content_block_start":
            start = event.get("content_block")
            if not isinstance(start, dict):
                raise MalformedResponse(f"{where}: content_block is not an object")
            blocks[_index(event, where)] = _Block(dict(start))
        elif kind == "content_block_delta":
            index = _index(event, where)
            delta = _obj(event.get("delta"))
            block = blocks.get(index)
            if block is None:
                notes.append(f"{where}: a delta for block {index}, never started")
                kind_of = {"input_json_delta": "tool_use", "thinking_delta": "thinking"}
                block = blocks[index] = _Block(
                    {"type": kind_of.get(str(delta.get("type")), "text")}
                )
            if delta.get("type") == "text_delta":
                block.text.append(str(delta.get("text") or ""))
            elif delta.get("type") == "thinking_delta":
                block.text.append(str(delta.get("thinking") or ""))
            elif delta.get("type") == "input_json_delta":
                block.json.append(str(delta.get("partial_json") or ""))
        elif kind == "message_delta":
            stop = _obj(event.get("delta")).get("stop_reason", stop)
            usage = _obj(event.get("usage"))
            prompt = prompt_count(usage) if "input_tokens" in usage else prompt
            output_tokens = usage.get("output_tokens", output_tokens)
        elif kind == "message_stop":
            ended = True
    if not ended:
        raise MalformedResponse(f"{path}: the stream ended without message_stop")
    assembled: list[tuple[dict[str, Any], Any]] = []
    for index in sorted(blocks):
        block = blocks[index]
        whole = dict(block.start)
        if whole.get("type") == "text":
            whole["text"] = str(whole.get("text") or "") + "".join(block.text)
        elif whole.get("type") == "thinking":
            whole["thinking"] = str(whole.get("thinking") or "") + "".join(block.text)
        arguments: Any = whole.get("input", {})
        if block.json:
            arguments = "".join(block.json)
            if arguments == "":
                notes.append(f'{path}: tool_use block {index} streamed its input as ""')
        assembled.append((whole, arguments))
    return StructuredResponse(
        path, (_choice(assembled, stop, path),), _usage(prompt, output_tokens), tuple(notes)
    )


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (a field left out)."""
    return value if isinstance(value, dict) else {}


def _index(event: dict[str, Any], where: str) -> int:
    index = event.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise MalformedResponse(f"{where}: a content block event without an index")
    return index
