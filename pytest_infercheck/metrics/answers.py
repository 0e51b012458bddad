"""Extract a comparable final answer from a generation, and classify answer flips.

An :class:`Answer` carries a normalised ``value`` (compared for equality) and the ``raw``
substring it came from (for reports). Extraction fails closed: when the reply holds no
well-formed answer of the prompt's kind, or its final answer is malformed, it returns ``None``
("no answer"), which counts as wrong against a reference.

Every kind is extracted in the same order (:func:`extract_answer`):

1. Reasoning is stripped (:func:`strip_reasoning`): everything up to the last ``</think>``,
   and everything from an unclosed ``<think>`` on. A reasoning chain that a server returns
   apart from the answer (``reasoning_content``) is never part of the text passed in.
2. The last explicit final-answer marker wins (``answer is X``, ``Answer: X``, ``final answer
   is X``, ``\\boxed{X}``, ``#### X``). If what it marks is malformed, there is no answer.
3. Else the last well-formed answer of the kind anywhere in the (stripped) text.

References go through :func:`parse_reference`, the same parsers with no heuristics: the whole
reference must be one value of its kind. Suite validation calls it, so a reference that would
never match any output is a collection error.

The ``tool_call`` kind reads calls, not prose: the calls a chat server parsed out of the
output (``Generation.tool_calls``, passed as ``calls``), then the ``<tool_call>`` blocks of
the text (:func:`~pytest_infercheck.tools.calls_in_text`). Markers do not apply, and a
malformed call is not "no answer" but a call that is always wrong (see
:func:`extract_answer`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import Enum
from fractions import Fraction
from typing import Any, Literal, get_args

from ..tools import ToolCall, calls_in_text, canonical_calls, describe_calls, parse_calls

__all__ = [
    "FLIP_SEVERITY_ORDER",
    "FLIP_VALUES",
    "Answer",
    "AnswerKind",
    "AnswerValue",
    "FailItemOn",
    "FlipKind",
    "answers_equal",
    "classify_flip",
    "extract_answer",
    "fails_item",
    "flip_rank",
    "parse_reference",
    "shown_reference",
    "strip_reasoning",
]


class AnswerKind(str, Enum):
    """How the final answer of a generation is extracted and normalised."""

    NUMBER = "number"
    BOOLEAN = "boolean"
    CHOICE = "choice"
    CODE = "code"
    JSON = "json"
    EXACT = "exact"
    TOOL_CALL = "tool_call"

    def __str__(self) -> str:
        return self.value


AnswerValue = Decimal | Fraction | bool | str
"""Normalised value: ``Decimal`` or ``Fraction`` (number; the two compare and hash exactly
across types, so ``Decimal("0.75") == Fraction(3, 4)``), ``bool`` (boolean), ``str`` (the
other kinds; of ``tool_call``, :func:`~pytest_infercheck.tools.canonical_calls`)."""


@dataclass(frozen=True)
class Answer:
    """An extracted answer. Equality (and hashing) use ``kind`` and ``value`` only."""

    kind: AnswerKind
    value: AnswerValue
    raw: str = field(compare=False)


# --------------------------------------------------------------------------- reasoning

_THINK_CLOSE_RE = re.compile(r"</think(?:ing)?\s*>", re.IGNORECASE)
_THINK_OPEN_RE = re.compile(r"<think(?:ing)?\s*>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """The answer part of ``text``: what follows the last ``</think>`` (or ``</thinking>``,
    any case), cut at an unclosed ``<think>`` (an unclosed block runs to the end of the output).

    This covers ``<think>...</think>answer``, Qwen3's form whose template already opened the
    block (``...</think>answer``), and a reply still thinking when it ended (``<think>...``:
    no answer part at all). A reasoning chain returned apart (a server's
    ``reasoning_content``, kept in ``Generation.reasoning``) must not be passed in.
    """
    closes = list(_THINK_CLOSE_RE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN_RE.search(text)
    return text[: opened.start()] if opened else text


# --------------------------------------------------------------------------- markers

# An explicit final answer: "answer is", "answer:", "final answer is:", "correct option is",
# "#### " (GSM8K); `\boxed{...}` is found by brace matching (see _boxes).
_MARKER_RE = re.compile(
    r"""
    \#\#\#\#
  | \b(?:(?:final|correct|right|best)\s+)?answer\b (?:\s*\*\*)? \s*
      (?: (?:is|was|would\s+be|will\s+be|should\s+be)\b (?:\s*\*\*)? \s*:? | [:=] )
  | \b(?:final|correct|right|best)\s+(?:option|choice)\b (?:\s*\*\*)? \s* (?:is\b\s*:? | [:=])
    """,
    re.IGNORECASE | re.VERBOSE,
)
_MARKER_FILLER_RE = re.compile(r"(?:[\s*\"'`:_]|\\\(|\\\[)*")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_LATEX_TEXT_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")

# A negation directly before a number / word: "not 4", "isn't 4", "is not equal to 4".
_NEGATION_RE = re.compile(
    r"(?:\bnot|n['\u2019]t|\bnever)(?:\s+(?:be|equals?(?:\s+to)?))?[\s:=$*\"'`(]*\Z",
    re.IGNORECASE,
)
_NEGATION_WINDOW = 40


def _negated(text: str, start: int) -> bool:
    return _NEGATION_RE.search(text[max(0, start - _NEGATION_WINDOW) : start]) is not None


class _Unmarked:
    """What a marker's payload parser returns when the marker does not mark this kind (e.g.
    "the answer is the number of apples, 12" for a number): the marker is ignored."""


_UNMARKED = _Unmarked()
_Marked = Answer | None | _Unmarked  # an answer, a malformed marked answer, or not marked
_PayloadParser = Callable[[str, int], _Marked]
_BoxParser = Callable[[str], Answer | None]


def _boxes(text: str) -> list[tuple[int, int, int]]:
    """``(start, content start, content end)`` of every closed ``\\boxed{...}``, honouring
    nested braces (one pass: an unclosed box is skipped, at no extra cost)."""
    openers = {m.end() - 1: m.start() for m in _BOXED_RE.finditer(text)}
    if not openers:
        return []
    found: list[tuple[int, int, int]] = []
    stack: list[tuple[int, int] | None] = []  # (box start, brace) of each open brace or None
    for m in re.finditer(r"[{}]", text):
        brace = m.start()
        if m.group() == "{":
            stack.append((openers[brace], brace) if brace in openers else None)
        elif stack and (box := stack.pop()) is not None:
            found.append((box[0], box[1] + 1, brace))
    return sorted(found)


_LATEX_PLAIN_PASSES = 4


def _latex_plain(content: str) -> str:
    """``\\text{X}`` (and the like) -> ``X``, for a few levels of nesting."""
    for _ in range(_LATEX_PLAIN_PASSES):
        plain = _LATEX_TEXT_RE.sub(r"\1", content)
        if plain == content:
            break
        content = plain
    return content


def _last_marked(text: str, payload: _PayloadParser, box: _BoxParser) -> _Marked:
    """The answer the last explicit marker of ``text`` marks for a kind (``None``: malformed),
    or ``_UNMARKED`` when no marker marks an answer of the kind.

    Markers are tried from the last one back, so only the winner's payload is parsed in full.
    """
    found: list[tuple[int, int, bool]] = [
        (m.end(), m.end(), False) for m in _MARKER_RE.finditer(text)
    ]
    found += [(begin, end, True) for start, begin, end in _boxes(text) if not _negated(text, start)]
    for begin, end, is_box in sorted(found, reverse=True):
        if is_box:
            return box(text[begin:end])
        filler = _MARKER_FILLER_RE.match(text, begin)
        assert filler is not None  # the filler pattern matches the empty string
        marked = payload(text, filler.end())
        if not isinstance(marked, _Unmarked):
            return marked
    return _UNMARKED


# --------------------------------------------------------------------------- numbers

_SIGN = r"[-+\u2212]"
_MINUS = "-\u2212"


def _power_of_ten(name: str) -> str:
    """``10^3``, ``10^{-3}``: the exponent in group ``name`` (bare) or ``name + "b"`` (braced)."""
    return rf"10\^(?:\{{\s*(?P<{name}b>{_SIGN}?\d+)\s*\}}|(?P<{name}>{_SIGN}?\d+))"


# One number: `[sign][currency][sign]` then a LaTeX fraction (`\frac{3}{4}`, `\dfrac`,
# `\tfrac`), a mixed number (`1 3/4`), a fraction (`3/4`), a power of ten (`10^{-3}`) or a
# decimal (`12345`, `1,234,567.89` with thousands separators only in 3-digit groups, `0.30`,
# `.5`) with an optional exponent (`1.5e10`, `2.5 \times 10^{3}`); then an optional `%`.
# It may not start inside a word, a number or a LaTeX command, and may not run on into more
# digits or grouping: `1,23`, `3,5`, `1,2345`, `v1.2.3`, `3/4/2024` and `2^{10}` hold none.
_NUM_TOKEN = rf"""
    (?<![\w.,/\\^])
    (?P<num>
      (?P<sign>{_SIGN})? (?:(?:\\?\$|[\u20ac\u00a3\u00a5])\s?)? (?P<sign2>{_SIGN})?
      (?: \\[dt]?frac\s*\{{\s*(?P<fn>{_SIGN}?\d+(?:\.\d+)?)\s*\}}
                    \s*\{{\s*(?P<fd>{_SIGN}?\d+(?:\.\d+)?)\s*\}}
        | (?P<mw>\d+)[ ](?P<mn>\d+)/(?P<md>\d+)
        | (?P<sn>\d+)/(?P<sd>\d+)
        | {_power_of_ten("p")}
        | (?P<m>\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)? | \d+(?:\.\d+)? | \.\d+)
          (?: [eE](?P<e>[-+]?\d+)
            | \s*(?:\u00d7|\\times|\\cdot|\*)\s*{_power_of_ten("t")}
          )?
      )
      (?:\s?\\?%)?
    )
    (?![\d/^]|[.,]\d)
"""
_NUM_RE = re.compile(_NUM_TOKEN, re.VERBOSE)
_BARE_NUM_RE = re.compile(rf"\s*{_NUM_TOKEN}\s*\.?\s*", re.VERBOSE)
# What a marker marks when it means a number that is malformed ("The answer is 3,5").
_NUM_ATTEMPT_RE = re.compile(
    rf"{_SIGN}?(?:\\?\$|[\u20ac\u00a3\u00a5])?\s?{_SIGN}?(?:\.?\d|\\[dt]?frac)"
)
_NUM_QUALIFIER_RE = re.compile(
    r"(?:(?:approximately|approx\.|about|around|roughly|exactly|equal\s+to)\s+|[~\u2248]\s*)?",
    re.IGNORECASE,
)
# A marked number that only starts an expression ("The answer is 3 + 4 = 7").
_EXPR_RE = re.compile(r"\s*(?:[-+*/\u00d7\u00f7^]|\\times|\\cdot|\\div)\s*[\d(]")
_EQUALS_NUM_RE = re.compile(rf"=\s*{_NUM_TOKEN}", re.VERBOSE)
_THOUSANDS_LATEX_RE = re.compile(r"(?<=\d)(?:\{,\}|\\,)(?=\d{3}(?!\d))")
_DEGREES_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\u00b0")


def _prepare_numbers(text: str) -> str:
    """LaTeX thousands separators (``1{,}234``, ``1\\,234``) -> ``1,234``; degrees dropped."""
    return _DEGREES_RE.sub("", _THOUSANDS_LATEX_RE.sub(",", text))


def _signed(raw: str) -> Decimal:
    return Decimal(raw.replace("\u2212", "-"))


def _number_value(m: re.Match[str]) -> Decimal | Fraction | None:
    """The value of a number token, or ``None`` (two signs, a zero denominator, `2 7/4`)."""
    g = m.groupdict()
    if g["sign"] and g["sign2"]:
        return None
    sign = g["sign"] or g["sign2"] or ""
    value: Decimal | Fraction
    try:
        if g["fn"] is not None:
            denominator = Fraction(_signed(g["fd"]))
            if not denominator:
                return None
            value = Fraction(_signed(g["fn"])) / denominator
        elif g["mw"] is not None:
            whole, num, den = int(g["mw"]), int(g["mn"]), int(g["md"])
            if not 0 < num < den:
                return None
            value = whole + Fraction(num, den)
        elif g["sn"] is not None:
            num, den = int(g["sn"]), int(g["sd"])
            if not den:
                return None
            value = Fraction(num, den)
        elif g["m"] is None:
            value = Decimal("1e" + str(_signed(g["pb"] or g["p"])))
        else:
            exponent = g["e"] or g["tb"] or g["t"]
            mantissa = g["m"].replace(",", "")
            value = Decimal(mantissa + ("e" + str(_signed(exponent)) if exponent else ""))
    except (InvalidOperation, ValueError):  # pragma: no cover - the pattern admits literals
        return None
    return -value if sign and sign in _MINUS else value


def _number_answer(m: re.Match[str]) -> Answer | None:
    value = _number_value(m)
    return None if value is None else Answer(AnswerKind.NUMBER, value, m.group("num").strip())


def _marked_number(text: str, pos: int) -> _Marked:
    qualifier = _NUM_QUALIFIER_RE.match(text, pos)
    assert qualifier is not None  # the pattern matches the empty string
    m = _NUM_RE.match(text, qualifier.end())
    if m is None:
        return None if _NUM_ATTEMPT_RE.match(text, qualifier.end()) else _UNMARKED
    if _EXPR_RE.match(text, m.end()):
        # An expression: its result is the number after the last "=" on the same line.
        line_end = text.find("\n", m.end())
        line = text[m.end() : len(text) if line_end == -1 else line_end]
        results = list(_EQUALS_NUM_RE.finditer(line))
        return _number_answer(results[-1]) if results else None
    return _number_answer(m)


def _boxed_number(content: str) -> Answer | None:
    """A box holds one number, or ``x = <number>``; anything else is malformed."""
    content = _latex_plain(content)
    content = content[content.rfind("=") + 1 :]
    tokens = [m for m in _NUM_RE.finditer(content) if not _negated(content, m.start())]
    return _number_answer(tokens[0]) if len(tokens) == 1 else None


def _bare_number(text: str) -> Answer | None:
    m = _BARE_NUM_RE.fullmatch(_prepare_numbers(text))
    return None if m is None else _number_answer(m)


def _extract_number(text: str) -> Answer | None:
    text = _prepare_numbers(text)
    marked = _last_marked(text, _marked_number, _boxed_number)
    if not isinstance(marked, _Unmarked):
        return marked
    for m in reversed(list(_NUM_RE.finditer(text))):
        if not _negated(text, m.start("num")):
            answer = _number_answer(m)
            if answer is not None:
                return answer
    return None


# --------------------------------------------------------------------------- booleans

_BOOL_VALUES = {"yes": True, "true": True, "no": False, "false": False}
_BOOL_PAYLOAD_RE = re.compile(
    r"[$(\[]*\s*(?P<neg>not\s+)?(?P<word>yes|no|true|false)\b(?!-)", re.IGNORECASE
)
_BARE_BOOL_RE = re.compile(r"\s*(?P<word>yes|no|true|false)\s*[.!]?\s*", re.IGNORECASE)
_BOOL_WORD_RE = re.compile(r"\b(?P<word>yes|no|true|false)\b", re.IGNORECASE)
# The words of "yes or no" / "true/false" name the question, not an answer.
_BOOL_PAIR_RE = re.compile(
    r"\b(?:yes[\s/-]*(?:or[\s/-]*)?no|true[\s/-]*(?:or[\s/-]*)?false)\b", re.I
)
# "no" is a determiner in "there is no doubt": only decisive at the start of a sentence or
# when followed by punctuation / the end of the text ("No, it is not.", "I'd say no").
_SENTENCE_END = ".!?:;\n"
_SENTENCE_FILLER = "*\"'`(-"
_NO_FOLLOWED_RE = re.compile(r"[\s*\"'`]*(?:[,.!?;:)]|\Z)")


def _at_sentence_start(text: str, pos: int) -> bool:
    """Only spaces, quotes, ``*``, ``(`` or ``-`` between ``pos`` and the text's start or the
    end of the previous sentence (``.!?:;`` or a line break)."""
    while pos > 0 and (text[pos - 1].isspace() or text[pos - 1] in _SENTENCE_FILLER):
        if text[pos - 1] == "\n":
            return True
        pos -= 1
    return pos == 0 or text[pos - 1] in _SENTENCE_END


def _boolean_answer(m: re.Match[str]) -> Answer:
    negated = bool(m.groupdict().get("neg"))
    value = _BOOL_VALUES[m.group("word").lower()] != negated
    start = m.start("neg") if negated else m.start("word")
    return Answer(AnswerKind.BOOLEAN, value, m.string[start : m.end("word")])


def _marked_boolean(text: str, pos: int) -> _Marked:
    m = _BOOL_PAYLOAD_RE.match(text, pos)
    return _UNMARKED if m is None else _boolean_answer(m)


def _boxed_boolean(content: str) -> Answer | None:
    return _bare_boolean(_latex_plain(content))


def _bare_boolean(text: str) -> Answer | None:
    m = _BARE_BOOL_RE.fullmatch(text)
    return None if m is None else _boolean_answer(m)


def _extract_boolean(text: str) -> Answer | None:
    marked = _last_marked(text, _marked_boolean, _boxed_boolean)
    if not isinstance(marked, _Unmarked):
        return marked
    masked = _BOOL_PAIR_RE.sub(lambda m: " " * len(m.group(0)), text)
    for m in reversed(list(_BOOL_WORD_RE.finditer(masked))):
        word = m.group("word").lower()
        if word == "no" and not (
            _at_sentence_start(text, m.start()) or _NO_FOLLOWED_RE.match(text, m.end())
        ):
            continue
        negated = _negated(text, m.start())
        return Answer(AnswerKind.BOOLEAN, _BOOL_VALUES[word] != negated, text[m.start() : m.end()])
    return None


# --------------------------------------------------------------------------- choices

# After a marker: "(B)", "[b]", "B", "option B", "**C**"; a lower-case letter too, except that
# "a" must end the sentence (in "the answer is a cat", "a" is an article).
_CHOICE_PAYLOAD_RE = re.compile(
    r"""
    [$]?(?:(?i:option|choice|letter)\s*)?
    (?: \((?P<p>[A-Ea-e])\) | \[(?P<b>[A-Ea-e])\]
      | (?P<u>[A-E])(?!\w) | (?P<l>[b-e])(?!\w) | (?P<a>a)(?=\s*(?:[.,;:!?)\]*]|\Z))
    )
    """,
    re.VERBOSE,
)
_BARE_CHOICE_RE = re.compile(
    r"\s*(?:(?i:option|choice)\s*)?(?:\((?P<p>[A-Ea-e])\)|\[(?P<b>[A-Ea-e])\]|(?P<u>[A-Ea-e]))"
    r"\s*[.)]?\s*"
)
# Unmarked: "(C)", "[C]", "option C", a line that opens with "C." / "C)" / "C:" or is "C",
# and "**C**". Upper-case only: "(a) first point (b) second" is an enumeration.
_CHOICE_RE = re.compile(
    r"""
      \((?P<p>[A-E])\) | \[(?P<b>[A-E])\]
    | \b(?i:option|choice)\s*(?:is\b\s*:?|:)?\s*[(\[]?(?P<o>[A-E])(?!\w)
    | ^[ \t*"'`>]*(?P<l>[A-E])(?:[.):]|\*\*|[ \t]*$)
    | \*\*(?P<s>[A-E])\*\*
    """,
    re.VERBOSE | re.MULTILINE,
)


def _choice_answer(m: re.Match[str]) -> Answer:
    letter = next(v for v in m.groupdict().values() if v is not None)
    return Answer(AnswerKind.CHOICE, letter.upper(), m.group(0).strip())


def _marked_choice(text: str, pos: int) -> _Marked:
    m = _CHOICE_PAYLOAD_RE.match(text, pos)
    return _UNMARKED if m is None else _choice_answer(m)


def _bare_choice(text: str) -> Answer | None:
    m = _BARE_CHOICE_RE.fullmatch(text)
    return None if m is None else _choice_answer(m)


def _boxed_choice(content: str) -> Answer | None:
    return _bare_choice(_latex_plain(content))


def _extract_choice(text: str) -> Answer | None:
    marked = _last_marked(text, _marked_choice, _boxed_choice)
    if not isinstance(marked, _Unmarked):
        return marked
    bare = _bare_choice(text)
    if bare is not None:
        return bare
    for m in reversed(list(_CHOICE_RE.finditer(text))):
        if not _negated(text, m.start()):
            return _choice_answer(m)
    return None


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


def _code(text: str) -> Answer | None:
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


def _whole_json(text: str) -> Answer | None:
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


def _extract_json(text: str) -> Answer | None:
    fences = list(_FENCE_RE.finditer(text))
    labelled = [f for f in fences if f.group("info").strip().lower() == "json"]
    if labelled:
        return _whole_json(labelled[-1].group("body"))
    parsed = [a for f in fences if not f.group("info").strip() if (a := _whole_json(f["body"]))]
    if parsed:
        return parsed[-1]
    return _first_json(text)


def _exact(text: str) -> Answer | None:
    value = " ".join(text.split())
    return Answer(AnswerKind.EXACT, value, text) if value else None


# --------------------------------------------------------------------------- tool calls


def _calls_answer(calls: Sequence[ToolCall]) -> Answer | None:
    """The answer of a sequence of calls: their canonical text as the value, their
    readable form as ``raw``; None for no call."""
    if not calls:
        return None
    return Answer(AnswerKind.TOOL_CALL, canonical_calls(calls), describe_calls(calls))


def _extract_tool_calls(text: str) -> Answer | None:
    return _calls_answer(calls_in_text(text))


def _reference_calls(text: str) -> Answer | None:
    calls = parse_calls(text)
    return None if calls is None else _calls_answer(calls)


# --------------------------------------------------------------------------- public API


def _as_kind(kind: AnswerKind | str) -> AnswerKind:
    if isinstance(kind, AnswerKind):
        return kind
    try:
        return AnswerKind(str(kind).strip().lower())
    except ValueError:
        choices = ", ".join(k.value for k in AnswerKind)
        raise ValueError(f"unknown answer kind {kind!r}; expected one of: {choices}") from None


_EXTRACTORS: dict[AnswerKind, Callable[[str], Answer | None]] = {
    AnswerKind.NUMBER: _extract_number,
    AnswerKind.BOOLEAN: _extract_boolean,
    AnswerKind.CHOICE: _extract_choice,
    AnswerKind.CODE: _code,
    AnswerKind.JSON: _extract_json,
    AnswerKind.EXACT: _exact,
    AnswerKind.TOOL_CALL: _extract_tool_calls,
}
"""How an answer of each kind is found in a model's output (reasoning already stripped)."""


def extract_answer(
    text: str, kind: AnswerKind | str, calls: Sequence[ToolCall] = ()
) -> Answer | None:
    """Extract the final answer of ``kind`` from a generation, or ``None`` if there is none.

    ``text`` is the answer text only (a ``reasoning_content`` returned apart is never passed).
    Reasoning in it is stripped first (:func:`strip_reasoning`: after the last ``</think>``;
    an unclosed ``<think>`` is reasoning to the end). Then, for ``number``, ``boolean`` and
    ``choice``, the **last** explicit marker wins: ``answer is X`` / ``answer: X`` / ``final
    answer is X`` / ``correct option is X``, ``\\boxed{X}``, ``#### X``. A marker followed by
    something that is not this kind's answer (``the answer is the sum``) does not count; a
    marked answer that is malformed (``the answer is 3,5``, ``\\boxed{3, 5}``) gives ``None``.
    Else the **last** well-formed answer of the kind in the text.

    * ``number``: a ``Decimal``, or an exact ``Fraction`` for fractions; compared by value
      (``12345`` = ``12,345`` = ``1.2345e4``; ``0.30`` = ``0.3``; ``3/4`` = ``\\frac{3}{4}``
      = ``0.75``; ``1 3/4`` = ``1.75``; ``-0`` = ``0``). Accepts a sign (``-``, ``+``, unicode
      minus), a currency prefix (``$``, ``\\$``, euro, pound, yen; dropped), thousands
      separators only in valid 3-digit groups (``1,234,567.89``; LaTeX ``1{,}234``),
      ``.5``, exponents (``1e3``, ``2.5 \\times 10^{3}``, ``10^{-3}``) and a ``%`` suffix
      (dropped: ``50%`` = ``50``). Invalid grouping is not a number: ``1,23``, ``3,5``
      (decimal comma), ``1,2345``, ``1,2,3`` give nothing, nor do versions (``1.2.3``),
      dates (``3/4/2024``) or ``1/0``. Units and a trailing full stop may follow. A marked
      expression (``the answer is 3 + 4 = 7``) gives the number after its last ``=``. A box
      holds one number (or ``x = <number>``). Unmarked: the last number not directly negated
      ("not 4", "isn't 4").
    * ``boolean``: ``yes``/``true`` -> True, ``no``/``false`` -> False (any case). Marked:
      the word right after the marker (``the answer is not yes`` -> False). Unmarked: the last
      decisive word, a directly preceding negation flipping it (``not true`` -> False); ``no``
      counts only at a sentence start or before punctuation (not "there is no doubt"), and
      the words of ``yes or no`` / ``true or false`` never count.
    * ``choice``: a letter ``A``-``E``, upper-cased. Marked: ``(C)``, ``[c]``, ``C``, ``b``,
      ``option C``, ``**C**``, ``\\boxed{C}`` (``a`` only when it ends the sentence: "the
      answer is a cat" is no answer). Unmarked: a reply that is just a letter (``b``, ``(b)``,
      ``B.``), else the last upper-case ``(C)``, ``[C]``, ``option C``, ``**C**`` or line that
      opens with ``C.`` / ``C)`` / ``C:`` or is ``C``, not directly negated.
    * ``code``: the body of the **last** fenced block (triple backticks or ``~~~``, any
      language; an unterminated block runs to the end), else the whole text; line endings
      made ``\\n``, trailing whitespace of each line and leading/trailing blank lines removed
      (indentation kept).
    * ``json``: the **last** fenced block labelled ``json``, which must hold exactly one JSON
      object or array (else ``None``); else the last unlabelled fenced block that holds one;
      else the **first** object or array in the text that parses (text after it ignored).
      Canonicalised: keys sorted, no spaces, numbers by value (``1`` = ``1.0`` = ``1e0``,
      ``0.30`` = ``0.3``), while ``true`` != ``1`` and ``null`` != ``0``; ``NaN`` and
      ``Infinity`` are not JSON.
    * ``exact``: the text stripped, internal whitespace collapsed to single spaces; case and
      punctuation kept.
    * ``tool_call``: every call, in order: first ``calls`` (what a chat server parsed out of
      the output and returned apart, ``Generation.tool_calls``), then each ``<tool_call>``
      block of the text (:func:`~pytest_infercheck.tools.calls_in_text`: one JSON object
      ``{"name": ..., "arguments": {...}}`` per block, whitespace ignored). The value is
      :func:`~pytest_infercheck.tools.canonical_calls` of them (name, and arguments as JSON
      values: key order is irrelevant, ``1`` = ``1.0``, ``"1"`` != ``1``), ``raw`` their
      readable form (``add(a=12, b=34)``). No call at all: ``None``. A **malformed** call (a
      block that is not such an object, arguments that are not JSON) is kept, not dropped:
      the answer is then never equal to a reference (references are well-formed), so it is
      wrong, and two different malformed texts are two different answers (a flip, or
      ``wrong_to_wrong`` against a reference). Markers do not apply. ``calls`` is read by
      this kind only.

    Raises:
        ValueError: for an unknown ``kind``.
    """
    answer_kind = _as_kind(kind)
    stripped = strip_reasoning(text)
    if answer_kind is AnswerKind.TOOL_CALL:
        return _calls_answer((*calls, *calls_in_text(stripped)))
    return _EXTRACTORS[answer_kind](stripped)


_REFERENCE_PARSERS: dict[AnswerKind, Callable[[str], Answer | None]] = {
    AnswerKind.NUMBER: _bare_number,
    AnswerKind.BOOLEAN: _bare_boolean,
    AnswerKind.CHOICE: _bare_choice,
    AnswerKind.CODE: _code,
    AnswerKind.JSON: _whole_json,
    AnswerKind.EXACT: _exact,
    AnswerKind.TOOL_CALL: _reference_calls,
}
"""How a reference answer of each kind is read: the whole text must be one value."""


def parse_reference(reference: str, kind: AnswerKind | str) -> Answer | None:
    """Parse a reference (gold) answer with the same parsers as :func:`extract_answer`, or
    ``None`` when it is not one value of ``kind`` (suite validation rejects it then).

    The whole reference must be the value, with no markers or heuristics: ``number`` one number
    as :func:`extract_answer` reads it (``"1,234"``, ``"$12"``, ``"-0.3"``, ``"3/4"``,
    ``"\\frac{1}{2}"``, ``"1e3"``, ``"50%"``; not ``"12,34"`` or ``"12 apples"``); ``boolean``
    ``yes``/``no``/``true``/``false``; ``choice`` one letter ``A``-``E`` (``"c"``, ``"(C)"``);
    ``json`` exactly one object or array; ``code`` the last fenced block or the whole text;
    ``exact`` non-blank text; ``tool_call`` the JSON text of one or more well-formed calls
    (:func:`~pytest_infercheck.tools.parse_calls`: the :func:`~pytest_infercheck.tools.
    canonical_calls` form that suites store, ``[{"arguments": {...}, "name": "add"}]``, any
    spacing or key order; not ``[]``, not a call with an empty name or non-object
    arguments). An output that is just the reference extracts to it (of ``tool_call``: an
    output whose calls are the reference's).
    """
    return _REFERENCE_PARSERS[_as_kind(kind)](reference)


def shown_reference(reference: str | None, kind: AnswerKind | str | None) -> str | None:
    """A reference as reports show it: of ``tool_call``, its calls readable (``add(a=12,
    b=34)``, :func:`~pytest_infercheck.tools.describe_calls`) rather than their canonical
    JSON; of the other kinds (or a reference that does not parse) as the suite gives it."""
    if reference is None or kind is None or _as_kind(kind) is not AnswerKind.TOOL_CALL:
        return reference
    parsed = parse_reference(reference, kind)
    return reference if parsed is None else parsed.raw


def answers_equal(a: Answer | None, b: Answer | None) -> bool:
    """Same kind and equal normalised value; two ``None`` are equal, ``None`` vs an answer not."""
    if a is None or b is None:
        return a is None and b is None
    return a.kind is b.kind and a.value == b.value


class FlipKind(str, Enum):
    """How the test engine's answer relates to the baseline's (and to the reference).

    The one taxonomy of answer flips (see :func:`classify_flip`): what counts as a flip is
    :attr:`is_flip`, whether a flip fails an item is :func:`fails_item`, and the order in
    which reports list them is :data:`FLIP_SEVERITY_ORDER`.
    """

    UNCHANGED = "unchanged"
    CORRECT_TO_WRONG = "correct_to_wrong"
    WRONG_TO_CORRECT = "wrong_to_correct"
    WRONG_TO_WRONG = "wrong_to_wrong"
    CHANGED = "changed"

    def __str__(self) -> str:
        return self.value

    @property
    def is_flip(self) -> bool:
        """True for ``correct_to_wrong``, ``wrong_to_correct`` and ``changed``.

        ``wrong_to_wrong`` is not a flip: with a reference, both answers are wrong, so the
        change did not move correctness (it is counted separately, as its own kind).
        ``unchanged`` is not a flip either.
        """
        return self in (FlipKind.CORRECT_TO_WRONG, FlipKind.WRONG_TO_CORRECT, FlipKind.CHANGED)


FailItemOn = Literal["correct_to_wrong", "any", "never"]
"""The values of ``flips.fail_item_on``: which flip fails a prompt's item."""

FLIP_VALUES: tuple[str, ...] = tuple(kind.value for kind in FlipKind if kind.is_flip)
"""The values of the kinds that are flips (:attr:`FlipKind.is_flip`), for reports that hold
flips as plain strings: ``("correct_to_wrong", "wrong_to_correct", "changed")``."""

FLIP_SEVERITY_ORDER: tuple[FlipKind, ...] = (
    FlipKind.CORRECT_TO_WRONG,
    FlipKind.CHANGED,
    FlipKind.WRONG_TO_CORRECT,
    FlipKind.WRONG_TO_WRONG,
    FlipKind.UNCHANGED,
)
"""Every kind, most severe first: a regression, then a change of unknown direction (no
reference), then an improvement, then a change between two wrong answers, then none."""


def _as_flip(flip: FlipKind | str) -> FlipKind:
    if isinstance(flip, FlipKind):
        return flip
    try:
        return FlipKind(flip)
    except ValueError:
        choices = ", ".join(k.value for k in FlipKind)
        raise ValueError(f"unknown flip kind {flip!r}; expected one of: {choices}") from None


def flip_rank(flip: FlipKind | str | None) -> int:
    """Position of ``flip`` in :data:`FLIP_SEVERITY_ORDER` (0: most severe); None and
    unknown strings rank after every kind (``len(FLIP_SEVERITY_ORDER)``)."""
    if flip is None:
        return len(FLIP_SEVERITY_ORDER)
    try:
        return FLIP_SEVERITY_ORDER.index(_as_flip(flip))
    except ValueError:
        return len(FLIP_SEVERITY_ORDER)


def fails_item(flip: FlipKind | str | None, fail_item_on: FailItemOn) -> bool:
    """Whether ``flip`` fails an item under ``flips.fail_item_on`` (the one place that
    decides it).

    ``never``: no flip fails. ``correct_to_wrong``: only ``correct_to_wrong`` fails. ``any``:
    every flip (:attr:`FlipKind.is_flip`) fails: ``correct_to_wrong``, ``wrong_to_correct``
    and ``changed``, never ``wrong_to_wrong`` or ``unchanged``. None (the prompt has no
    answer kind, nothing was compared) never fails.

    Raises:
        ValueError: for an unknown flip kind or ``fail_item_on`` value.
    """
    if fail_item_on not in get_args(FailItemOn):
        choices = ", ".join(get_args(FailItemOn))
        raise ValueError(f"unknown fail_item_on {fail_item_on!r}; expected one of: {choices}")
    if flip is None:
        return False
    kind = _as_flip(flip)
    if fail_item_on == "never":
        return False
    if fail_item_on == "correct_to_wrong":
        return kind is FlipKind.CORRECT_TO_WRONG
    return kind.is_flip


def classify_flip(base: Answer | None, test: Answer | None, reference: Answer | None) -> FlipKind:
    """Classify the baseline -> test answer change.

    With a reference, "correct" means :func:`answers_equal` to it (no answer is wrong):
    correct/correct -> ``unchanged``; correct/wrong -> ``correct_to_wrong``; wrong/correct ->
    ``wrong_to_correct``; wrong/wrong -> ``unchanged`` if the two answers are equal, else
    ``wrong_to_wrong``. Without a reference (``None``): ``unchanged`` if equal, else
    ``changed``.
    """
    same = answers_equal(base, test)
    if reference is None:
        return FlipKind.UNCHANGED if same else FlipKind.CHANGED
    base_ok = base is not None and answers_equal(base, reference)
    test_ok = test is not None and answers_equal(test, reference)
    if base_ok and test_ok:
        return FlipKind.UNCHANGED
    if base_ok:
        return FlipKind.CORRECT_TO_WRONG
    if test_ok:
        return FlipKind.WRONG_TO_CORRECT
    return FlipKind.UNCHANGED if same else FlipKind.WRONG_TO_WRONG


@dataclass(frozen=True)
class AnswerFlip:
    """Two outputs' answers to one prompt and how they relate (:func:`judge_answers`)."""

    base: Answer | None
    test: Answer | None
    flip: FlipKind


def judge_answers(
    answer_kind: AnswerKind | str,
    reference: str | None,
    base_text: str,
    test_text: str,
    *,
    base_calls: Sequence[ToolCall] = (),
    test_calls: Sequence[ToolCall] = (),
) -> AnswerFlip:
    """The answers of ``base_text`` and ``test_text`` (:func:`extract_answer` by the prompt's
    ``answer_kind``, with the calls each side's server parsed out of it, its
    ``Generation.tool_calls``) and their flip against the prompt's ``reference`` answer, if it
    has one (:func:`classify_flip`): the one path every check takes from two outputs to a
    flip."""
    base = extract_answer(base_text, answer_kind, base_calls)
    test = extract_answer(test_text, answer_kind, test_calls)
    expected = parse_reference(reference, answer_kind) if reference is not None else None
    return AnswerFlip(base, test, classify_flip(base, test, expected))
