"""A streamed chat completion assembled from its SSE chunks into a
:class:`~.records.StructuredResponse`, to be compared with the same request non-streamed.

Per choice (the chunk's ``choices[].index``):

- ``delta.content`` fragments concatenated (None when none arrived), likewise
  ``delta.reasoning_content`` (or ``delta.reasoning``);
- ``delta.tool_calls`` entries merged by their ``index``: the first ``id`` given is the
  call's (a different later one is noted), ``function.name`` fragments appended (a
  fragment repeating the whole name so far is a repeat, not appended), ``function.
  arguments`` fragments concatenated and parsed once complete by :meth:`~..tools.ToolCall.
  parse`; calls in the order of their indices, then the calls left in the content;
- the last ``finish_reason`` given.

``usage``: the last chunk that carries one (with ``stream_options.include_usage`` a final
chunk with no choices; vllm-mlx 0.6.0 repeats it on the finishing chunk). More than one
usage chunk without choices is noted: llama-server (llama-cpp-python 0.3.36) answers ``n:
2`` with one per choice, each counting that choice alone.

Noted, because a broken server does it and the stream can still be read: a delta with
``tool_calls: null``; a call whose arguments arrived as ``""`` or not at all (``""`` is not
JSON: the call's arguments stay invalid, as they would non-streamed); a tool-call index
skipped (0, 2); a tool-call entry without ``index`` (taken as its position in the delta);
arguments sent as an object instead of a string.

:class:`~.records.MalformedResponse`: a chunk that is not an object, no chunk with
choices, a choice that never got a ``finish_reason``, a stream without ``data: [DONE]``
(``ended`` false), a delta field of the wrong type.
"""

from __future__ import annotations

import json
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
from .usage import read_usage


@dataclass
class _Call:
    """A tool call being assembled."""

    call_id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    got_arguments: bool = False


@dataclass
class _Choice:
    """A choice being assembled."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None
    null_calls: bool = False


def _text(delta: dict[str, Any], key: str, where: str) -> str | None:
    value = delta.get(key)
    if value is None or isinstance(value, str):
        return value
    raise MalformedResponse(f"{where}: delta.{key} is {type(value).__name__}: {value!r:.200}")


def _merge_call(state: _Choice, entry: Any, position: int, where: str, notes: list[str]) -> None:
    """One ``delta.tool_calls`` entry into the call of its index."""
    if not isinstance(entry, dict):
        raise MalformedResponse(f"{where}: a tool-call delta that is not an object: {entry!r:.200}")
    index = entry.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        notes.append(f"{where}: a tool-call delta without index, taken as {position}")
        index = position
    call = state.calls.setdefault(index, _Call())
    call_id = entry.get("id")
    if isinstance(call_id, str) and call_id:
        if call.call_id is None:
            call.call_id = call_id
        elif call.call_id != call_id:
            notes.append(f"{where}: call {index} sent id {call_id!r} after {call.call_id!r}")
    function = entry.get("function")
    if function is None:
        return
    if not isinstance(function, dict):
        raise MalformedResponse(f"{where}: tool-call function is not an object: {function!r:.200}")
    name = function.get("name")
    if isinstance(name, str) and name and name != call.name:
        call.name += name
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        call.arguments.append(arguments)
        call.got_arguments = True
    elif arguments is not None:
        notes.append(f"{where}: call {index} sent its arguments as {type(arguments).__name__}")
        call.arguments.append(json.dumps(arguments, ensure_ascii=False))
        call.got_arguments = True


def _finish_calls(state: _Choice, where: str, notes: list[str]) -> tuple[PlacedCall, ...]:
    """The assembled calls, in index order, with the notes their shapes call for."""
    indices = sorted(state.calls)
    missing = sorted(set(range(indices[-1] + 1)) - set(indices)) if indices else []
    if missing:
        notes.append(f"{where}: tool-call index(es) {missing} skipped (indices {indices})")
    placed = []
    for index in indices:
        call = state.calls[index]
        if not call.name:
            raise MalformedResponse(f"{where}: call {index} streamed no function name")
        text = "".join(call.arguments)
        if not call.got_arguments:
            notes.append(f"{where}: call {index} ({call.name}) streamed no arguments")
        elif text == "":
            notes.append(f'{where}: call {index} ({call.name}) streamed its arguments as ""')
        placed.append(PlacedCall(ToolCall.parse(call.name, text), "tool_calls", call.call_id))
    return tuple(placed)


def assemble_chat_stream(
    events: Sequence[Any], path: Path, *, ended: bool, asked_n: int = 1
) -> StructuredResponse:
    """The chunks of one streamed ``/v1/chat/completions`` answer, in order, as one
    response; ``ended``: the stream's ``data: [DONE]`` arrived."""
    notes: list[str] = []
    states: dict[int, _Choice] = {}
    usage: Usage | None = None
    usage_chunks = 0
    for number, chunk in enumerate(events):
        where = f"{path} chunk {number}"
        server_error(chunk, where)
        if not isinstance(chunk, dict):
            raise MalformedResponse(f"{where}: not an object: {chunk!r:.200}")
        usage = read_usage(chunk.get("usage"), "prompt_tokens", "completion_tokens") or usage
        choices = chunk.get("choices")
        if not choices and isinstance(chunk.get("usage"), dict):
            usage_chunks += 1
        if choices is None:
            continue
        if not isinstance(choices, list):
            raise MalformedResponse(f"{where}: choices is not a list: {choices!r:.200}")
        for choice in choices:
            if not isinstance(choice, dict):
                raise MalformedResponse(f"{where}: a choice that is not an object")
            index = choice.get("index", 0)
            state = states.setdefault(index if isinstance(index, int) else 0, _Choice())
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise MalformedResponse(f"{where}: delta is not an object: {delta!r:.200}")
            content = _text(delta, "content", where)
            if content is not None:
                state.content.append(content)
            reasoning = _text(delta, "reasoning_content", where)
            if reasoning is None:
                reasoning = _text(delta, "reasoning", where)
            if reasoning is not None:
                state.reasoning.append(reasoning)
            if "tool_calls" in delta and delta["tool_calls"] is None:
                state.null_calls = True
            elif delta.get("tool_calls") is not None:
                entries = delta["tool_calls"]
                if not isinstance(entries, list):
                    raise MalformedResponse(f"{where}: delta.tool_calls is not a list")
                for position, entry in enumerate(entries):
                    _merge_call(state, entry, position, where, notes)
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                state.finish = finish
    if not states:
        raise MalformedResponse(f"{path}: a stream of {len(events)} chunk(s) without choices")
    if not ended:
        raise MalformedResponse(f"{path}: the stream ended without data: [DONE]")
    read = []
    for index in sorted(states):
        state, where = states[index], f"{path} choice {index}"
        if state.finish is None:
            raise MalformedResponse(f"{where}: the stream ended without a finish_reason")
        if state.null_calls:
            notes.append(f"{where}: a delta carried tool_calls: null")
        content = "".join(state.content) if state.content else None
        read.append(
            StructuredChoice(
                content=content,
                reasoning="".join(state.reasoning) if state.reasoning else None,
                calls=_finish_calls(state, where, notes) + calls_left_in(content),
                finish_reason=state.finish,
            )
        )
    if usage_chunks > 1:
        notes.append(f"{usage_chunks} usage chunks (one expected): the last one read")
    if len(read) != asked_n:
        notes.append(f"asked for {asked_n} choice(s), got {len(read)}")
    return StructuredResponse(path, tuple(read), usage, tuple(notes))
