"""Words as answers: a boolean (``yes``/``no``/``true``/``false``, a negation flipping it) and a
multiple-choice letter ``A``-``E``, marked or the last decisive one (:func:`extract_boolean`,
:func:`extract_choice`), and references that are exactly one (:func:`bare_boolean`,
:func:`bare_choice`)."""

from __future__ import annotations

import re

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


def _marked_boolean(text: str, pos: int) -> Marked:
    m = _BOOL_PAYLOAD_RE.match(text, pos)
    return UNMARKED if m is None else _boolean_answer(m)


def _boxed_boolean(content: str) -> Answer | None:
    return bare_boolean(latex_plain(content))


def bare_boolean(text: str) -> Answer | None:
    m = _BARE_BOOL_RE.fullmatch(text)
    return None if m is None else _boolean_answer(m)


def extract_boolean(text: str) -> Answer | None:
    marked = last_marked(text, _marked_boolean, _boxed_boolean)
    if not isinstance(marked, Unmarked):
        return marked
    masked = _BOOL_PAIR_RE.sub(lambda m: " " * len(m.group(0)), text)
    for m in reversed(list(_BOOL_WORD_RE.finditer(masked))):
        word = m.group("word").lower()
        if word == "no" and not (
            _at_sentence_start(text, m.start()) or _NO_FOLLOWED_RE.match(text, m.end())
        ):
            continue
        negated = is_negated(text, m.start())
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


def _marked_choice(text: str, pos: int) -> Marked:
    m = _CHOICE_PAYLOAD_RE.match(text, pos)
    return UNMARKED if m is None else _choice_answer(m)


def bare_choice(text: str) -> Answer | None:
    m = _BARE_CHOICE_RE.fullmatch(text)
    return None if m is None else _choice_answer(m)


def _boxed_choice(content: str) -> Answer | None:
    return bare_choice(latex_plain(content))


def extract_choice(text: str) -> Answer | None:
    marked = last_marked(text, _marked_choice, _boxed_choice)
    if not isinstance(marked, Unmarked):
        return marked
    bare = bare_choice(text)
    if bare is not None:
        return bare
    for m in reversed(list(_CHOICE_RE.finditer(text))):
        if not is_negated(text, m.start()):
            return _choice_answer(m)
    return None
