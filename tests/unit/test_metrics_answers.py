"""Unit tests for pytest_infercheck.metrics.answers: extraction hard cases and flips."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pytest_infercheck.metrics.answers import (
    Answer,
    AnswerKind,
    FlipKind,
    answers_equal,
    classify_flip,
    extract_answer,
    parse_reference,
)

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
        ("It grew by 50%", "50", "50"),
        ("She paid $1,234 total", "1234", "1,234"),
        ("The answer is 3.", "3", "3"),  # sentence full stop is not a decimal point
        ("3 \u2212 5 = \u22122", "-2", "\u22122"),  # unicode minus
        # Markers beat "last number".
        ("Step 1: 4 + 5 = 9\n#### 72\nThat took 3 steps", "72", "72"),
        ("so the result is \\boxed{1,234} (checked 7 times)", "1234", "1,234"),
        ("The answer is $42$. I checked 7 times.", "42", "42"),
        ("Answer: 18 (from 3 groups of 6)", "18", "18"),
        ("The final answer is: **-7** after 2 tries", "-7", "-7"),
        # Otherwise the last number.
        ("a = 3 and b = 5", "5", "5"),
        ("pages 10-20", "20", "20"),  # a hyphen between numbers is not a sign
        # Invalid thousands grouping: "1,2345" is the numbers 1 and 2345.
        ("1,2345", "2345", "2345"),
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
        ("```\nx = 1\n```\n```\ny = 2\n```", "x = 1"),  # the first block
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
        ("Yes", "boolean", True),
        ("false", "boolean", False),
        ("(b)", "choice", "B"),
        ("C", "choice", "C"),
        ('{"b":1,"a":2}', "json", '{"a":2,"b":1}'),
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
        ("maybe", "boolean"),
        ("AB", "choice"),
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
    assert kind == kind.value  # str enum
