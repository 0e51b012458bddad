"""A :class:`~.records.StructuredRequest` as an Anthropic ``/v1/messages`` body.

- ``system`` apart (the system turns' contents joined by a blank line), ``max_tokens``
  always (the API requires it), ``temperature``, ``stream``; ``model`` when the server
  needs one.
- An assistant turn: a ``text`` block (when it has content) then one ``tool_use`` block
  per call, ``{type: tool_use, id, name, input}`` with the arguments as a JSON object.
- ``tool`` turns: ``tool_result`` blocks ``{type: tool_result, tool_use_id, content}`` in a
  user message, the results of consecutive tool turns in one message (ids by
  :func:`~.call_ids.link_calls`).
- ``tools``: ``{name, description, input_schema}``; ``tool_choice`` mapped from the OpenAI
  form: ``auto`` -> ``{type: auto}``, ``required`` -> ``{type: any}``, ``none`` ->
  ``{type: none}``, ``{type: function, function: {name}}`` -> ``{type: tool, name}``.

What the messages API cannot say is :class:`~.records.Inexpressible` before anything
is sent: ``n`` other than 1, a ``response_format``, another ``tool_choice``, a history
call whose arguments are not JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..tools import Tool
from .call_ids import link_calls
from .records import Inexpressible, StructuredRequest

CHOICES = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def anthropic_tool(tool: Tool) -> dict[str, Any]:
    """A tool as the messages API declares it."""
    entry: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        entry["description"] = tool.description
    entry["input_schema"] = dict(tool.parameters) or {"type": "object", "properties": {}}
    return entry


def anthropic_tool_choice(choice: str | Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI ``tool_choice`` in the messages API's form."""
    if isinstance(choice, str) and choice in CHOICES:
        return dict(CHOICES[choice])
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str):
            return {"type": "tool", "name": name}
    raise Inexpressible(f"messages: tool_choice {choice!r} has no Anthropic form")


def anthropic_messages(request: StructuredRequest) -> tuple[str | None, list[dict[str, Any]]]:
    """The system text (None without system turns) and the messages."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for linked in link_calls(request.messages):
        turn = linked.turn
        if turn.role == "system":
            system.append(turn.content or "")
        elif turn.role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": linked.answers,
                "content": turn.content or "",
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and _all_results(last["content"]):
                last["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        elif turn.role == "assistant" and turn.tool_calls:
            blocks: list[dict[str, Any]] = []
            if turn.content:
                blocks.append({"type": "text", "text": turn.content})
            for call, call_id in zip(turn.tool_calls, linked.call_ids, strict=True):
                if not call.arguments_valid:
                    raise Inexpressible(
                        f"messages: the arguments of {call.name!r} are not JSON: a tool_use "
                        "block cannot carry them"
                    )
                blocks.append(
                    {"type": "tool_use", "id": call_id, "name": call.name, "input": call.arguments}
                )
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": turn.role, "content": turn.content or ""})
    return ("\n\n".join(system) if system else None), out


def _all_results(content: Any) -> bool:
    return isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def messages_payload(
    request: StructuredRequest, model: str | None, *, stream: bool = False
) -> dict[str, Any]:
    """The body of ``request`` for ``/v1/messages``."""
    if request.n != 1:
        raise Inexpressible(f"messages: n={request.n}: the messages API has one answer")
    if request.response_format is not None:
        raise Inexpressible("messages: the messages API has no response_format")
    system, messages = anthropic_messages(request)
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if system is not None:
        body["system"] = system
    body["messages"] = messages
    if request.tools:
        body["tools"] = [anthropic_tool(tool) for tool in request.tools]
    if request.tool_choice is not None:
        body["tool_choice"] = anthropic_tool_choice(request.tool_choice)
    body["max_tokens"] = request.max_tokens
    body["temperature"] = request.temperature
    body["stream"] = stream
    return body
