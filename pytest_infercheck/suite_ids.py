"""Derived prompt ids: a prompt without an ``id`` is named by a hash of what it asks (its text,
or every turn of its conversation, and what it offers beside: tools, tool choice, response
format), so the same record keeps the same id in every run and on every machine."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .conversation import Turn
from .tools import Tool


def derive_prompt_id(text: str) -> str:
    """Stable id for a prompt without one: ``"p"`` + first 10 hex digits of sha256(text)."""
    return "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def turn_payload(turn: Turn) -> list[Any]:
    """A turn as hashed into a derived conversation id: ``[role, content]``, plus its calls
    and function name when it has them (so plain conversations keep their ids)."""
    if not turn.tool_calls and turn.name is None:
        return [turn.role, turn.content]
    return [
        turn.role,
        turn.content,
        [json.loads(c.canonical()) for c in turn.tool_calls],
        turn.name,
    ]


def conversation_id(turns: tuple[Turn, ...], offer: dict[str, Any]) -> str:
    """The derived id of a conversation: :func:`derive_prompt_id` of its turns as JSON (and
    of ``offer``, its tools, tool choice and response format, when it has any)."""
    payload: list[Any] = [turn_payload(turn) for turn in turns]
    if offer:
        payload = [payload, offer]
    return derive_prompt_id(json.dumps(payload, ensure_ascii=False))


def offer_of(
    tools: Sequence[Tool],
    tool_choice: str | Mapping[str, Any] | None,
    response_format: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What a record offers beside its text (tools, tool choice, response format) as JSON
    values, keyed by field; empty when none (the derived id then stays the text's)."""
    offer: dict[str, Any] = {}
    if tools:
        offer["tools"] = [tool.openai() for tool in tools]
    if tool_choice is not None:
        offer["tool_choice"] = tool_choice
    if response_format is not None:
        offer["response_format"] = response_format
    return offer
