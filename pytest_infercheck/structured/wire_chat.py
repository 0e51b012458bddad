"""A :class:`~.records.StructuredRequest` as an OpenAI ``/v1/chat/completions`` body.

- ``messages``: system and user turns as ``{role, content}``; an assistant turn's calls as
  ``tool_calls`` (``{id, type: function, function: {name, arguments}}``, the arguments a JSON
  string), its content ``null`` when it has none; a ``tool`` turn as ``{role: tool,
  tool_call_id, name, content}`` (ids by :func:`~.call_ids.link_calls`).
- ``tools`` (each :meth:`~..tools.Tool.openai`), ``tool_choice`` as given.
- ``response_format``: ``{"type": "json_schema", "json_schema": {"name", "schema",
  "strict": true}}``, the OpenAI form; llama-server's OpenAI route reads the same form
  (``json_schema.schema``, llama.cpp of llama-cpp-python 0.3.36, ``server-common.cpp``),
  so no server gets a form of its own.
- ``n`` only when it is not 1; ``stream: true`` with ``stream_options: {"include_usage":
  true}`` (the usage arrives in a last chunk without choices); ``temperature``, ``seed``,
  ``max_tokens``; ``model`` when the server needs one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .call_ids import link_calls
from .records import StructuredRequest

SCHEMA_NAME = "response"
"""The ``json_schema.name`` sent when the schema has no ``title``."""


def chat_messages(request: StructuredRequest) -> list[dict[str, Any]]:
    """The request's turns in the OpenAI chat shape."""
    out: list[dict[str, Any]] = []
    for linked in link_calls(request.messages):
        turn = linked.turn
        if turn.role == "assistant" and turn.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": turn.content,
                    "tool_calls": [
                        call.openai(call_id)
                        for call, call_id in zip(turn.tool_calls, linked.call_ids, strict=True)
                    ],
                }
            )
        elif turn.role == "tool":
            message: dict[str, Any] = {"role": "tool", "tool_call_id": linked.answers}
            if turn.name is not None:
                message["name"] = turn.name
            message["content"] = turn.content or ""
            out.append(message)
        else:
            out.append({"role": turn.role, "content": turn.content or ""})
    return out


def json_schema_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's ``response_format`` for a JSON schema (strict)."""
    title = schema.get("title")
    name = title if isinstance(title, str) and title else SCHEMA_NAME
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": dict(schema), "strict": True},
    }


def chat_payload(
    request: StructuredRequest, model: str | None, *, n: int | None = None, stream: bool = False
) -> dict[str, Any]:
    """The body of ``request`` for ``/v1/chat/completions``; ``n`` replaces the request's."""
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    body["messages"] = chat_messages(request)
    if request.tools:
        body["tools"] = [tool.openai() for tool in request.tools]
    if request.tool_choice is not None:
        body["tool_choice"] = (
            request.tool_choice
            if isinstance(request.tool_choice, str)
            else dict(request.tool_choice)
        )
    if request.response_format is not None:
        body["response_format"] = json_schema_format(request.response_format)
    choices = request.n if n is None else n
    if choices != 1:
        body["n"] = choices
    body["max_tokens"] = request.max_tokens
    body["temperature"] = request.temperature
    if request.seed is not None:
        body["seed"] = request.seed
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body
