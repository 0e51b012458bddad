"""A :class:`~.records.StructuredRequest` as an Ollama ``/api/chat`` body (Ollama's API
documentation, ``docs/api.md``).

- ``messages``: an assistant turn's calls as ``tool_calls: [{function: {name,
  arguments}}]`` with the arguments as a JSON object (not a string, unlike OpenAI); a
  ``tool`` turn as ``{role: tool, content, tool_name}``. Ollama ties results to calls by
  order and name, so no ids are sent.
- ``tools`` in the OpenAI form; ``format``: the JSON schema itself; ``options``:
  ``temperature``, ``seed``, ``num_predict`` (the request's ``max_tokens``); ``stream``
  (NDJSON when true).

What ``/api/chat`` cannot say is :class:`~.records.Inexpressible` before anything is
sent: ``n`` other than 1, a ``tool_choice`` other than ``auto``, a history call whose
arguments are not JSON.
"""

from __future__ import annotations

from typing import Any

from .records import Inexpressible, StructuredRequest


def ollama_messages(request: StructuredRequest) -> list[dict[str, Any]]:
    """The request's turns in ``/api/chat``'s shape."""
    out: list[dict[str, Any]] = []
    for turn in request.messages:
        message: dict[str, Any] = {"role": turn.role, "content": turn.content or ""}
        if turn.role == "assistant" and turn.tool_calls:
            calls = []
            for call in turn.tool_calls:
                if not call.arguments_valid:
                    raise Inexpressible(
                        f"ollama: the arguments of {call.name!r} are not JSON: /api/chat "
                        "sends them as an object"
                    )
                calls.append({"function": {"name": call.name, "arguments": call.arguments}})
            message["tool_calls"] = calls
        if turn.role == "tool" and turn.name is not None:
            message["tool_name"] = turn.name
        out.append(message)
    return out


def ollama_payload(
    request: StructuredRequest, model: str, *, stream: bool = False
) -> dict[str, Any]:
    """The body of ``request`` for ``/api/chat``."""
    if request.n != 1:
        raise Inexpressible(f"ollama: n={request.n}: /api/chat has one answer")
    if request.tool_choice not in (None, "auto"):
        raise Inexpressible(f"ollama: /api/chat has no tool_choice ({request.tool_choice!r})")
    options: dict[str, Any] = {
        "temperature": request.temperature,
        "num_predict": request.max_tokens,
    }
    if request.seed is not None:
        options["seed"] = request.seed
    body: dict[str, Any] = {"model": model, "messages": ollama_messages(request)}
    if request.tools:
        body["tools"] = [tool.openai() for tool in request.tools]
    if request.response_format is not None:
        body["format"] = dict(request.response_format)
    body["options"] = options
    body["stream"] = stream
    return body
