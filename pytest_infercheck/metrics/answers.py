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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..tools import ToolCall, calls_in_text
from .answer_kinds import Answer, AnswerKind, AnswerValue, answers_equal, strip_reasoning
from .answer_numbers import bare_number, extract_number
from .answer_texts import (
    calls_answer,
    code_answer,
    exact_answer,
    extract_json,
    extract_tool_calls,
    reference_calls,
    whole_json,
)
from .answer_words import bare_boolean, bare_choice, extract_boolean, extract_choice
from .flips import (
    FLIP_SEVERITY_ORDER,
    FLIP_VALUES,
    FailItemOn,
    FlipKind,
    classify_flip,
    fails_item,
    flip_rank,
)

__all__ = [
    "FLIP_SEVERITY_ORDER",
    "FLIP_VALUES",
    "Answer",
    "AnswerFlip",
    "AnswerKind",
    "AnswerValue",
    "FailItemOn",
    "FlipKind",
    "answers_equal",
    "classify_flip",
    "extract_answer",
    "fails_item",
    "flip_rank",
    "judge_answers",
    "parse_reference",
    "shown_reference",
    "strip_reasoning",
]


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
    AnswerKind.NUMBER: extract_number,
    AnswerKind.BOOLEAN: extract_boolean,
    AnswerKind.CHOICE: extract_choice,
    AnswerKind.CODE: code_answer,
    AnswerKind.JSON: extract_json,
    AnswerKind.EXACT: exact_answer,
    AnswerKind.TOOL_CALL: extract_tool_calls,
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
        return calls_answer((*calls, *calls_in_text(stripped)))
    return _EXTRACTORS[answer_kind](stripped)


_REFERENCE_PARSERS: dict[AnswerKind, Callable[[str], Answer | None]] = {
    AnswerKind.NUMBER: bare_number,
    AnswerKind.BOOLEAN: bare_boolean,
    AnswerKind.CHOICE: bare_choice,
    AnswerKind.CODE: code_answer,
    AnswerKind.JSON: whole_json,
    AnswerKind.EXACT: exact_answer,
    AnswerKind.TOOL_CALL: reference_calls,
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


@dataclass(frozen=True)
class AnswerFlip:
    """Two outputs' answers to one prompt and how they relate (:func:`judge_answers`)."""

    base: Answer | None
    test: Answer | None
    flip: FlipKind
    base_correct: bool | None = None
    """Whether the baseline's answer equals the reference (:func:`answers_equal`; no answer
    is wrong); None without a reference. With :attr:`flip` it places the prompt in the flip
    matrix: correct or wrong before, correct or wrong after."""


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
    base_correct = None if expected is None else base is not None and answers_equal(base, expected)
    return AnswerFlip(base, test, classify_flip(base, test, expected), base_correct)
