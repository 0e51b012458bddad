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
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MALFORMED = ""
"""The name of a malformed call found in text (:func:`calls_in_text`): a ``<tool_call>``
block that is not a JSON object with a non-empty string ``name`` and an object
``arguments``. No real function has an empty name, so a malformed call never equals a
well-formed one (:attr:`ToolCall.well_formed`)."""


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

    @property
    def well_formed(self) -> bool:
        """A non-empty name and arguments that parsed to a JSON object. A malformed call
        (:data:`MALFORMED` from text, arguments that were not JSON, a server's call with no
        name or with arguments that are not an object) is a call all the same: it is never
        the same call as a well-formed one, and a reference is always well-formed."""
        return bool(self.name) and self.arguments_valid and isinstance(self.arguments, Mapping)

    def readable(self) -> str:
        """One line for people: ``add(a=12, b=34)``, ``get_date()``, arguments in the
        model's order with JSON values; a malformed call as ``malformed call <its text as
        JSON string>`` or ``name(<arguments text>)``. Not escaped for HTML."""
        if not self.name and not self.arguments_valid:
            return f"malformed call {json.dumps(self.arguments, ensure_ascii=False)}"
        if not self.arguments_valid or not isinstance(self.arguments, Mapping):
            shown = self.arguments_text() if self.arguments_valid else str(self.arguments)
            return f"{json.dumps(self.name, ensure_ascii=False)}({shown}) (malformed)"
        args = ", ".join(
            f"{key}={json.dumps(_normalise(value), ensure_ascii=False)}"
            for key, value in self.arguments.items()
        )
        return f"{self.name}({args})"

    @classmethod
    def parse(cls, name: str, arguments: Any) -> ToolCall:
        """A call from a name and arguments given either as a JSON value or as JSON text (the
        OpenAI wire form); text that is not JSON (``NaN`` and ``Infinity`` are not JSON)
        gives ``arguments_valid=False``."""
        if isinstance(arguments, str):
            try:
                return cls(name, strict_json(arguments))
            except ValueError:
                return cls(name, arguments, arguments_valid=False)
        return cls(name, arguments)


def canonical_calls(calls: Sequence[ToolCall]) -> str:
    """A list of calls as one canonical text (the form of a ``tool_call`` answer): the JSON
    list of each call's canonical object, in order."""
    return "[" + ",".join(call.canonical() for call in calls) + "]"


def describe_calls(calls: Sequence[ToolCall]) -> str:
    """Calls for people, in order, separated by ``; `` (:meth:`ToolCall.readable`); ``no
    call`` for none. Model output: escape it wherever it is shown as HTML."""
    return "; ".join(call.readable() for call in calls) or "no call"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is beyond the range of a float")
    return value


def strict_json(text: str) -> Any:
    """``json.loads`` without the ``NaN`` / ``Infinity`` / ``-Infinity`` it accepts by
    default (they are not JSON), and without numbers that overflow a float (``1e400``, which
    ``json.loads`` reads as infinity).

    Raises:
        ValueError: ``text`` is not one JSON value (``json.JSONDecodeError`` included), a
            number overflows, or it nests too deep to parse.
    """
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise ValueError("JSON nested too deep") from exc


TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK_RE = re.compile(
    re.escape(TOOL_CALL_OPEN) + r"(?P<body>.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)",
    re.DOTALL,
)


def calls_in_text(text: str) -> tuple[ToolCall, ...]:
    """The calls of a raw generation in the Hermes / Qwen 2.5 form, in order: every
    ``<tool_call>`` ... ``</tool_call>`` block, each holding one JSON object ``{"name": ...,
    "arguments": {...}}`` (whitespace around it ignored; other keys ignored). The text
    around and between blocks is not a call; a ``</tool_call>`` with no opening tag is
    ignored.

    The one parser of calls in text: the answer kind ``tool_call`` reads calls with it, and
    whatever else looks for calls in text should import it rather than parse again. Rules:

    * A block that opens and never closes runs to the end of the text (as vLLM's and
      vllm-mlx's hermes parsers read it): it is a call when what follows the tag is a whole
      call, else malformed (a generation cut off inside its call).
    * A malformed block (not JSON, ``NaN`` / ``Infinity``, not an object, no ``name`` or
      an empty or non-string one, ``arguments`` missing or not an object, e.g. a string of
      JSON) is ``ToolCall(MALFORMED, <the block's text, stripped>, arguments_valid=False)``:
      it is a call, so it counts (a wrong answer, and a different malformed text is a
      different call), but it never equals a well-formed call.
    * No block at all: ``()``.
    """
    return tuple(_block_call(m.group("body")) for m in _BLOCK_RE.finditer(text))


def text_without_calls(text: str) -> str:
    """``text`` with every ``<tool_call>`` block removed as :func:`calls_in_text` reads them
    (an unclosed block runs to the end), the rest stripped: the text around the calls."""
    return _BLOCK_RE.sub("", text).strip()


def _block_call(body: str) -> ToolCall:
    raw = body.strip()
    try:
        value = strict_json(raw)
    except ValueError:
        return ToolCall(MALFORMED, raw, arguments_valid=False)
    if not isinstance(value, dict):
        return ToolCall(MALFORMED, raw, arguments_valid=False)
    name, arguments = value.get("name"), value.get("arguments")
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return ToolCall(MALFORMED, raw, arguments_valid=False)
    return ToolCall(name, arguments)


def parse_calls(text: str) -> tuple[ToolCall, ...] | None:
    """Well-formed calls from their JSON text: a list of ``{"name": ..., "arguments":
    {...}}`` objects (the form :func:`canonical_calls` writes) or one such object; None when
    ``text`` is not that (not JSON, an empty list, a call that is not well-formed, a key
    other than ``name`` and ``arguments``). How a ``tool_call`` reference is read."""
    try:
        value = strict_json(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"name", "arguments"}:
            return None
        call = ToolCall(item["name"], item["arguments"]) if isinstance(item["name"], str) else None
        if call is None or not call.well_formed:
            return None
        calls.append(call)
    return tuple(calls) or None


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
