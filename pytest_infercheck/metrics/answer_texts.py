"""Texts as answers: code (the last fenced block, normalised), JSON (one object or array,
canonicalised by value), exact text (whitespace collapsed) and tool calls (canonical calls, a
malformed call kept as always wrong)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from ..tools import ToolCall, calls_in_text, canonical_calls, describe_calls, parse_calls
from .answer_kinds import Answer, AnswerKind

# --------------------------------------------------------------------------- code / json

_FENCE_RE = re.compile(
    r"(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)(?:^[ \t]*(?P=fence)[ \t]*$|\Z)",
    re.MULTILINE | re.DOTALL,
)


def _normalise_code(code: str) -> str:
    lines = [line.rstrip() for line in code.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def code_answer(text: str) -> Answer | None:
    fences = list(_FENCE_RE.finditer(text))
    raw = fences[-1].group("body") if fences else text
    value = _normalise_code(raw)
    return Answer(AnswerKind.CODE, value, raw) if value else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JSON_DECODER = json.JSONDecoder(
    parse_float=Decimal, parse_int=Decimal, parse_constant=_reject_constant
)
_JSON_PLAIN_DIGITS = 20  # |exponent| up to which a JSON number is written without one


def _canonical_number(number: Decimal) -> str:
    """One spelling per value: ``1``, ``1.0`` and ``1e0`` -> ``1``; ``-0`` -> ``0``;
    ``0.30`` -> ``0.3``; ``1E400`` -> ``1e400``."""
    sign, digit_tuple, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # the decoder only yields finite numbers
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0"
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    prefix = "-" if sign else ""
    if 0 <= exponent <= _JSON_PLAIN_DIGITS:
        return prefix + digits + "0" * exponent
    if -_JSON_PLAIN_DIGITS <= exponent < 0:
        point = len(digits) + exponent
        if point > 0:
            return f"{prefix}{digits[:point]}.{digits[point:]}"
        return f"{prefix}0.{'0' * -point}{digits}"
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{prefix}{mantissa}e{exponent + len(digits) - 1}"


def _canonical_json(obj: Any) -> str:
    """Sorted keys, no spaces, numbers by value; ``true`` stays distinct from ``1``."""
    if obj is True or obj is False or obj is None:
        return json.dumps(obj)
    if isinstance(obj, str):
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, Decimal):
        return _canonical_number(obj)
    if isinstance(obj, list):
        return "[" + ",".join(_canonical_json(item) for item in obj) + "]"
    assert isinstance(obj, dict)
    items = (
        f"{json.dumps(key, ensure_ascii=False)}:{_canonical_json(obj[key])}" for key in sorted(obj)
    )
    return "{" + ",".join(items) + "}"


def _json_at(text: str, start: int) -> tuple[str, int] | None:
    """The canonical form and end of the JSON object/array starting at ``start``, or None."""
    try:
        obj, end = _JSON_DECODER.raw_decode(text, start)
        if not isinstance(obj, dict | list):
            return None
        return _canonical_json(obj), end
    except (ValueError, RecursionError):
        return None


def whole_json(text: str) -> Answer | None:
    """``text`` holds exactly one JSON object or array (surrounding whitespace aside)."""
    stripped = text.strip()
    found = _json_at(stripped, 0)
    if found is None or found[1] != len(stripped):
        return None
    return Answer(AnswerKind.JSON, found[0], stripped)


# Where a JSON object or array may start: "{" before a key or "}", "[" before a value or "]".
_JSON_START_RE = re.compile(r"\{(?=\s*[\"}])|\[(?=\s*[-\[\]{\"0-9tfn])")
_JSON_SCAN_BUDGET = 4_000_000
"""Each failed attempt to parse inline JSON is charged the text's length (the stdlib's
error costs that much): at most ``_JSON_SCAN_BUDGET // len(text)`` failures (40 for a
100,000-character reply) before giving up, so a degenerate reply (``[1,[1,[1,...``) costs
linear time, not quadratic."""


def _first_json(text: str) -> Answer | None:
    """The first JSON object or array in ``text`` that parses (text after it ignored)."""
    budget = _JSON_SCAN_BUDGET
    for m in _JSON_START_RE.finditer(text):
        try:
            obj, end = _JSON_DECODER.raw_decode(text, m.start())
        except (ValueError, RecursionError):  # invalid; NaN / Infinity; nesting too deep
            budget -= len(text)
            if budget < 0:
                return None
            continue
        return Answer(AnswerKind.JSON, _canonical_json(obj), text[m.start() : end])
    return None


def extract_json(text: str) -> Answer | None:
    fences = list(_FENCE_RE.finditer(text))
    labelled = [f for f in fences if f.group("info").strip().lower() == "json"]
    if labelled:
        return whole_json(labelled[-1].group("body"))
    parsed = [a for f in fences if not f.group("info").strip() if (a := whole_json(f["body"]))]
    if parsed:
        return parsed[-1]
    return _first_json(text)


def exact_answer(text: str) -> Answer | None:
    value = " ".join(text.split())
    return Answer(AnswerKind.EXACT, value, text) if value else None


# --------------------------------------------------------------------------- tool calls


def calls_answer(calls: Sequence[ToolCall]) -> Answer | None:
    """The answer of a sequence of calls: their canonical text as the value, their
    readable form as ``raw``; None for no call."""
    if not calls:
        return None
    return Answer(AnswerKind.TOOL_CALL, canonical_calls(calls), describe_calls(calls))


def extract_tool_calls(text: str) -> Answer | None:
    return calls_answer(calls_in_text(text))


def reference_calls(text: str) -> Answer | None:
    calls = parse_calls(text)
    return None if calls is None else calls_answer(calls)
