"""Extract a comparable final answer from a generation, and classify answer flips.

An :class:`Answer` carries a normalised ``value`` (compared for equality) and the ``raw``
substring it came from (for reports). Extraction is heuristic but conservative: when in doubt
it returns ``None`` ("no answer"), which counts as wrong against a reference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, Literal, get_args

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
]


class AnswerKind(str, Enum):
    """How the final answer of a generation is extracted and normalised."""

    NUMBER = "number"
    BOOLEAN = "boolean"
    CHOICE = "choice"
    CODE = "code"
    JSON = "json"
    EXACT = "exact"

    def __str__(self) -> str:
        return self.value


AnswerValue = Decimal | bool | str
"""Normalised value: ``Decimal`` (number), ``bool`` (boolean), ``str`` (the other kinds)."""


@dataclass(frozen=True)
class Answer:
    """An extracted answer. Equality (and hashing) use ``kind`` and ``value`` only."""

    kind: AnswerKind
    value: AnswerValue
    raw: str = field(compare=False)


# --------------------------------------------------------------------------- numbers

# One number: optional sign, then digits with valid 3-digit thousands groups ("1,234,567.89"),
# plain digits ("12345", "0.30") or a bare fraction (".5"), then an optional exponent.
# It may not start inside a word or right after a "." ("v1.2.3" gives only "1.2").
_NUM_CORE = r"""
    [-+\u2212]?
    (?: \d{1,3}(?:,\d{3})+(?:\.\d+)?
      | \d+(?:\.\d+)?
      | \.\d+ )
    (?:[eE][-+]?\d+)?
"""
_NUM = rf"(?<![\w.])(?P<num>{_NUM_CORE})(?!\d)"
_NUM_RE = re.compile(_NUM, re.VERBOSE)
_BARE_NUM_RE = re.compile(rf"\s*\$?\s*(?P<num>{_NUM_CORE})\s*%?\s*\.?\s*", re.VERBOSE)

# A negation directly before a number / word: "not 4", "isn't 4", "is not equal to 4".
_NEGATION_RE = re.compile(
    r"(?:\bnot|n['\u2019]t|\bnever)(?:\s+(?:be|equals?(?:\s+to)?))?[\s:=$*\"'`(]*\Z",
    re.IGNORECASE,
)
_NEGATION_WINDOW = 40

_FILLER = r"[\s*$\\(:\"'`]*"
_ANSWER_IS = r"\banswer\s*(?:is\s*:?|:|=)"
_NUMBER_MARKERS: tuple[re.Pattern[str], ...] = (
    re.compile(rf"\#\#\#\#\s*\$?\s*{_NUM}", re.VERBOSE),
    re.compile(rf"{_ANSWER_IS}{_FILLER}{_NUM}", re.VERBOSE | re.IGNORECASE),
    re.compile(rf"=\s*\$?\s*{_NUM}\s*%?[\s.!)\]*$]*\Z", re.VERBOSE),
)
_BOXED = "\\boxed{"


def _negated(text: str, start: int) -> bool:
    return _NEGATION_RE.search(text[max(0, start - _NEGATION_WINDOW) : start]) is not None


def _to_decimal(raw: str) -> Decimal | None:
    try:
        return Decimal(raw.replace(",", "").replace("\u2212", "-"))
    except InvalidOperation:  # pragma: no cover - the regex only admits valid literals
        return None


def _number_answer(text: str, match: re.Match[str]) -> Answer | None:
    raw = match.group("num")
    value = _to_decimal(raw)
    return None if value is None else Answer(AnswerKind.NUMBER, value, raw)


def _boxed_contents(text: str) -> list[tuple[int, str]]:
    """``(offset, content)`` of every ``\\boxed{...}``, honouring nested braces."""
    found: list[tuple[int, str]] = []
    pos = text.find(_BOXED)
    while pos != -1:
        start = pos + len(_BOXED)
        depth, end = 1, start
        while end < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        if depth == 0:
            found.append((start, text[start : end - 1]))
        pos = text.find(_BOXED, start)
    return found


def _extract_number(text: str) -> Answer | None:
    # 1. "#### X" (GSM8K).
    matches = [m for m in _NUMBER_MARKERS[0].finditer(text) if not _negated(text, m.start("num"))]
    if matches:
        return _number_answer(text, matches[-1])
    # 2. "\boxed{X}": first number inside the last box that has one.
    for offset, content in reversed(_boxed_contents(text)):
        for m in _NUM_RE.finditer(content):
            if not _negated(text, offset + m.start("num")):
                return _number_answer(text, m)
    # 3. "answer is X" / "answer: X", 4. "= X" at the very end.
    for marker in _NUMBER_MARKERS[1:]:
        matches = [m for m in marker.finditer(text) if not _negated(text, m.start("num"))]
        if matches:
            return _number_answer(text, matches[-1])
    # 5. The last number that is not directly negated.
    for m in reversed(list(_NUM_RE.finditer(text))):
        if not _negated(text, m.start("num")):
            return _number_answer(text, m)
    return None


# --------------------------------------------------------------------------- booleans

_BOOL_VALUES = {"yes": True, "true": True, "no": False, "false": False}
_BOOL_MARKER_RE = re.compile(
    rf"{_ANSWER_IS}{_FILLER}(?P<neg>not{_FILLER})?(?P<word>yes|no|true|false)\b",
    re.IGNORECASE,
)
_BOOL_WORD_RE = re.compile(r"\b(?P<word>yes|no|true|false)\b", re.IGNORECASE)
# "no" is a determiner in "there is no doubt": only decisive at the start of a sentence or
# when followed by punctuation / the end of the text ("No, it is not.", "The answer is no").
_SENTENCE_START_RE = re.compile(r"(?:\A|[.!?:;\n])[\s*\"'`(\-]*\Z")
_NO_FOLLOWED_RE = re.compile(r"[\s*\"'`]*(?:[,.!?;:)]|\Z)")


def _extract_boolean(text: str) -> Answer | None:
    markers = list(_BOOL_MARKER_RE.finditer(text))
    if markers:
        m = markers[-1]
        value = _BOOL_VALUES[m.group("word").lower()] != bool(m.group("neg"))
        raw_start = m.start("neg") if m.group("neg") else m.start("word")
        return Answer(AnswerKind.BOOLEAN, value, text[raw_start : m.end()].strip())
    for m in _BOOL_WORD_RE.finditer(text):
        word = m.group("word").lower()
        if word == "no" and not (
            _SENTENCE_START_RE.search(text[: m.start()]) or _NO_FOLLOWED_RE.match(text, m.end())
        ):
            continue
        negated = _negated(text, m.start())
        return Answer(AnswerKind.BOOLEAN, _BOOL_VALUES[word] != negated, m.group(0))
    return None


# --------------------------------------------------------------------------- choices

# A lower-case letter only counts in brackets: in "the answer is a cat", "a" is an article.
_LETTER = r"(?:\((?P<p>[A-Ea-e])\)|\[(?P<b>[A-Ea-e])\]|(?-i:(?P<u>[A-E]))(?!\w))"
_CHOICE_FILLER = r"[\s*:\"'`]*"
_CHOICE_MARKER_RE = re.compile(
    rf"(?:{_ANSWER_IS}|\b(?:option|choice)(?:\s*(?:is\s*:?|:|=))?){_CHOICE_FILLER}{_LETTER}",
    re.IGNORECASE,
)
_CHOICE_LEADING_RE = re.compile(
    r"\A[\s*\"'`]*(?:\((?P<p>[A-Ea-e])\)|\[(?P<b>[A-Ea-e])\]|(?P<u>[A-E])(?:[.):\]*]|\s*\Z))"
)
_CHOICE_PAREN_RE = re.compile(r"\((?P<u>[A-E])\)")


def _letter(m: re.Match[str]) -> str:
    groups = m.groupdict()
    return next(v for k in ("p", "b", "u") if (v := groups.get(k)) is not None).upper()


def _extract_choice(text: str) -> Answer | None:
    markers = list(_CHOICE_MARKER_RE.finditer(text))
    if markers:
        return Answer(AnswerKind.CHOICE, _letter(markers[-1]), markers[-1].group(0))
    m = _CHOICE_LEADING_RE.match(text)
    if m:
        return Answer(AnswerKind.CHOICE, _letter(m), m.group(0).strip())
    parens = [m for m in _CHOICE_PAREN_RE.finditer(text) if not _negated(text, m.start())]
    if parens:
        return Answer(AnswerKind.CHOICE, parens[-1].group("u"), parens[-1].group(0))
    return None


# --------------------------------------------------------------------------- code / json

_FENCE_RE = re.compile(
    r"(?P<fence>`{3,}|~{3,})[^\n`]*\n(?P<body>.*?)(?:^[ \t]*(?P=fence)[ \t]*$|\Z)",
    re.MULTILINE | re.DOTALL,
)


def _normalise_code(code: str) -> str:
    lines = [line.rstrip() for line in code.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _extract_code(text: str) -> Answer | None:
    m = _FENCE_RE.search(text)
    raw = m.group("body") if m else text
    value = _normalise_code(raw)
    return Answer(AnswerKind.CODE, value, raw) if value else None


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _first_json(text: str) -> tuple[Any, str] | None:
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text):
        try:
            obj, end = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict | list):
            return obj, text[m.start() : end]
    return None


def _extract_json(text: str) -> Answer | None:
    chunks = [m.group("body") for m in _FENCE_RE.finditer(text)] + [text]
    for chunk in chunks:
        found = _first_json(chunk)
        if found is not None:
            obj, raw = found
            return Answer(AnswerKind.JSON, _canonical_json(obj), raw)
    return None


def _extract_exact(text: str) -> Answer | None:
    value = " ".join(text.split())
    return Answer(AnswerKind.EXACT, value, text) if value else None


# --------------------------------------------------------------------------- public API


def _as_kind(kind: AnswerKind | str) -> AnswerKind:
    if isinstance(kind, AnswerKind):
        return kind
    try:
        return AnswerKind(str(kind).strip().lower())
    except ValueError:
        choices = ", ".join(k.value for k in AnswerKind)
        raise ValueError(f"unknown answer kind {kind!r}; expected one of: {choices}") from None


def extract_answer(text: str, kind: AnswerKind | str) -> Answer | None:
    """Extract the final answer of ``kind`` from a generation, or ``None`` if there is none.

    * ``number``: a ``Decimal``. Accepts ``12345``, ``12,345``, ``1,234,567.89`` (thousands
      separators only in valid 3-digit groups), ``-0.3``, ``.5``, ``1.5e10``, with an optional
      ``$`` prefix / ``%`` suffix (dropped). Preference: ``#### X``, then ``\\boxed{X}``, then
      ``answer is X`` / ``answer: X``, then ``= X`` ending the text, else the last number.
      A directly negated number ("not 4", "isn't 4", "the answer is not 4") never counts.
      Values compare numerically: ``0.30 == 0.3`` and ``12,345 == 1.2345e4``.
    * ``boolean``: ``yes``/``true`` -> True, ``no``/``false`` -> False (case-insensitive),
      taken after the last ``answer is`` / ``answer:`` if any, else the first decisive word.
      A directly preceding negation flips it ("not true" -> False, "the answer is not yes"
      -> False). ``no`` only counts at a sentence start or before punctuation.
    * ``choice``: an upper-case letter ``A``-``E`` from ``answer is (B)`` / ``Answer: C`` /
      ``option D``, else a letter opening the text (``B.``, ``(B)``), else the last ``(X)``.
    * ``code``: the body of the first fenced block (triple backticks or ``~~~``, any info string),
      else the whole text; trailing whitespace of each line and leading/trailing blank lines
      removed.
    * ``json``: the first valid JSON object or array (fenced blocks first, then inline),
      canonicalised with sorted keys and no spaces, so key order does not matter.
    * ``exact``: the text stripped with internal whitespace collapsed to single spaces.

    Raises:
        ValueError: for an unknown ``kind``.
    """
    k = _as_kind(kind)
    if k is AnswerKind.NUMBER:
        return _extract_number(text)
    if k is AnswerKind.BOOLEAN:
        return _extract_boolean(text)
    if k is AnswerKind.CHOICE:
        return _extract_choice(text)
    if k is AnswerKind.CODE:
        return _extract_code(text)
    if k is AnswerKind.JSON:
        return _extract_json(text)
    return _extract_exact(text)


_BARE_BOOL_RE = re.compile(r"\s*(?P<word>yes|no|true|false)\s*[.!]?\s*", re.IGNORECASE)
_BARE_CHOICE_RE = re.compile(r"\s*[(\[]?\s*(?P<u>[A-Ea-e])\s*[)\]]?\s*\.?\s*")


def parse_reference(reference: str, kind: AnswerKind | str) -> Answer | None:
    """Parse a reference (gold) answer with the same normalisation as :func:`extract_answer`.

    ``number``, ``boolean`` and ``choice`` references must be bare values (``"1,234"``,
    ``"$12"``, ``"-0.3"``, ``"Yes"``, ``"(b)"``); no "last number" heuristics are applied.
    ``code``, ``json`` and ``exact`` references go through :func:`extract_answer`.
    Returns ``None`` when the reference cannot be parsed as ``kind``.
    """
    k = _as_kind(kind)
    if k is AnswerKind.NUMBER:
        m = _BARE_NUM_RE.fullmatch(reference)
        if m is None:
            return None
        value = _to_decimal(m.group("num"))
        return None if value is None else Answer(k, value, reference.strip())
    if k is AnswerKind.BOOLEAN:
        m = _BARE_BOOL_RE.fullmatch(reference)
        return Answer(k, _BOOL_VALUES[m.group("word").lower()], reference.strip()) if m else None
    if k is AnswerKind.CHOICE:
        m = _BARE_CHOICE_RE.fullmatch(reference)
        return Answer(k, m.group("u").upper(), reference.strip()) if m else None
    return extract_answer(reference, k)


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
    answer_kind: AnswerKind | str, reference: str | None, base_text: str, test_text: str
) -> AnswerFlip:
    """The answers of ``base_text`` and ``test_text`` (:func:`extract_answer` by the prompt's
    ``answer_kind``) and their flip against the prompt's ``reference`` answer, if it has one
    (:func:`classify_flip`): the one path every check takes from two outputs to a flip."""
    base = extract_answer(base_text, answer_kind)
    test = extract_answer(test_text, answer_kind)
    expected = parse_reference(reference, answer_kind) if reference is not None else None
    return AnswerFlip(base, test, classify_flip(base, test, expected))
