"""The tokenization verdict on hand-made id lists: the first differing position, and the
cause in its order (empty, template, BOS, control tokens, special tokens, NFC, ids, counts).

Ids used throughout: 1 is a BOS ``<s>`` and 2 ``</s>`` (special); 52 '1', 53 '2', 46 '+'."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_infercheck.metrics.text import first_divergence
from pytest_infercheck.metrics.tokenization import (
    Cause,
    Status,
    TokenSide,
    body_text,
    body_texts,
    compare_tokenizations,
    leading_specials,
    needs_nfc_probe,
    spelled_as_control,
)

NAMES = ("local", "llama")


def side(text: str | None, ids: list[int], pieces: dict[int, str] | None = None) -> TokenSide:
    return TokenSide(text, ids, pieces=pieces or {}, special=frozenset({1, 2}))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([1, 2, 3], [1, 2, 4], 2),
        ([1, 2], [1, 2, 3], 2),  # a prefix: the shorter length
        ([], [5], 0),
        ([7, 2], [1, 2], 0),
    ],
)
def test_first_difference_of_ids(a: list[int], b: list[int], expected: int | None) -> None:
    # the one first-differing-position helper, for ids and (below) for text
    assert first_divergence(a, b) == expected


def test_first_difference_of_text() -> None:
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abc", "abX") == 2
    assert first_divergence("ab", "abc") == 2


def test_identical_ids() -> None:
    a = side("<s>12", [1, 52, 53])
    verdict = compare_tokenizations(a, side("<s>12", [1, 52, 53]), NAMES)
    assert (verdict.status, verdict.cause, verdict.first_difference) == (
        Status.IDENTICAL,
        None,
        None,
    )


def test_a_bos_on_one_side_only_is_named_bos_at_position_0() -> None:
    # local spells and adds the BOS; llama adds none: the texts without it are equal.
    local = side("<s>12", [1, 52, 53], {0: "<s>", 1: "1"})
    llama = side("12", [52, 53], {0: "1", 1: "2"})
    verdict = compare_tokenizations(local, llama, NAMES)
    assert verdict.status is Status.DIFFERS and verdict.cause is Cause.BOS
    assert verdict.first_difference == 0
    assert verdict.explanation == (
        "BOS / leading special tokens differ: local starts with 1 special token (1 '<s>'), "
        "llama with no special token (the rest identical); ids differ from position 0: "
        "local id 1 '<s>', llama id 52 '1'"
    )


def test_a_doubled_bos_differs_at_position_1() -> None:
    # A template that spells the BOS, and an engine that adds another one.
    once = side("<s>1", [1, 52], {0: "<s>", 1: "1"})
    twice = side("<s>1", [1, 1, 52], {0: "<s>", 1: "<s>", 2: "1"})
    verdict = compare_tokenizations(once, twice, NAMES)
    assert (verdict.cause, verdict.first_difference) == (Cause.BOS, 1)
    assert "llama with 2 special tokens (1 '<s>', 1 '<s>')" in verdict.explanation


def test_a_bos_added_without_being_spelled_is_not_a_template_difference() -> None:
    # The text does not start with the BOS's text: nothing is removed from it.
    assert body_text(side("12", [1, 52, 53], {0: "<s>"})) == "12"
    assert body_text(side("<s>12", [1, 52, 53], {0: "<s>"})) == "12"
    assert leading_specials(side("<s>12", [1, 1, 52])) == 2
    assert leading_specials(side("12", [52, 1])) == 0


def test_a_rendered_text_that_differs_is_the_template_first() -> None:
    # The BOS differs too, but the text comes first; character 5 (after the spelled BOS).
    a = side("<s>12+", [1, 52, 53, 46], {0: "<s>", 1: "1"})
    b = side("1 2+", [52, 35, 53, 46], {0: "1", 1: " "})
    verdict = compare_tokenizations(a, b, NAMES)
    assert verdict.cause is Cause.TEMPLATE
    assert verdict.text_difference == 4  # "<s>1" then "2" vs " ": 3 + 1
    assert verdict.first_difference == 0
    assert verdict.explanation == (
        "the two engines render the template differently (rendered texts differ from "
        "character 4): local '<s>12+' vs llama '1 2+'; ids differ from position 0: local id "
        "1 '<s>', llama id 52 '1'"
    )


def test_a_control_token_spelled_in_text() -> None:
    # llama.cpp parses "</s>" as its control token; the other side as 4 plain tokens.
    plain = side("x</s>", [90, 60, 61, 62, 63], {1: "<", 2: "/", 3: "s", 4: ">"})
    control = side("x</s>", [90, 2], {1: "</s>"})
    assert spelled_as_control(control, plain, 1) == (0, 1, 4)
    assert spelled_as_control(plain, control, 1) is None
    verdict = compare_tokenizations(plain, control, NAMES)
    assert (verdict.cause, verdict.first_difference) == (Cause.CONTROL, 1)
    assert verdict.explanation.startswith(
        "control token (a tokenizer property): llama parses '</s>' as one special token "
        "(id 2), local as 4 ordinary tokens"
    )


def test_a_control_token_with_other_boundaries_around_it() -> None:
    # Measured on the realistic Qwen3 (te052): llama.cpp promotes "</s>" (id 128247) to
    # CONTROL and splits " </s>." as ' ' '</s>' '.'; the HF tokenizer as ' </' 's' '>.'.
    hf = side("x </s>. y", [90, 690, 82, 14276, 7], {1: " </", 2: "s", 3: ">.", 4: " y"})
    llama = side("x </s>. y", [90, 220, 128247, 13, 7], {1: " ", 2: "</s>", 3: ".", 4: " y"})
    llama = replace(llama, special=frozenset({128247}))
    assert spelled_as_control(llama, hf, 1) == (1, 3, 3)
    assert spelled_as_control(hf, llama, 1) is None
    verdict = compare_tokenizations(hf, llama, NAMES)
    assert (verdict.cause, verdict.first_difference) == (Cause.CONTROL, 1)
    assert verdict.explanation.startswith(
        "control token (a tokenizer property): llama parses '</s>' as one special token "
        "(id 128247) within ' </s>.' (3 tokens), local as 3 ordinary tokens"
    )
    # The same spans with an ordinary token in place of the special one: not a control token.
    plain_llama = replace(llama, special=frozenset())
    assert spelled_as_control(plain_llama, hf, 1) is None


def test_a_special_token_against_other_text_is_a_special_token_difference() -> None:
    a = side("x</s>", [90, 2], {1: "</s>"})
    b = side("x</s>", [90, 60, 61], {1: "<", 2: "/"})  # spells only "</", not "</s>"
    verdict = compare_tokenizations(a, b, NAMES)
    assert (verdict.cause, verdict.first_difference) == (Cause.SPECIAL, 1)
    assert verdict.explanation.startswith("special tokens differ: local has a special token")


DECOMPOSED = "cafe\u0301"  # e + combining acute: not NFC


def test_nfc_normalization_is_named_when_the_probe_shows_it() -> None:
    # local normalizes (é is one token, 100); llama does not (e, then the accent's 2 bytes),
    # and given the NFC text llama gives local's ids.
    local = side(DECOMPOSED, [99, 100])
    llama = TokenSide(DECOMPOSED, [99, 101, 102], nfc_ids=[99, 100])
    assert needs_nfc_probe(local, llama)
    verdict = compare_tokenizations(local, llama, NAMES)
    assert (verdict.cause, verdict.first_difference) == (Cause.NORMALIZATION, 1)
    assert "local normalizes it to NFC, llama does not" in verdict.explanation


def test_nfc_is_not_claimed_without_evidence() -> None:
    local = side(DECOMPOSED, [99, 100])
    no_probe = compare_tokenizations(local, TokenSide(DECOMPOSED, [99, 101, 102]), NAMES)
    assert no_probe.cause is Cause.IDS
    other_ids = TokenSide(DECOMPOSED, [99, 101, 102], nfc_ids=[99, 103])
    assert compare_tokenizations(local, other_ids, NAMES).cause is Cause.IDS
    # An NFC text needs no probe, and is never a normalization difference.
    assert not needs_nfc_probe(side("café", [99, 100]), side("café", [99, 101]))


def test_a_changed_id_names_both_ids_and_texts() -> None:
    a = side("12+", [52, 53, 46], {1: "2"})
    b = side("12+", [52, 54, 46], {1: "3"})
    verdict = compare_tokenizations(a, b, NAMES)
    assert (verdict.cause, verdict.first_difference) == (Cause.IDS, 1)
    assert verdict.explanation == "ids differ from position 1: local id 53 '2', llama id 54 '3'"


def test_a_shorter_side_says_nothing_at_the_end() -> None:
    verdict = compare_tokenizations(side("12", [52, 53]), side("12", [52]), NAMES)
    assert verdict.first_difference == 1
    assert verdict.explanation.endswith("llama nothing (end of prompt)")


def test_an_empty_tokenization_is_always_a_difference() -> None:
    verdict = compare_tokenizations(side("12", [52, 53]), side("12", []), NAMES)
    assert (verdict.status, verdict.cause) == (Status.DIFFERS, Cause.EMPTY)
    assert verdict.explanation == "empty tokenization: llama has no tokens"
    zero = TokenSide(None, None, count=0)
    assert compare_tokenizations(side("12", [52, 53]), zero, NAMES).cause is Cause.EMPTY


def test_equal_counts_are_count_only_and_different_counts_fail() -> None:
    ids = side("<s>12", [1, 52, 53], {0: "<s>"})
    same = compare_tokenizations(ids, TokenSide(None, None, count=3), NAMES)
    assert (same.status, same.cause, same.first_difference) == (Status.COUNT_ONLY, None, None)
    assert same.explanation.startswith("count only: the same prompt token count")
    fewer = compare_tokenizations(ids, TokenSide(None, None, count=2), NAMES)
    assert (fewer.status, fewer.cause) == (Status.DIFFERS, Cause.COUNT)
    assert fewer.explanation == (
        "prompt token counts differ by -1: local 3 tokens, llama 2 (count only: a side gives "
        "no ids); the difference is local's 1 special token (1 '<s>'): a BOS one side adds?"
    )
    more = compare_tokenizations(ids, TokenSide(None, None, count=5), NAMES)
    assert more.cause is Cause.COUNT and "differ by +2" in more.explanation
    assert "BOS" not in more.explanation
    unknown = compare_tokenizations(ids, TokenSide(None, None), NAMES)
    assert unknown.cause is Cause.COUNT and unknown.explanation.startswith("no prompt token")


def test_tokens_added_at_the_end_are_special_tokens_when_the_texts_agree() -> None:
    # An EOS appended by one side's tokenizer: [52, 53] is [52, 53, 2] without its last id;
    # the texts are equal, so the added id came from the tokenizer, not the text.
    verdict = compare_tokenizations(
        side("12", [52, 53]), side("12", [52, 53, 2], {2: "</s>"}), NAMES
    )
    assert (verdict.cause, verdict.first_difference) == (Cause.SPECIAL, 2)
    assert verdict.explanation == (
        "special tokens differ: llama has the ids of local with [2 '</s>'] added at the end; "
        "ids differ from position 2: local nothing (end of prompt), llama id 2 '</s>'"
    )
    # an ordinary id added to a prompt whose texts are unknown is no special token
    plain = compare_tokenizations(side(None, [52, 53]), side(None, [52, 53, 54]), NAMES)
    assert plain.cause is Cause.IDS
    # the same with the ids known to be special (an EOS, 2): a special token added at the end
    eos = compare_tokenizations(side(None, [52, 53]), side(None, [52, 53, 2]), NAMES)
    assert eos.cause is Cause.SPECIAL and "[2] added at the end" in eos.explanation


def test_a_side_without_ids_loses_the_other_sides_leading_spelling() -> None:
    # The reference spells its BOS "<s>"; a count-only side shows "<s>User: 12": "<s>" is
    # removed from both, "12" vs "User: 12" differ at 0, character 0 + 3 in the reference.
    counted = TokenSide("<s>User: 12", None, count=6)
    ref = side("<s>12", [1, 52, 53], {0: "<s>"})
    assert body_texts(ref, counted) == ("12", "User: 12")
    verdict = compare_tokenizations(ref, counted, NAMES)
    assert (verdict.status, verdict.cause) == (Status.DIFFERS, Cause.TEMPLATE)
    assert (verdict.first_difference, verdict.text_difference) == (None, 3)
    # equal bodies: counts decide
    same = compare_tokenizations(ref, TokenSide("<s>12", None, count=3), NAMES)
    assert same.status is Status.COUNT_ONLY


def test_ids_of_texts_equal_only_after_nfc_say_so() -> None:
    # no NFC probe asked: the cause is ids, and the explanation names the NFC difference
    verdict = compare_tokenizations(
        side("caf\u00e9", [99, 100]), side("cafe\u0301", [99, 101, 102]), NAMES
    )
    assert verdict.cause is Cause.IDS
    assert verdict.explanation.endswith("; the rendered texts differ only by NFC")
