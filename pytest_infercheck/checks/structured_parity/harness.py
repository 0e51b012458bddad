"""structured-parity's check in the verdict harness (``tests/harness``): the prompts it sends
the fake engines (a tool call, with numbers or a city as its arguments as the toy model picks
the tool, and a prompt without tools)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..framework.harness import BOTH_SHAPES, NO_COLD_REFERENCE, RENDERED_ONCE, HarnessProfile


def _tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


TOOLS = [
    _tool(
        "add",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    _tool(
        "get_weather",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
]

SUITE: tuple[Mapping[str, Any], ...] = (
    {"id": "t1", "prompt": "add 12 and 34 in Oslo", "tools": TOOLS, "max_tokens": 24},
    {"id": "t2", "prompt": "say hello", "max_tokens": 12},
)

HARNESS = HarnessProfile(
    {"structured-parity": {"targets": ["{reference}", "{target}"]}},
    blind=(*RENDERED_ONCE, NO_COLD_REFERENCE),
    suite=SUITE,
    shapes=BOTH_SHAPES,
)
