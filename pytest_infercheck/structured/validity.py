"""The validity of a structured response (every choice of every answered response; each
fault an :class:`~.results.Invalid` naming the field and the path):

- ``arguments-not-json``: a call's arguments text does not parse as JSON;
- ``malformed-call``: a ``<tool_call>`` block left in content that is not a well-formed call
  (read by the one parser, :func:`~pytest_infercheck.tools.calls_in_text`: not a JSON object
  with a non-empty string ``name`` and an object ``arguments``; ``NaN`` is not JSON);
- ``unknown-function``: a call to a function the request did not offer;
- ``arguments-schema``: arguments that violate the function's ``parameters`` JSON schema
  (``jsonschema``, the schema's own draft, 2020-12 by default:
  :func:`~pytest_infercheck.tools.instance_problem`);
- ``response-format``: with a ``response_format``, content that is not JSON or violates its
  schema (a reasoning block returned apart is not content);
- ``tool-choice``: ``none`` with a call in ``tool_calls``, ``required`` without one, a named
  function and a call in ``tool_calls`` to another (or none);
- ``finish-reason``: ``finish_reason: tool_calls`` with no call in ``tool_calls``;
- ``choices``: a number of choices other than the request's ``n``;
- ``malformed``: a response the path's reader could not read (:func:`~.judge.path_result`).

Calls counted by ``tool_choice`` and ``finish_reason`` are those the server parsed (place
``tool_calls``); a ``<tool_call>`` left in ``content`` is the model's text, which a server
returning it unparsed did not call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..tools import instance_problem
from ..tools import schema_problem as tools_schema_problem
from .records import StructuredRequest
from .request import response_schema
from .results import CallRecord, ChoiceRecord, Invalid, clipped


def choice_label(path: str, index: int, n: int) -> str:
    """``chat-n2 choice 2`` for the second of several choices; ``chat`` for the only one."""
    return path if n == 1 else f"{path} choice {index + 1}"


def validity(
    path: str, choices: Sequence[ChoiceRecord], request: StructuredRequest
) -> list[Invalid]:
    """Every validity fault of a response to ``request`` through ``path`` (module
    docstring)."""
    out: list[Invalid] = []
    if len(choices) != request.n:
        out.append(
            Invalid("choices", f"n: {path} returned {len(choices)} choices for n: {request.n}")
        )
    tools = {tool.name: tool.parameters for tool in request.tools}
    schema = response_schema(request.response_format)
    for i, choice in enumerate(choices):
        label = choice_label(path, i, len(choices))
        out += call_validity(label, choice.calls, tools)
        out += tool_choice_validity(label, choice, request.tool_choice)
        parsed = [c for c in choice.calls if c.place == "tool_calls"]
        if choice.finish_reason == "tool_calls" and not parsed:
            where = " (calls left in content)" if choice.calls else ""
            out.append(
                Invalid(
                    "finish-reason",
                    f"finish_reason: {label} says 'tool_calls' but the response has no "
                    f"tool_calls{where}",
                )
            )
        if schema is not None:
            out += content_validity(label, choice.content, schema)
    return out


def call_validity(
    label: str, calls: Sequence[CallRecord], tools: Mapping[str, Mapping[str, Any]]
) -> list[Invalid]:
    """Arguments that are not JSON, calls to functions not offered, arguments violating
    their function's schema."""
    out = []
    offered = ", ".join(tools) or "none"
    for call in calls:
        where = "" if call.place == "tool_calls" else " (left in content)"
        if not call.name and not call.valid:
            out.append(
                Invalid(
                    "malformed-call",
                    f"tool_calls: {label}: a malformed <tool_call> block{where} (not a JSON "
                    f"object with a name and object arguments): {clipped(call.arguments)!r}",
                )
            )
        elif not call.valid:
            out.append(
                Invalid(
                    "arguments-not-json",
                    f"tool_calls: {label}: {call.name} arguments are not JSON{where}: "
                    f"{clipped(call.arguments)!r}",
                )
            )
        elif call.name not in tools:
            out.append(
                Invalid(
                    "unknown-function",
                    f"tool_calls: {label}: call to {call.name!r}{where}, a function not offered "
                    f"(offered: {offered})",
                )
            )
        else:
            problem = schema_problem(tools[call.name], json.loads(call.arguments))
            if problem is not None:
                out.append(
                    Invalid(
                        "arguments-schema",
                        f"tool_calls: {label}: {call.shown()}{where} violates {call.name}'s "
                        f"parameters schema: {problem}",
                    )
                )
    return out


def tool_choice_validity(
    label: str, choice: ChoiceRecord, tool_choice: str | Mapping[str, Any] | None
) -> list[Invalid]:
    """The calls the server parsed against ``tool_choice``."""
    parsed = [c for c in choice.calls if c.place == "tool_calls"]
    if tool_choice == "none" and parsed:
        names = ", ".join(c.shown() for c in parsed)
        return [Invalid("tool-choice", f"tool_choice: {label}: 'none' but it called {names}")]
    if tool_choice == "required" and not parsed:
        return [Invalid("tool-choice", f"tool_choice: {label}: 'required' but no tool_calls")]
    wanted = named_function(tool_choice)
    if wanted is not None and (not parsed or any(c.name != wanted for c in parsed)):
        got = ", ".join(c.shown() for c in parsed) or "no tool_calls"
        return [Invalid("tool-choice", f"tool_choice: {label}: function {wanted!r} but {got}")]
    return []


def named_function(tool_choice: str | Mapping[str, Any] | None) -> str | None:
    """The function a named ``tool_choice`` (``{"type": "function", "function": {"name":
    ...}}``) requires, else None."""
    if not isinstance(tool_choice, Mapping):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
    return name if isinstance(name, str) else None


def content_validity(label: str, content: str | None, schema: Mapping[str, Any]) -> list[Invalid]:
    """``content`` must be JSON valid against ``schema`` (``response_format``)."""
    text = content or ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [
            Invalid(
                "response-format",
                f"content: {label}: not JSON ({exc}), response_format asks for JSON: "
                f"{clipped(text)!r}",
            )
        ]
    problem = schema_problem(schema, value)
    if problem is None:
        return []
    return [
        Invalid(
            "response-format",
            f"content: {label}: violates the response_format schema: {problem}: {clipped(text)!r}",
        )
    ]


def schema_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    """Why ``value`` is not valid against the JSON schema ``schema`` (its most relevant
    error, with where it is: :func:`~pytest_infercheck.tools.instance_problem`), None when it
    is valid. A schema that is not a valid JSON schema is a problem too (the check cannot
    judge against it; suites refuse one when they load)."""
    invalid = tools_schema_problem(schema)
    if invalid is not None:
        return f"the schema itself is {invalid}"
    return instance_problem(value, schema)
