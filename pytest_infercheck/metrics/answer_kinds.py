"""What an extracted answer is (:class:`AnswerKind`, :class:`Answer`), the reasoning a reply's
answer is read after (:func:`strip_reasoning`), and the explicit final-answer markers shared by
the number, boolean and choice extractors (:func:`last_marked`): the ground the per-kind
extractors of :mod:`.answers` (:mod:`.answer_numbers`, :mod:`.answer_words`,
:mod:`.answer_texts`) stand on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from fractions import Fraction


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
# "#### " (GSM8K); `\boxed{...}` is found by brace matching (see boxes).
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


def is_negated(text: str, start: int) -> bool:
    return _NEGATION_RE.search(text[max(0, start - _NEGATION_WINDOW) : start]) is not None


class Unmarked:
    """What a marker's payload parser returns when the marker does not mark this kind (e.g.
    "the answer is the number of apples, 12" for a number): the marker is ignored."""


UNMARKED = Unmarked()
Marked = Answer | None | Unmarked  # an answer, a malformed marked answer, or not marked
PayloadParser = Callable[[str, int], Marked]
BoxParser = Callable[[str], Answer | None]


def boxes(text: str) -> list[tuple[int, int, int]]:
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


def latex_plain(content: str) -> str:
    """``\\text{X}`` (and the like) -> ``X``, for a few levels of nesting."""
    for _ in range(_LATEX_PLAIN_PASSES):
        plain = _LATEX_TEXT_RE.sub(r"\1", content)
        if plain == content:
            break
        content = plain
    return content


def last_marked(text: str, payload: PayloadParser, box: BoxParser) -> Marked:
    """The answer the last explicit marker of ``text`` marks for a kind (``None``: malformed),
    or ``UNMARKED`` when no marker marks an answer of the kind.

    Markers are tried from the last one back, so only the winner's payload is parsed in full.
    """
    found: list[tuple[int, int, bool]] = [
        (m.end(), m.end(), False) for m in _MARKER_RE.finditer(text)
    ]
    found += [
        (begin, end, True) for start, begin, end in boxes(text) if not is_negated(text, start)
    ]
    for begin, end, is_box in sorted(found, reverse=True):
        if is_box:
            return box(text[begin:end])
        filler = _MARKER_FILLER_RE.match(text, begin)
        assert filler is not None  # the filler pattern matches the empty string
        marked = payload(text, filler.end())
        if not isinstance(marked, Unmarked):
            return marked
    return UNMARKED


def answers_equal(a: Answer | None, b: Answer | None) -> bool:
    """Same kind and equal normalised value; two ``None`` are equal, ``None`` vs an answer not."""
    if a is None or b is None:
        return a is None and b is None
    return a.kind is b.kind and a.value == b.value
