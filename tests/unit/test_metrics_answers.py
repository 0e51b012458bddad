"""Unit tests for pytest_infercheck.metrics.answers: extraction hard cases and flips.

The hand-written corpus lives in :mod:`tests.unit.answer_corpus`; the tests below run every
case of it, then cover the rules case by case (raw substrings, value types, references).
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from pytest_infercheck.metrics.answers import (
    FLIP_VALUES,
    Answer,
    AnswerKind,
    FlipKind,
    answers_equal,
    classify_flip,
    extract_answer,
    judge_answers,
    parse_reference,
    strip_reasoning,
)
from pytest_infercheck.suites import SuiteError, load_suite

from .answer_corpus import CASES, JUDGED, PAIRS, Case, Judged, Pair

# ------------------------------------------------------------------ the corpus


def _case_id(case: Case) -> str:
    return f"{case.kind}:{case.text[:40]!r}"


def test_corpus_covers_every_kind() -> None:
    assert len(CASES) >= 150
    assert len({case.text for case in CASES if case.kind == "number"}) == sum(
        case.kind == "number" for case in CASES
    ), "duplicate number case"
    for kind in AnswerKind:
        cases = [case for case in CASES if case.kind == kind.value]
        assert len(cases) >= 8, kind
        assert any(case.expected is None for case in cases), f"{kind}: no case without answer"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_corpus_case(case: Case) -> None:
    answer = extract_answer(case.text, case.kind)
    if case.expected is None:
        assert answer is None, case.note
        return
    assert answer is not None, case.note
    assert answer.kind is AnswerKind(case.kind)
    if case.kind == "number":
        assert isinstance(answer.value, Decimal | Fraction)
        assert answer.value == Fraction(str(case.expected)), case.note
    elif case.kind == "boolean":
        assert answer.value is case.expected, case.note
    else:
        assert answer.value == case.expected, case.note


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p.kind}:{p.reference}~{p.output[:30]!r}")
def test_corpus_reference_pair(pair: Pair) -> None:
    reference = parse_reference(pair.reference, pair.kind)
    assert reference is not None, f"reference {pair.reference!r} does not parse"
    assert answers_equal(reference, extract_answer(pair.output, pair.kind)) is pair.equal
    # A reply that is just the reference is scored correct: the same parser reads both.
    assert answers_equal(extract_answer(pair.reference, pair.kind), reference)


@pytest.mark.parametrize("judged", JUDGED, ids=lambda j: f"{j.kind}:{j.flip.value}")
def test_corpus_judged(judged: Judged) -> None:
    result = judge_answers(judged.kind, judged.reference, judged.base, judged.test)
    assert result.flip is judged.flip, judged.note


# ------------------------------------------------------------------ reasoning


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>b", "b"),
        ("a</think>b", "b"),  # Qwen3: the template opened the block
        ("<think>a</think>b</think>c", "c"),  # the last closing tag
        ("<think>a", ""),  # unclosed: all reasoning
        ("b<think>a", "b"),  # an unclosed block runs to the end
        ("<Thinking>a</Thinking>b", "b"),
        ("no tags", "no tags"),
    ],
)
def test_strip_reasoning(text: str, expected: str) -> None:
    assert strip_reasoning(text) == expected


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    ("text", "value", "raw"),
    [
        ("12345", "12345", "12345"),
        ("The total is 12,345 apples.", "12345", "12,345"),
        ("It costs 1,234,567.89 in all", "1234567.89", "1,234,567.89"),
        ("The change is -0.3 degrees", "-0.3", "-0.3"),
        ("about .5 of them", "0.5", ".5"),
        ("roughly 1.5e10 stars", "15000000000", "1.5e10"),
        ("1.2345e4", "12345", "1.2345e4"),
        ("It grew by 50%", "50", "50%"),  # raw keeps what was read
        ("She paid $1,234 total", "1234", "$1,234"),
        ("The answer is 3.", "3", "3"),  # sentence full stop is not a decimal point
        ("3 \u2212 5 = \u22122", "-2", "\u22122"),  # unicode minus
        # Markers beat "last number".
        ("Step 1: 4 + 5 = 9\n#### 72\nThat took 3 steps", "72", "72"),
        ("so the result is \\boxed{1,234} (checked 7 times)", "1234", "1,234"),
        ("The answer is $42$. I checked 7 times.", "42", "$42"),
        ("Answer: 18 (from 3 groups of 6)", "18", "18"),
        ("The final answer is: **-7** after 2 tries", "-7", "-7"),
        # Otherwise the last number.
        ("a = 3 and b = 5", "5", "5"),
        ("pages 10-20", "20", "20"),  # a hyphen between numbers is not a sign
        # Invalid thousands grouping is no number, not two numbers.
        ("1,2345 and 7", "7", "7"),
        # A negated number is skipped in favour of an earlier one.
        ("It's 5, not 4.", "5", "5"),
        ("The answer is 6, it isn't 4", "6", "6"),
    ],
)
def test_extract_number(text: str, value: str, raw: str) -> None:
    answer = extract_answer(text, AnswerKind.NUMBER)
    assert answer is not None
    assert answer.kind is AnswerKind.NUMBER
    assert isinstance(answer.value, Decimal)
    assert answer.value == Decimal(value)
    assert answer.raw == raw


@pytest.mark.parametrize(
    ("text", "value", "raw"),
    [
        ("The answer is 1/3", Fraction(1, 3), "1/3"),
        ("\\boxed{\\frac{3}{4}}", Fraction(3, 4), "\\frac{3}{4}"),
        ("The answer is 1 3/4", Fraction(7, 4), "1 3/4"),
        ("x = -\\frac{2}{4}", Fraction(-1, 2), "-\\frac{2}{4}"),
    ],
)
def test_extract_fraction_is_exact(text: str, value: Fraction, raw: str) -> None:
    answer = extract_answer(text, "number")
    assert answer is not None
    assert isinstance(answer.value, Fraction)
    assert answer.value == value
    assert answer.raw == raw
    # Decimals and fractions compare and hash alike, so answers of either type are equal.
    assert hash(Decimal("0.75")) == hash(Fraction(3, 4))


@pytest.mark.parametrize(
    "text",
    [
        "the answer is not 4",
        "The answer is not 4.",
        "not 4",
        "It isn't 4",
        "the result is not equal to 4",
        "no numbers here",
        "",
    ],
)
def test_extract_number_none(text: str) -> None:
    assert extract_answer(text, "number") is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0.30", "0.3"),
        ("12345", "12,345"),
        ("12,345", "1.2345e4"),
        ("The answer is 100", "#### 100.00"),
        ("$5", "5%"),
        ("-0", "0"),
        ("3/4", "0.75"),
        ("\\frac{1}{2}", "The answer is 0.5"),
        ("1e3", "1,000"),
        ("\u22125", "-5"),
    ],
)
def test_numbers_equal_by_value(a: str, b: str) -> None:
    assert answers_equal(extract_answer(a, "number"), extract_answer(b, "number"))
    # Answer equality ignores ``raw`` too.
    assert extract_answer(a, "number") == extract_answer(b, "number")


def test_numbers_differ() -> None:
    assert not answers_equal(extract_answer("0.3", "number"), extract_answer("0.31", "number"))


# ------------------------------------------------------------------ booleans


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes", True),
        ("yes.", True),
        ("TRUE", True),
        ("No, it is not.", False),
        ("no", False),
        ("**No**, because ...", False),
        ("False", False),
        ("not true", False),
        ("Not true.", False),
        ("It isn't true that cats bark", False),
        ("That statement is not false", True),
        ("The answer is not yes", False),
        ("The answer is no.", False),
        ("Answer: True", True),
        # "no" as a determiner is not an answer; the first decisive word is "true".
        ("There is no doubt that it is true", True),
        # "answer is" wins over an earlier decisive word.
        ("Yes, well, on reflection the answer is no", False),
    ],
)
def test_extract_boolean(text: str, expected: bool) -> None:
    answer = extract_answer(text, AnswerKind.BOOLEAN)
    assert answer is not None
    assert answer.value is expected


@pytest.mark.parametrize("text", ["", "I cannot say", "There is no way to know"])
def test_extract_boolean_none(text: str) -> None:
    assert extract_answer(text, "boolean") is None


# ------------------------------------------------------------------ choices


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(B)", "B"),
        ("(B) Paris is the capital", "B"),
        ("Answer: C", "C"),
        ("The answer is (d).", "D"),
        ("B. Paris", "B"),
        ("E", "E"),
        ("I think (A) is wrong because of X, so (C)", "C"),
        ("Looking at option D, it is correct.", "D"),
        ("**A**", "A"),
    ],
)
def test_extract_choice(text: str, expected: str) -> None:
    answer = extract_answer(text, "choice")
    assert answer is not None
    assert answer.value == expected


@pytest.mark.parametrize(
    "text",
    ["A cat sat on the mat", "The answer is a cat", "The answer is not (A)", "F", ""],
)
def test_extract_choice_none(text: str) -> None:
    assert extract_answer(text, AnswerKind.CHOICE) is None


# ------------------------------------------------------------------ code


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Here you go:\n```python\n\ndef f():   \n    return 1\n\n```\nHope it helps",
            "def f():\n    return 1",
        ),
        ("```\nx = 1\n```\n```\ny = 2\n```", "y = 2"),  # the last block
        ("~~~py\nprint('hi')\n~~~", "print('hi')"),
        ("```js\nlet a = 1;  \r\nlet b = 2;\n", "let a = 1;\nlet b = 2;"),  # unterminated
        ("\n\n  x = 1   \n  y = 2\n\n", "  x = 1\n  y = 2"),  # no fence: whole text
    ],
)
def test_extract_code(text: str, expected: str) -> None:
    answer = extract_answer(text, "code")
    assert answer is not None
    assert answer.value == expected


def test_code_whitespace_variants_are_equal() -> None:
    a = extract_answer("```python\nx = 1\n```", "code")
    b = extract_answer("Sure!\n```\n\nx = 1    \n\n```", "code")
    assert answers_equal(a, b)
    assert extract_answer("   \n  ", "code") is None


# ------------------------------------------------------------------ json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"b": 1, "a": 2}', '{"a":2,"b":1}'),
        ('Result: {"b": [1, 2], "a": {"y": 1, "x": 0}} done', '{"a":{"x":0,"y":1},"b":[1,2]}'),
        ('See ref [1]. Output:\n```json\n{"k": "v"}\n```', '{"k":"v"}'),  # fence first
        ("List: [3, 1, 2]", "[3,1,2]"),  # arrays keep their order
        ('broken {"a": } then {"ok": true}', '{"ok":true}'),
        ('{"s": "caf\u00e9"}', '{"s":"caf\u00e9"}'),
    ],
)
def test_extract_json(text: str, expected: str) -> None:
    answer = extract_answer(text, "json")
    assert answer is not None
    assert answer.value == expected


def test_json_key_order_does_not_matter() -> None:
    a = extract_answer('{"name": "x", "n": 1}', "json")
    b = extract_answer('```json\n{\n  "n": 1,\n  "name": "x"\n}\n```', "json")
    assert answers_equal(a, b)
    assert extract_answer("no json here {oops}", "json") is None


# ------------------------------------------------------------------ exact


def test_extract_exact() -> None:
    answer = extract_answer("  Paris   is\n the  Capital ", "exact")
    assert answer is not None
    assert answer.value == "Paris is the Capital"
    assert not answers_equal(answer, extract_answer("paris is the capital", "exact"))
    assert extract_answer(" \n ", "exact") is None


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown answer kind"):
        extract_answer("1", "integer")
    assert extract_answer("1", "NUMBER") is not None  # kind names are case-insensitive


# ------------------------------------------------------------------ references


@pytest.mark.parametrize(
    ("reference", "kind", "value"),
    [
        ("1,234", "number", Decimal(1234)),
        ("$12", "number", Decimal(12)),
        ("0.30", "number", Decimal("0.3")),
        (" -7 ", "number", Decimal(-7)),
        ("1.5e3", "number", Decimal(1500)),
        ("3/4", "number", Decimal("0.75")),
        ("\\frac{1}{3}", "number", Fraction(1, 3)),
        ("50%", "number", Decimal(50)),
        ("12.", "number", Decimal(12)),
        ("1e+20", "number", Decimal("1e20")),  # a YAML/JSON float as the suite stores it
        ("Yes", "boolean", True),
        ("false", "boolean", False),
        ("(b)", "choice", "B"),
        ("C", "choice", "C"),
        ("c.", "choice", "C"),
        ('{"b":1,"a":2}', "json", '{"a":2,"b":1}'),
        ('{"a": 1.0}', "json", '{"a":1}'),
        ("[1, 2]", "json", "[1,2]"),
        ("```python\nx = 1  \n```", "code", "x = 1"),
        ("  two  words ", "exact", "two words"),
    ],
)
def test_parse_reference(reference: str, kind: str, value: object) -> None:
    answer = parse_reference(reference, kind)
    assert answer is not None
    assert answer.value == value


@pytest.mark.parametrize(
    ("reference", "kind"),
    [
        ("12 apples", "number"),  # bare numbers only, no "last number" heuristic
        ("abc", "number"),
        ("1,23", "number"),
        ("12,34", "number"),  # the issue: it validated, then parsed to no reference
        ("3,5", "number"),
        ("1/0", "number"),
        ("3/4/2024", "number"),
        ("1 2", "number"),
        ("twelve", "number"),
        ("maybe", "boolean"),
        ("not yes", "boolean"),
        ("Yes, but no", "boolean"),
        ("AB", "choice"),
        ("F", "choice"),
        ("The answer is C", "choice"),
        ("42", "json"),  # outputs are read as objects or arrays only
        ('{"a": 1} and more', "json"),
        ("{oops}", "json"),
        ('{"a": NaN}', "json"),
        ("  ", "exact"),
        ("", "code"),
    ],
)
def test_parse_reference_unparseable(reference: str, kind: str) -> None:
    assert parse_reference(reference, kind) is None


# ------------------------------------------------------------------ equality and flips


def test_answers_equal_none_and_kinds() -> None:
    assert answers_equal(None, None)
    one = extract_answer("1", "number")
    assert not answers_equal(one, None)
    assert not answers_equal(None, one)
    # Same "value" but different kinds never compare equal.
    assert not answers_equal(
        Answer(AnswerKind.EXACT, "A", "A"), Answer(AnswerKind.CHOICE, "A", "A")
    )


def _num(text: str) -> Answer | None:
    return extract_answer(text, "number")


REF = parse_reference("42", "number")


@pytest.mark.parametrize(
    ("base", "test", "reference", "expected"),
    [
        ("42", "42.0", REF, FlipKind.UNCHANGED),  # correct -> correct
        ("42", "41", REF, FlipKind.CORRECT_TO_WRONG),
        ("42", "no answer", REF, FlipKind.CORRECT_TO_WRONG),  # None is wrong
        ("41", "42", REF, FlipKind.WRONG_TO_CORRECT),
        ("no answer", "42", REF, FlipKind.WRONG_TO_CORRECT),
        ("41", "41", REF, FlipKind.UNCHANGED),  # wrong, but the same wrong answer
        ("no answer", "nothing", REF, FlipKind.UNCHANGED),  # both None
        ("41", "40", REF, FlipKind.WRONG_TO_WRONG),
        ("41", "no answer", REF, FlipKind.WRONG_TO_WRONG),
        ("41", "41", None, FlipKind.UNCHANGED),
        ("41", "40", None, FlipKind.CHANGED),
        ("41", "no answer", None, FlipKind.CHANGED),
        ("no answer", "nothing", None, FlipKind.UNCHANGED),
    ],
)
def test_classify_flip(base: str, test: str, reference: Answer | None, expected: FlipKind) -> None:
    assert classify_flip(_num(base), _num(test), reference) is expected


@pytest.mark.parametrize(
    ("kind", "is_flip"),
    [
        (FlipKind.UNCHANGED, False),
        (FlipKind.CORRECT_TO_WRONG, True),
        (FlipKind.WRONG_TO_CORRECT, True),
        (FlipKind.WRONG_TO_WRONG, False),
        (FlipKind.CHANGED, True),
    ],
)
def test_flip_kind_is_flip(kind: FlipKind, is_flip: bool) -> None:
    assert kind.is_flip is is_flip
    assert (kind.value in FLIP_VALUES) is is_flip  # what reports highlight as a flip
    assert kind == kind.value  # str enum


# ------------------------------------------------------------------ suite validation


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ("12,34", "number"),
        ("3,5", "number"),
        ("12 apples", "number"),
        ("F", "choice"),
        ("42", "json"),
        ("not yes", "boolean"),
    ],
)
def test_suite_rejects_a_reference_the_scorer_cannot_parse(
    tmp_path: Path, answer: str, kind: str
) -> None:
    lines = [
        {"id": "ok", "prompt": "q", "answer": "1,234", "answer_kind": "number"},
        {"id": "bad", "prompt": "q", "answer": answer, "answer_kind": kind},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    with pytest.raises(SuiteError) as info:
        load_suite("s.jsonl", tmp_path)
    assert info.value.line == 2
    assert str(info.value).startswith(f"{path}:2:")
    assert repr(answer) in info.value.reason
    assert kind in info.value.reason


def test_suite_accepts_what_the_scorer_parses(tmp_path: Path) -> None:
    references = [
        ("3/4", "number"),
        ("\\frac{1}{2}", "number"),
        ("1e3", "number"),
        ("$12", "number"),
        ("-0.3", "number"),
        ("(c)", "choice"),
        ("Yes", "boolean"),
        ('{"b": 1.0, "a": [true]}', "json"),
        ("def f(): pass", "code"),
        ("Paris", "exact"),
    ]
    path = tmp_path / "s.yaml"
    path.write_text(
        "".join(
            f"- prompt: q{i}\n  answer: {json.dumps(ref)}\n  answer_kind: {kind}\n"
            for i, (ref, kind) in enumerate(references)
        ),
        encoding="utf-8",
    )
    prompts = load_suite("s.yaml", tmp_path).prompts
    for prompt, (ref, kind) in zip(prompts, references, strict=True):
        assert prompt.answer == ref
        assert prompt.answer_kind is not None
        assert parse_reference(ref, kind) is not None


# ------------------------------------------------------------------ degenerate replies


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 20_000,  # unclosed boxes: brace matching is one pass
        "[1," * 20_000,  # inline JSON that never closes: failed attempts are budgeted
        "{" * 50_000,
        "the answer is 1 + " * 5_000,  # only the last marker's payload is parsed in full
        "no way " * 10_000,  # a determiner "no" is judged without rescanning the text
    ],
    ids=["boxes", "json-prefix", "braces", "markers", "determiners"],
)
def test_degenerate_reply_is_linear(text: str) -> None:
    for kind in AnswerKind:
        extract_answer(text, kind)  # finishes (quadratic work would take minutes)
    assert extract_answer(text, "json") is None
