"""Numbers as answers: one number read by value (signs, currency, thousands groups, exponents,
fractions, percentages), marked or the last one not negated (:func:`extract_number`), and a
reference that is exactly one number (:func:`bare_number`)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from .answer_kinds import (
    UNMARKED,
    Answer,
    AnswerKind,
    Marked,
    Unmarked,
    is_negated,
    last_marked,
    latex_plain,
)

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


def _marked_number(text: str, pos: int) -> Marked:
    qualifier = _NUM_QUALIFIER_RE.match(text, pos)
    assert qualifier is not None  # the pattern matches the empty string
    m = _NUM_RE.match(text, qualifier.end())
    if m is None:
        return None if _NUM_ATTEMPT_RE.match(text, qualifier.end()) else UNMARKED
    if _EXPR_RE.match(text, m.end()):
        # An expression: its result is the number after the last "=" on the same line.
        line_end = text.find("\n", m.end())
        line = text[m.end() : len(text) if line_end == -1 else line_end]
        results = list(_EQUALS_NUM_RE.finditer(line))
        return _number_answer(results[-1]) if results else None
    return _number_answer(m)


def _boxed_number(content: str) -> Answer | None:
    """A box holds one number, or ``x = <number>``; anything else is malformed."""
    content = latex_plain(content)
    content = content[content.rfind("=") + 1 :]
    tokens = [m for m in _NUM_RE.finditer(content) if not is_negated(content, m.start())]
    return _number_answer(tokens[0]) if len(tokens) == 1 else None


def bare_number(text: str) -> Answer | None:
    m = _BARE_NUM_RE.fullmatch(_prepare_numbers(text))
    return None if m is None else _number_answer(m)


def extract_number(text: str) -> Answer | None:
    text = _prepare_numbers(text)
    marked = last_marked(text, _marked_number, _boxed_number)
    if not isinstance(marked, Unmarked):
        return marked
    for m in reversed(list(_NUM_RE.finditer(text))):
        if not is_negated(text, m.start("num")):
            answer = _number_answer(m)
            if answer is not None:
                return answer
    return None
