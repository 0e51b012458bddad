"""Calls a server left in a response's text: ``<tool_call>{...}</tool_call>`` blocks (the
Hermes / Qwen 2.5 format), which a server without a tool parser returns in ``content``
instead of ``tool_calls``.
"""

from __future__ import annotations

import json
import re

from ..tools import ToolCall
from .records import PlacedCall

BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
"""One block; a block cut off by the end of the text (``max_tokens``) runs to its end."""
NAME = re.compile(r'^\s*\{\s*"name"\s*:\s*"([^"\\]*)"')
"""The function name at the head of a body that does not parse (a call cut short)."""


def content_calls(text: str | None) -> tuple[PlacedCall, ...]:
    """Every ``<tool_call>`` block of ``text``, in order, as a call placed in ``content``.

    A block is a well-formed call when its body is a JSON object with a string ``name`` and
    an ``arguments`` member (an object, or JSON text parsed by :meth:`ToolCall.parse`);
    any other body is kept as the call ``ToolCall(name, body, arguments_valid=False)``, so a
    malformed call is seen, never dropped; its name is the body's ``name`` member, or, when
    the body does not parse (a call cut off by ``max_tokens``), the ``"name"`` it opens with,
    else ``""``.
    """
    if not text:
        return ()
    return tuple(
        PlacedCall(_call(match.group(1).strip()), "content") for match in BLOCK.finditer(text)
    )


def _call(body: str) -> ToolCall:
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    name = doc.get("name") if isinstance(doc, dict) else None
    if isinstance(doc, dict) and isinstance(name, str) and "arguments" in doc:
        return ToolCall.parse(name, doc["arguments"])
    if doc is None and (head := NAME.match(body)) is not None:
        name = head.group(1)
    return ToolCall(name if isinstance(name, str) else "", body, arguments_valid=False)
