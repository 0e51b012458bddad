"""Tools: the functions a prompt offers a model and the calls the model makes.

A suite line may offer ``tools`` (OpenAI function schemas) and give a reference call as its
answer (``answer_kind: tool_call``); a conversation may hold assistant turns that call tools
and ``tool`` turns that return their results (see :mod:`.suites`, :mod:`.conversation`).

This module holds the typed forms of both and their one canonical text: a call's identity is
its function name and its arguments compared as JSON values (``{"a": 1, "b": 2}`` equals
``{"b": 2, "a": 1}``; ``1`` and ``1.0`` are the same JSON number), so two calls are the same
call exactly when :meth:`ToolCall.canonical` is the same string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def canonical_json(value: Any) -> str:
    """``value`` as compact JSON with sorted keys (numbers that are whole floats written as
    integers, so ``1.0`` and ``1`` are one value)."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


@dataclass(frozen=True)
class Tool:
    """One function offered to the model (an OpenAI ``{"type": "function", "function":
    {...}}`` entry)."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The arguments' JSON schema (an ``object`` schema; empty properties: no arguments).
    Compared, not hashed (a dict): equal tools hash alike by name and description."""
    description: str | None = None

    def arguments_problem(self, arguments: Any) -> str | None:
        """Why ``arguments`` (a JSON value) is not a valid argument object of this function
        (its :attr:`parameters` schema, by :mod:`jsonschema`), in a sentence; None: valid."""
        return instance_problem(arguments, self.parameters)

    def openai(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry, keys in the order the OpenAI docs give them."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolCall:
    """One function call: its name and its arguments as a JSON value (an object for a
    well-formed call; the raw text when the model's arguments were not JSON, see
    :attr:`arguments_valid`)."""

    name: str
    arguments: Any = field(default_factory=dict, hash=False)
    """Compared, not hashed (a dict): equal calls hash alike by name."""
    arguments_valid: bool = True
    """False when the arguments text did not parse as JSON (``arguments`` is then that
    text)."""

    def canonical(self) -> str:
        """The call's identity: ``{"arguments":...,"name":...}`` as :func:`canonical_json`
        (an unparsable arguments text stays a string, so it never equals a parsed object)."""
        return canonical_json({"name": self.name, "arguments": self.arguments})

    def arguments_text(self) -> str:
        """The arguments as the OpenAI ``function.arguments`` string."""
        if not self.arguments_valid and isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)

    def openai(self, call_id: str) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry of this call."""
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_text()},
        }

    @classmethod
    def parse(cls, name: str, arguments: Any) -> ToolCall:
        """A call from a name and arguments given either as a JSON value or as JSON text (the
        OpenAI wire form); text that is not JSON gives ``arguments_valid=False``."""
        if isinstance(arguments, str):
            try:
                return cls(name, json.loads(arguments))
            except ValueError:
                return cls(name, arguments, arguments_valid=False)
        return cls(name, arguments)


def canonical_calls(calls: Sequence[ToolCall]) -> str:
    """A list of calls as one canonical text (the form of a ``tool_call`` answer): the JSON
    list of each call's canonical object, in order."""
    return "[" + ",".join(call.canonical() for call in calls) + "]"


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a valid JSON schema (checked against the metaschema of the draft
    its ``$schema`` names, else 2020-12), in a sentence; None: it is one. A schema here is an
    object (the boolean schemas ``true``/``false`` are refused: they say nothing)."""
    if not isinstance(schema, Mapping):
        return f"a JSON schema must be an object, got {type(schema).__name__}"
    from jsonschema import Draft202012Validator, SchemaError, validators

    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = exc.json_path if exc.json_path != "$" else "the schema"
        return f"not a valid JSON schema: {exc.message} (at {where})"
    return None


def instance_problem(instance: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``instance`` does not follow ``schema`` (a valid schema, see
    :func:`schema_problem`), in a sentence naming where; None: it does."""
    from jsonschema import Draft202012Validator, validators
    from jsonschema.exceptions import best_match

    cls = validators.validator_for(schema, default=Draft202012Validator)
    error = best_match(cls(schema).iter_errors(instance))
    if error is None:
        return None
    where = f" (at {error.json_path})" if error.json_path != "$" else ""
    return f"{error.message}{where}"
