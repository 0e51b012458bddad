"""A suite prompt as one :class:`~.records.StructuredRequest`: the request every path and
every target of ``structured-parity`` receives.

- Turns: a conversation's ``messages`` (:mod:`..conversation`), else the prompt's system turn
  (if any) and its user turn. An assistant turn's calls become its ``tool_calls``; a ``tool``
  turn keeps its function's ``name`` and no call id: every path's wire shape links results
  to calls by one rule (:func:`~.call_ids.link_calls`).
- A ``generate`` assistant turn is filled in from ``filled`` (by its index in the turns):
  structured-parity fills it with the first target's non-streamed answer to the turns before
  it, so every target and path receives the same history (see
  :mod:`~pytest_infercheck.checks.structured_parity`).
- ``tools``, ``tool_choice`` and ``response_format`` as the prompt gives them; greedy
  (temperature 0), ``n: 1`` (the ``chat-n2`` path asks for 2: :func:`with_n`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..conversation import Turn, generated_indices, prompt_turns
from ..tools import canonical_json
from .records import ChatTurn, StructuredRequest

if TYPE_CHECKING:
    from ..suites import Prompt
    from ..tools import ToolCall


class UnfilledTurn(ValueError):
    """A ``generate`` turn of the prompt has no entry in ``filled``."""


def structured_request(
    prompt: Prompt,
    max_tokens: int,
    *,
    seed: int | None = 0,
    filled: Mapping[int, ChatTurn] | None = None,
    upto: int | None = None,
) -> StructuredRequest:
    """``prompt`` as a request (see the module docstring); with ``upto``, only its turns
    before index ``upto`` (the request that generates turn ``upto``).

    Raises:
        UnfilledTurn: a ``generate`` turn before ``upto`` is not in ``filled``.
    """
    turns = prompt_turns(prompt)
    if upto is not None:
        turns = turns[:upto]
    return StructuredRequest(
        messages=chat_turns(turns, filled or {}),
        max_tokens=max_tokens,
        tools=tuple(prompt.tools),
        tool_choice=prompt.tool_choice,
        response_format=prompt.response_format,
        seed=seed,
    )


def generate_indices(prompt: Prompt) -> tuple[int, ...]:
    """The indices of ``prompt``'s ``generate`` turns (none for a single-turn prompt)."""
    return generated_indices(prompt.messages) if prompt.messages is not None else ()


def chat_turns(turns: Sequence[Turn], filled: Mapping[int, ChatTurn]) -> tuple[ChatTurn, ...]:
    """``turns`` as :class:`ChatTurn` s, ``generate`` turns taken from ``filled``.

    Raises:
        UnfilledTurn: a ``generate`` turn is not in ``filled``.
    """
    out: list[ChatTurn] = []
    for index, turn in enumerate(turns):
        if turn.generated:
            if index not in filled:
                raise UnfilledTurn(f"turn {index + 1} ({turn.role}) is 'generate' and not filled")
            out.append(filled[index])
        elif turn.role == "tool":
            out.append(ChatTurn("tool", turn.content, name=turn.name))
        else:
            out.append(ChatTurn(turn.role, turn.content, tuple(turn.tool_calls)))
    return tuple(out)


def with_n(request: StructuredRequest, n: int) -> StructuredRequest:
    """``request`` asking for ``n`` choices."""
    return dataclasses.replace(request, n=n)


def response_schema(response_format: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The JSON schema a response's content must follow, from a prompt's
    ``response_format``: the mapping itself (a suite line gives the schema), or, for an
    OpenAI-shaped value, ``json_schema.schema`` (``{"type": "json_schema", ...}``) or ``{}``
    (any JSON value: ``{"type": "json_object"}`` asks for an object, which the schema
    ``{"type": "object"}`` says)."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), Mapping):
        schema = response_format["json_schema"].get("schema")
        return schema if isinstance(schema, Mapping) else {}
    if kind == "json_object" and set(response_format) == {"type"}:
        return {"type": "object"}
    return response_format


def describe_call(call: ToolCall) -> str:
    """``add({"a":12,"b":34})``: a call as one line (its arguments' canonical JSON, or their
    raw text when they are not JSON)."""
    if call.arguments_valid:
        return f"{call.name}({canonical_json(call.arguments)})"
    return f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)} (not JSON))"
