"""Margins never from an ambiguous text key (:mod:`pytest_infercheck.metrics.keys`,
:func:`~pytest_infercheck.metrics.ties.top_k_margin`): a top-k keyed by token text names a
token only when no other token of the row could carry that text. Byte-fallback tokens all
read ``\\ufffd``; a server's entries with one text collapse into one key. A margin read
through such a key was another token's number, marked exact; now it is unknown (None) or
an honest lower bound, and the label ``unknown``. The same for a step's token text read
from its top-k (:func:`~pytest_infercheck.metrics.keys.step_texts`). Values worked by hand.
"""

from __future__ import annotations

import copy
import math
import pickle

import pytest

from pytest_infercheck.metrics.keys import (
    TextTopK,
    ambiguous_key,
    ambiguous_text,
    collided,
    step_text,
    step_texts,
    text_top_k,
)
from pytest_infercheck.metrics.kl import DEFAULT_MASS_TOL as D
from pytest_infercheck.metrics.kl import topk_kl_lower_bound
from pytest_infercheck.metrics.ties import (
    Margin,
    SideTokens,
    divergence_label,
    pair_margins,
    tie_divergence,
    top_k_margin,
)

FFFD = "\ufffd"


# -- which keys are ambiguous ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "ambiguous"),
    [
        (" cat", False),
        ("4", False),
        ("é", False),
        (FFFD, True),  # a byte-fallback token, or a piece of a UTF-8 character
        (f"a{FFFD}", True),  # a piece glued to a complete character
        ("\udce2", True),  # a byte decoded with surrogateescape
        ("bytes:\\xe2\\x80", True),  # OpenAI's spelling of a byte piece
        ("byte: \\xe2", True),  # llama.cpp's
        ("", True),  # a special token decoded to nothing
    ],
)
def test_which_texts_are_ambiguous(text: str, ambiguous: bool) -> None:
    assert ambiguous_text(text) is ambiguous
    assert ambiguous_key(text) is ambiguous


def test_ids_are_never_ambiguous() -> None:
    assert not ambiguous_key(17)
    assert not ambiguous_key(0, {0: -0.1})


def test_a_text_two_entries_carried_is_remembered_under_the_larger_logprob() -> None:
    # A server's entries at one step: " cat" twice (e.g. "▁cat" decoded without its marker
    # and an added " cat"), a byte piece twice.
    top = text_top_k([(" cat", -3.0), ("dog", -0.5), (" cat", -0.4), (FFFD, -2.0), (FFFD, -1.5)])
    assert dict(top) == {" cat": -0.4, "dog": -0.5, FFFD: -1.5}
    assert top.collided == frozenset({" cat", FFFD})
    assert collided(top) == frozenset({" cat", FFFD})
    assert collided({" cat": -0.4}) == frozenset()  # a plain dict keeps no trace
    assert ambiguous_key(" cat", top) and not ambiguous_key("dog", top)
    # copies keep what they know
    for again in (copy.deepcopy(top), pickle.loads(pickle.dumps(top)), copy.copy(top)):
        assert isinstance(again, TextTopK) and again.collided == top.collided
        assert dict(again) == dict(top)


# -- margins ----------------------------------------------------------------------------------
def test_a_byte_fallback_key_gives_no_exact_margin() -> None:
    # The row at the divergence: own token "a" (-0.6931), and two byte tokens that both read
    # U+FFFD: 0xC3 at -0.6936 and 0xE2 at -5.0. The other side chose 0xE2. A dict built
    # from the entries keeps whichever came last under U+FFFD: here 0xC3's -0.6936.
    plain = {"a": -0.6931, FFFD: -0.6936}
    # main read 0xC3's number as 0xE2's: -0.6931 - (-0.6936) = 0.0005, exact: a near-tie
    # where the true margin is -0.6931 + 5.0 = 4.3069 (decisive).
    margin = top_k_margin(plain, "a", FFFD, own_logprob=-0.6931)
    assert margin is not None and not margin.exact
    # Honest: log p(other) <= max(top) = -0.6931, so m >= -0.6931 + 0.6931 = 0.
    assert margin.value == pytest.approx(0.0, abs=1e-12)
    assert margin.value <= 4.3069
    # The map that remembers collisions holds the larger of the two under U+FFFD (-0.6936):
    # m >= -0.6931 + 0.6936 = 0.0005, a bound, not exact.
    known = text_top_k([("a", -0.6931), (FFFD, -5.0), (FFFD, -0.6936)])
    assert top_k_margin(known, "a", FFFD, own_logprob=-0.6931) == Margin(
        pytest.approx(0.0005),
        exact=False,  # type: ignore[arg-type]
    )
    # Either way the label is unknown, not near-tie, with the other side's exact 0.0003.
    for m in (margin, top_k_margin(known, "a", FFFD, own_logprob=-0.6931)):
        assert divergence_label(True, [m, Margin(0.0003)]) == "unknown"


def test_two_complete_tokens_with_one_text_give_no_exact_margin() -> None:
    # Entries " cat" at -0.40 and -3.0 (two tokens); the other side chose the -3.0 one; own
    # token "dog" at -0.395. A last-wins dict of entries sent as (-3.0, -0.40) holds -0.40:
    # main's margin -0.395 + 0.40 = 0.005, exact: a near-tie; the true one is 2.605.
    known = text_top_k([("dog", -0.395), (" cat", -3.0), (" cat", -0.40)])
    margin = top_k_margin(known, "dog", " cat", own_logprob=-0.395)
    assert margin == Margin(pytest.approx(0.005), exact=False)  # type: ignore[arg-type]
    assert divergence_label(True, [margin, Margin(0.002)]) == "unknown"
    # A key one entry carried still gives an exact margin: -0.395 + 0.41.
    clean = text_top_k([("dog", -0.395), ("cow", -0.41)])
    assert top_k_margin(clean, "dog", "cow", own_logprob=-0.395) == Margin(pytest.approx(0.015))  # type: ignore[arg-type]


def test_an_ambiguous_key_outside_the_top_k_still_bounds() -> None:
    # No entry reads U+FFFD: the other token is outside the top-k, at most min = -2.5:
    # m >= -0.1 + 2.5 = 2.4 (decisive at any tie margin below it).
    margin = top_k_margin({"a": -0.1, "b": -2.5}, "a", FFFD, own_logprob=-0.1)
    assert margin == Margin(pytest.approx(2.4), exact=False)  # type: ignore[arg-type]
    assert divergence_label(True, [margin, None]) == "decisive"


def test_own_text_ambiguous_or_equal_to_the_other() -> None:
    top = {FFFD: -0.2, "x": -2.0}
    # own's logprob read through U+FFFD may be another byte token's: unknown
    assert top_k_margin(top, FFFD, "x") is None
    # given (its own entry's number), the margin against a clean key is exact: -0.2 + 2.0
    assert top_k_margin(top, FFFD, "x", own_logprob=-0.2) == Margin(pytest.approx(1.8))  # type: ignore[arg-type]
    # two tokens, one text (ids differ, texts equal): main gave 0.0 exact, a near-tie
    assert top_k_margin(top, FFFD, FFFD, own_logprob=-0.2) is None
    assert top_k_margin({" a": -0.2}, " a", " a", own_logprob=-0.2) is None
    # the other's logprob given: no key read for it
    assert top_k_margin(top, FFFD, FFFD, own_logprob=-0.2, other_logprob=-0.5) == Margin(
        pytest.approx(0.3)  # type: ignore[arg-type]
    )
    # ids are never ambiguous
    assert top_k_margin({1: -0.2, 2: -0.5}, 1, 2) == Margin(pytest.approx(0.3))  # type: ignore[arg-type]


def test_a_divergence_at_a_byte_token_is_labelled_unknown_not_near_tie() -> None:
    # Two runs of a text-keyed server (no ids) agree on "x", then one emits "a" and the
    # other a byte token (U+FFFD). Each side's row at token 1:
    #   a: "a" -0.6931 (chosen), U+FFFD -0.6936 (some byte token: which one, the key hides)
    #   b: U+FFFD -0.6930 (chosen: its own entry's number), "a" -0.6935
    a = SideTokens(
        texts=["x", "a"],
        chosen=[-0.01, -0.6931],
        top=[{"x": -0.01}, {"a": -0.6931, FFFD: -0.6936}],
        top_keys="text",
    )
    b = SideTokens(
        texts=["x", FFFD],
        chosen=[-0.01, -0.6930],
        top=[{"x": -0.01}, {FFFD: -0.6930, "a": -0.6935}],
        top_keys="text",
    )
    margin_a, margin_b = pair_margins(a, b, 1)
    # a reads b's token through U+FFFD: a bound, -0.6931 - max(-0.6931, -0.6936) = 0
    assert margin_a == Margin(pytest.approx(0.0), exact=False)  # type: ignore[arg-type]
    # b's own number is its entry's; "a" is a clean key: -0.6930 + 0.6935 = 0.0005, exact
    assert margin_b == Margin(pytest.approx(0.0005))  # type: ignore[arg-type]
    tie = tie_divergence(a, b, 1)
    # main: margins 0.0005 / 0.0005, both exact: near-tie (waived under fail_on: decisive)
    assert tie.divergence_label == "unknown"
    assert tie.margins_exact is False
    assert tie.margins == [pytest.approx(0.0), pytest.approx(0.0005)]


def test_texts_equal_ids_differing_give_no_margin_from_a_text_keyed_top_k() -> None:
    # A side with ids but a text-keyed top-k (ids of the generated tokens, texts of the
    # top-k): ids 200 and 201 both read U+FFFD.
    a = SideTokens(ids=[200], texts=[FFFD], chosen=[-0.3], top=[{FFFD: -0.3}], top_keys="text")
    b = SideTokens(ids=[201], texts=[FFFD], chosen=[-0.31], top=[{FFFD: -0.31}], top_keys="text")
    assert pair_margins(a, b, 0) == (None, None)  # main: (0.0, 0.0) exact: a near-tie
    assert tie_divergence(a, b, 0).divergence_label == "unknown"


# -- a step's token text from its top-k ------------------------------------------------------
def test_step_text_is_the_one_key_with_the_chosen_logprob() -> None:
    assert step_text({"4": -0.1, "5": -2.0}, -0.1) == "4"
    assert step_text({"4": -0.1, "5": -0.1}, -0.1) is None  # two keys hold it
    assert step_text({"4": -0.1}, -0.2) is None  # none does
    assert step_text({FFFD: -0.1, "5": -2.0}, -0.1) is None  # the key could be another's
    assert step_text(text_top_k([(" a", -0.1), (" a", -1.0)]), -0.1) is None  # collided
    assert step_text(None, -0.1) is None
    assert step_text({"4": -0.1}, None) is None
    assert step_text({4: -0.1}, -0.1) is None  # an id-keyed map has no texts


def test_step_texts_locate_every_step_or_none() -> None:
    top = [{"4": -0.1, "5": -2.0}, {"6": -0.2, "7": -3.0}]
    assert step_texts(top, [-0.1, -0.2], "46") == ["4", "6"]
    assert step_texts(top, [-0.1, -0.2], "47") is None  # they do not join into the text
    assert step_texts(top, [-0.1], "46") is None  # one chosen logprob per step
    assert step_texts(None, [-0.1], "4") is None
    # A byte piece: the steps read "4" and U+FFFD and join into the server's text "4\ufffd";
    # main located them, and a U+FFFD on the other side compared equal whichever byte it was.
    pieces = [{"4": -0.1, "5": -2.0}, {FFFD: -0.2, "x": -3.0}]
    assert step_texts(pieces, [-0.1, -0.2], f"4{FFFD}") is None


# -- the text-keyed top-k KL ------------------------------------------------------------------
def test_an_ambiguous_text_key_is_not_a_shared_token_of_the_kl_bound() -> None:
    # Both sides report U+FFFD at 0.4; the keys do not say whether it is the same byte token
    # (the base's 0xC3, the test's 0xE2, say), so it is no shared bucket: its mass stays in
    # each side's tail. Base {"a": .5, U+FFFD: .4}, test {"a": .2, U+FFFD: .4}: S = {"a"};
    # base tail in [(.5 - D), (.5 + D)] (1 -+ D - .5), test tail at most (1 + D) - .2 = (.8 + D);
    # (.8 + D) / e = .294 < (.5 - D): x = (.5 - D).
    #   KL >= .5 ln(.5/.2) + (.5 - D) ln((.5 - D)/(.8 + D)) = 0.458145 - 0.236154 = 0.221991
    # (main shared it: .5 ln 2.5 + .4 ln 1 + .1 ln(.1/.4) = 0.319516, a term comparing two
    # tokens' numbers as one's).
    base = {"a": math.log(0.5), FFFD: math.log(0.4)}
    test = {"a": math.log(0.2), FFFD: math.log(0.4)}
    expected = 0.5 * math.log(0.5 / 0.2) + (0.5 - D) * math.log((0.5 - D) / (0.8 + D))
    assert topk_kl_lower_bound(base, test) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.221991, abs=1e-6)
    # " b" carried by two entries on the test side: out of S too, so the bound is the one
    # with " b" renamed on the base side (S = {"a"} either way).
    collided_top = text_top_k([("a", math.log(0.2)), (" b", math.log(0.3)), (" b", -5.0)])
    clean = {"a": math.log(0.5), " b": math.log(0.3)}
    renamed = {"a": math.log(0.5), "c": math.log(0.3)}
    assert topk_kl_lower_bound(clean, collided_top) == pytest.approx(
        topk_kl_lower_bound(renamed, collided_top), rel=1e-12
    )
    assert topk_kl_lower_bound(clean, dict(collided_top)) != pytest.approx(
        topk_kl_lower_bound(renamed, collided_top), rel=1e-6
    )
