"""Unit tests for pytest_infercheck.metrics.sameness: the one rule for "same output".

Every expected value below is worked out by hand from the inputs written next to it.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_infercheck.backends import Generation
from pytest_infercheck.metrics.sameness import Basis, Sameness, compare_outputs, same_generation


def _gen(text: str, ids: list[int] | None = None, tokens: list[str] | None = None) -> Generation:
    return Generation(text=text, token_ids=ids, finish_reason="stop", token_texts=tokens)


def test_equal_ids_and_equal_text_are_the_same() -> None:
    got = compare_outputs("Paris", [11, 22, 2], "Paris", [11, 22, 2])
    assert got == Sameness(
        same=True,
        basis=Basis.IDS_TEXT,
        ids_equal=True,
        text_equal=True,
        first_divergence=None,
        divergence_unit=None,
    )
    assert not got.detokenization_difference
    assert got.describe() == "identical"


def test_equal_ids_different_text_is_a_detokenization_difference() -> None:
    # "caf\u00e9!" vs "cafe!": the ids agree, the texts first differ at index 3 ("\u00e9" vs "e").
    got = compare_outputs("caf\u00e9!", [7, 8, 9], "cafe!", [7, 8, 9])
    assert got.same is False
    assert got.basis is Basis.IDS_TEXT
    assert got.ids_equal is True
    assert got.text_equal is False
    assert (got.first_divergence, got.divergence_unit) == (3, "char")
    assert got.detokenization_difference
    assert got.describe() == (
        "same token ids, text differs from character 3 (detokenization difference)"
    )


def test_different_ids_with_equal_text_are_not_the_same() -> None:
    # "ab" generated as tokens [5, 6] or as [9]: the same text, different tokens. Not the
    # same (a text-only comparison would say it is), diverging at token 0.
    got = compare_outputs("ab", [5, 6], "ab", [9])
    assert got.same is False
    assert got.basis is Basis.IDS_TEXT
    assert got.ids_equal is False
    assert got.text_equal is True
    assert (got.first_divergence, got.divergence_unit) == (0, "token")
    assert not got.detokenization_difference
    assert got.describe() == "token ids differ from token 0"


def test_ids_decide_the_divergence_even_when_the_texts_also_differ() -> None:
    # ids [1, 2, 3, 4] vs [1, 2, 3, 5]: token 3; texts "abcd" vs "aXcd": character 1. The
    # token index is reported.
    got = compare_outputs("abcd", [1, 2, 3, 4], "aXcd", (1, 2, 3, 5))
    assert (got.same, got.ids_equal, got.text_equal) == (False, False, False)
    assert (got.first_divergence, got.divergence_unit) == (3, "token")
    assert got.describe() == "token ids differ from token 3"


def test_a_list_and_a_tuple_of_the_same_ids_are_equal() -> None:
    # Generation holds a list, RunOutput a tuple; [1, 2] == (1, 2) is False in Python.
    got = compare_outputs("hi", [1, 2], "hi", (1, 2))
    assert got.same and got.ids_equal


def test_no_ids_but_token_texts() -> None:
    same = compare_outputs(
        "Hello world", None, "Hello world", None, ["Hello", " world"], ("Hello", " world")
    )
    assert same == Sameness(
        same=True,
        basis=Basis.TOKEN_TEXTS_TEXT,
        ids_equal=None,
        text_equal=True,
        first_divergence=None,
        divergence_unit=None,
        token_texts_equal=True,
    )
    # "Hello world" split as ["Hello", " world"] vs ["Hel", "lo", " world"]: the same text,
    # token texts differ at token 0 -> not the same.
    split = compare_outputs(
        "Hello world", None, "Hello world", None, ["Hello", " world"], ["Hel", "lo", " world"]
    )
    assert (split.same, split.basis, split.text_equal) == (False, Basis.TOKEN_TEXTS_TEXT, True)
    assert split.token_texts_equal is False
    assert (split.first_divergence, split.divergence_unit) == (0, "token")
    assert split.describe() == "token texts differ from token 0"
    # Equal token texts, different text ("Hi!" vs "Hi?"): character 2.
    text = compare_outputs("Hi!", None, "Hi?", None, ["Hi", "!"], ["Hi", "!"])
    assert (text.same, text.token_texts_equal, text.text_equal) == (False, True, False)
    assert (text.first_divergence, text.divergence_unit) == (2, "char")
    assert not text.detokenization_difference  # that name is kept for equal ids
    assert text.describe() == "same token texts, text differs from character 2"


def test_token_texts_are_ignored_when_both_sides_have_ids() -> None:
    got = compare_outputs("ab", [1], "ab", [1], ["a", "b"], ["ab"])
    assert (got.same, got.basis, got.token_texts_equal) == (True, Basis.IDS_TEXT, None)


def test_text_only() -> None:
    assert compare_outputs("yes", None, "yes", None) == Sameness(
        same=True,
        basis=Basis.TEXT,
        ids_equal=None,
        text_equal=True,
        first_divergence=None,
        divergence_unit=None,
    )
    # "yes." vs "yes!": character 3.
    got = compare_outputs("yes.", None, "yes!", None)
    assert (got.same, got.basis, got.ids_equal, got.text_equal) == (False, Basis.TEXT, None, False)
    assert (got.first_divergence, got.divergence_unit) == (3, "char")
    assert got.describe() == "text differs from character 3"


@pytest.mark.parametrize(
    ("a", "b", "basis", "unit"),
    [
        (("", [], None), ("x", [42], None), Basis.IDS_TEXT, "token"),
        (("x", [42], None), ("", [], None), Basis.IDS_TEXT, "token"),
        (("", None, []), ("x", None, ["x"]), Basis.TOKEN_TEXTS_TEXT, "token"),
        (("", None, None), ("x", None, None), Basis.TEXT, "char"),
        (("x", None, None), ("", None, None), Basis.TEXT, "char"),
    ],
)
def test_empty_vs_non_empty_is_never_the_same(
    a: tuple[Any, ...], b: tuple[Any, ...], basis: Basis, unit: str
) -> None:
    got = compare_outputs(a[0], a[1], b[0], b[1], a[2], b[2])
    assert got.same is False
    assert got.basis is basis
    assert (got.first_divergence, got.divergence_unit) == (0, unit)


def test_empty_ids_with_different_text_diverge_at_character_0() -> None:
    # No tokens on either side, yet one text is not empty: a detokenization difference at 0.
    got = compare_outputs("", [], "x", [])
    assert (got.same, got.ids_equal, got.first_divergence, got.divergence_unit) == (
        False,
        True,
        0,
        "char",
    )
    assert got.detokenization_difference


def test_ids_on_one_side_only_fall_back_to_text() -> None:
    # Only a has ids (and only b has token texts): neither pair is complete, basis text.
    same = compare_outputs("ok", [3, 4], "ok", None, None, ["o", "k"])
    assert (same.same, same.basis, same.ids_equal, same.token_texts_equal) == (
        True,
        Basis.TEXT,
        None,
        None,
    )
    differ = compare_outputs("ok", None, "no", [9])
    assert (differ.same, differ.basis, differ.first_divergence, differ.divergence_unit) == (
        False,
        Basis.TEXT,
        0,
        "char",
    )


def test_a_prefix_diverges_at_the_length_of_the_shorter() -> None:
    got = compare_outputs("ab", None, "abc", None)
    assert (got.same, got.first_divergence, got.divergence_unit) == (False, 2, "char")
    # The same with ids: [1, 2] is a prefix of [1, 2, 3] -> token 2.
    ids = compare_outputs("ab", [1, 2], "abc", [1, 2, 3])
    assert (ids.same, ids.first_divergence, ids.divergence_unit) == (False, 2, "token")


def test_same_generation_reads_text_ids_and_token_texts() -> None:
    assert same_generation(_gen("ab", [5, 6]), _gen("ab", [9])).describe() == (
        "token ids differ from token 0"
    )
    assert same_generation(_gen("ab", [5]), _gen("aB", [5])).detokenization_difference
    by_tokens = same_generation(_gen("ab", tokens=["a", "b"]), _gen("ab", tokens=["ab"]))
    assert (by_tokens.basis, by_tokens.same, by_tokens.first_divergence) == (
        Basis.TOKEN_TEXTS_TEXT,
        False,
        0,
    )
    assert same_generation(_gen("ab"), _gen("ab", [1])).basis is Basis.TEXT


def test_to_dict_is_plain() -> None:
    got = compare_outputs("ab", [1, 2], "ab", [1, 3]).to_dict()
    assert got == {
        "same": False,
        "basis": "ids+text",
        "ids_equal": False,
        "token_texts_equal": None,
        "text_equal": True,
        "first_divergence": 1,
        "divergence_unit": "token",
    }
    assert type(got["basis"]) is str
