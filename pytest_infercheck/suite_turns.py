"""Conversations, tool calls and tool schemas of a suite record: the shape of each turn and
their order (:func:`parse_turns`), calls written ``{"name": ..., "arguments": {...}}``
(:func:`parse_calls`), OpenAI function schemas (:func:`parse_tools`), and whether calls name
offered tools with valid arguments (:func:`calls_problem`). Each error names the turn, call or
tool at fault."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from .conversation import Turn
from .suite_spec import type_name
from .tools import Tool, ToolCall, canonical_json, schema_problem

TURN_KEYS = ("role", "content", "generate", "tool_calls", "name")
ROLES = ("system", "user", "assistant", "tool")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def parse_turns(value: Any) -> tuple[Turn, ...]:
    """Validate a ``messages`` list (the rules of the module docstring) into its turns: the
    shape of each turn and their order. Whether the calls name offered tools with valid
    arguments is checked with the prompt's ``tools`` (:func:`tool_use_problem`).

    Raises:
        ValueError: the list is malformed; the message names the offending turn (0-based).
    """
    if not isinstance(value, list) or not value:
        raise ValueError("'messages' must be a non-empty list of turns")
    turns = [_parse_turn(index, raw) for index, raw in enumerate(value)]
    _check_order(turns)
    return tuple(turns)


def _parse_turn(index: int, raw: Any) -> Turn:
    """One turn of ``messages`` (its shape only)."""
    where = f"turn {index}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type_name(raw)}")
    unknown = [key for key in raw if key not in TURN_KEYS]
    if unknown:
        raise ValueError(
            f"{where}: unknown key {unknown[0]!r} (allowed keys: {', '.join(TURN_KEYS)})"
        )
    role = raw.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}: 'role' must be one of {', '.join(ROLES)}, got {role!r}")
    if "name" in raw and role != "tool":
        raise ValueError(f"{where}: only a tool turn has a 'name' (the function it answers)")
    if "tool_calls" in raw and role != "assistant":
        raise ValueError(f"{where}: only an assistant turn can have 'tool_calls'")
    if "generate" in raw:
        if raw["generate"] is not True:
            raise ValueError(f"{where}: 'generate' must be true (or left out)")
        if role != "assistant":
            raise ValueError(f"{where}: only an assistant turn can be 'generate'")
        if "content" in raw:
            raise ValueError(f"{where}: a 'generate' turn has no 'content'")
        if "tool_calls" in raw:
            raise ValueError(
                f"{where}: a 'generate' turn has no 'tool_calls' (give the calls, or generate)"
            )
        return Turn("assistant", None)
    content = raw.get("content")
    if "tool_calls" in raw:
        calls = raw["tool_calls"]
        if not isinstance(calls, list) or not calls:
            raise ValueError(f"{where}: 'tool_calls' must be a non-empty list of calls")
        if "content" in raw and not isinstance(content, str):
            raise ValueError(
                f"{where}: 'content' beside 'tool_calls' must be a string (or left out)"
            )
        return Turn("assistant", content or "", parse_calls(calls, f"{where}: "))
    if not isinstance(content, str) or not content.strip():
        raise ValueError(
            f"{where}: 'content' must be a non-empty string (or, for an assistant turn, "
            "'generate': true or 'tool_calls')"
        )
    if role == "tool":
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: a tool turn needs 'name': the function whose result it is")
        return Turn("tool", content, name=name)
    return Turn(role, content)


def _check_order(turns: list[Turn]) -> None:
    """An optional first system turn, then user and assistant alternating, starting with user;
    an assistant turn with calls followed by one tool turn per call, in order, naming its
    call's function, then an assistant turn or the end; the last turn a user turn or the
    last result of a call."""
    start = 1 if turns[0].role == "system" else 0
    pending: list[tuple[int, int, ToolCall]] = []
    """The calls not yet answered: (turn index, call index, call)."""
    for index, turn in enumerate(turns[start:], start=start):
        previous = turns[index - 1] if index > start else None
        if turn.role == "system":
            raise ValueError(f"turn {index}: a system turn may only be the first turn")
        if pending:
            at, number, call = pending.pop(0)
            if turn.role != "tool":
                raise ValueError(
                    f"turn {index}: expected a tool turn (the result of call {number} of turn "
                    f"{at}, {call.name}), got {turn.role}"
                )
            if turn.name != call.name:
                raise ValueError(
                    f"turn {index}: the tool turn answers call {number} of turn {at}, "
                    f"{call.name}, but names {turn.name!r}"
                )
            continue
        if turn.role == "tool":
            raise ValueError(
                f"turn {index}: a tool turn must follow an assistant turn with 'tool_calls' "
                "(one tool turn per call, in order)"
            )
        if previous is not None and previous.role == "tool":
            expected = "assistant"
        else:
            expected = "user" if previous is None or previous.role == "assistant" else "assistant"
        if turn.role != expected:
            where = "first" if previous is None else f"after a {previous.role} turn"
            article = "an" if expected == "assistant" else "a"
            raise ValueError(
                f"turn {index}: expected {article} {expected} turn {where}, got {turn.role}"
            )
        pending = [(index, number, call) for number, call in enumerate(turn.tool_calls)]
    if len(turns) == start:
        raise ValueError("the conversation has no user turn")
    if pending:
        at, number, call = pending[0]
        raise ValueError(
            f"turn {at}: call {number} ({call.name}) has no tool turn with its result after it"
        )
    if turns[-1].role not in ("user", "tool"):
        raise ValueError(
            f"turn {len(turns) - 1}: the last turn must be a user turn or a tool result "
            "(the target answers it)"
        )


def parse_calls(value: list[Any], where: str) -> tuple[ToolCall, ...]:
    """Tool calls written ``{"name": ..., "arguments": {...}}`` (their shape only; whether
    they name offered tools with valid arguments: :func:`calls_problem`). ``where``
    prefixes each error (e.g. ``"turn 2: "``); numbers become floats or ints
    (:func:`plain_json`).

    Raises:
        ValueError: a call is malformed; the message names it by index.
    """
    if not value:
        raise ValueError(f"{where}expected at least one call")
    calls: list[ToolCall] = []
    for number, raw in enumerate(value):
        at = f"{where}call {number}"
        if not isinstance(raw, dict) or set(raw) != {"name", "arguments"}:
            got = type_name(raw) if not isinstance(raw, dict) else f"keys {sorted(raw)}"
            raise ValueError(
                f'{at}: a call is {{"name": ..., "arguments": {{...}}}} (both keys, no '
                f"others), got {got}"
            )
        if not isinstance(raw["name"], str) or not raw["name"]:
            raise ValueError(f"{at}: 'name' must be a non-empty string")
        if not isinstance(raw["arguments"], dict):
            raise ValueError(
                f"{at} ({raw['name']}): 'arguments' must be an object (of the tool's "
                f"parameters), got {type_name(raw['arguments'])}"
            )
        calls.append(ToolCall(raw["name"], plain_json(raw["arguments"])))
    return tuple(calls)


def parse_tools(value: Any) -> tuple[Tool, ...]:
    """A ``tools`` list of OpenAI function schemas as :class:`~.tools.Tool` (the rules of the
    module docstring).

    Raises:
        ValueError: an entry is malformed; the message names it by index (and name).
    """
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ValueError(
            "expected a non-empty list of OpenAI function schemas (leave 'tools' out to offer none)"
        )
    tools: list[Tool] = []
    for index, raw in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(raw, dict) or set(raw) != {"type", "function"}:
            got = type_name(raw) if not isinstance(raw, dict) else f"keys {sorted(raw)}"
            raise ValueError(
                f'{where}: expected {{"type": "function", "function": {{...}}}}, got {got}'
            )
        if raw["type"] != "function":
            raise ValueError(f"{where}: 'type' must be 'function', got {shown(raw['type'])}")
        function = raw["function"]
        if not isinstance(function, dict):
            raise ValueError(f"{where}: 'function' must be an object")
        unknown = sorted(set(function) - {"name", "description", "parameters"})
        if unknown:
            raise ValueError(
                f"{where}: unknown key {unknown[0]!r} in 'function' (allowed keys: name, "
                "description, parameters)"
            )
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
            raise ValueError(
                f"{where}: 'name' must be 1-64 letters, digits, '_' or '-', got {shown(name)}"
            )
        where = f"{where} ({name})"
        if any(tool.name == name for tool in tools):
            raise ValueError(f"{where}: the name is offered twice")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise ValueError(f"{where}: 'description' must be a string")
        if "parameters" not in function:
            raise ValueError(
                f"{where}: missing 'parameters' (the arguments' JSON schema; "
                '{"type": "object", "properties": {}} for none)'
            )
        parameters = plain_json(function["parameters"])
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ValueError(f"{where}: 'parameters' must be a JSON schema with type 'object'")
        problem = schema_problem(parameters)
        if problem:
            raise ValueError(f"{where}: 'parameters' is {problem}")
        tools.append(Tool(name, parameters, description))
    return tuple(tools)


def plain_json(value: Any) -> Any:
    """``value`` with the :class:`~decimal.Decimal` floats of the JSONL reader made floats (a
    tool's schema and a call's arguments are sent and compared as JSON, which
    ``json.dumps`` cannot write as Decimals)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {key: plain_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_json(item) for item in value]
    return value


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (for error messages)."""
    text = json.dumps(plain_json(value), ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def calls_problem(calls: Sequence[ToolCall], offered: Mapping[str, Tool], where: str) -> str | None:
    """The first call of ``calls`` that names no tool of ``offered`` or whose arguments are
    not valid against its tool's ``parameters``, described; None: all are valid."""
    for number, call in enumerate(calls):
        tool = offered.get(call.name)
        if tool is None:
            return (
                f"{where}call {number} calls {call.name!r}, which is not an offered tool "
                f"(offered: {', '.join(offered)})"
            )
        problem = tool.arguments_problem(call.arguments)
        if problem:
            return (
                f"{where}call {number} ({call.name}): arguments {canonical_json(call.arguments)} "
                f"do not follow its parameters: {problem}"
            )
    return None
