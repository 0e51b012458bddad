"""Where a divergence starts: every stage on hand-made inputs, with the expected position
worked out by hand in each case."""

from __future__ import annotations

from pytest_infercheck.metrics.origin import (
    Origin,
    PromptSide,
    TextSideTokens,
    locate_origin,
    nfc_probe_texts,
    text_side_tokens,
)

BOS = 1
PIECES = {1: "<s>", 5: "a", 6: "b", 7: "c", 8: "d", 9: " x", 2: "</s>"}


def origin(**overrides: object) -> Origin:
    """locate_origin with both sides given the same prompt and the same output unless
    overridden."""
    args: dict[str, object] = {
        "shared_prompt": False,
        "base_prompt": PromptSide("<s>ab", [BOS, 5, 6]),
        "test_prompt": PromptSide("<s>ab", [BOS, 5, 6]),
        "outputs_same": False,
        "base_text": "cd",
        "test_text": "cd",
        "base_ids": [7, 8, 2],
        "test_ids": [7, 8, 2],
        "pieces": PIECES,
    }
    args.update(overrides)
    return locate_origin(**args)  # type: ignore[arg-type]


# Stages 1-3 are compare_tokenizations's verdict (tests/unit/test_metrics_tokenization.py):
# here, that each cause lands on its stage with its explanation as the detail.


def test_template_differs_at_character_n() -> None:
    # "<s>User: ab" vs "<s>ab": equal for "<s>" (3 characters), differ at 3
    result = origin(test_prompt=PromptSide("<s>User: ab", [BOS, 10, 5, 6]))
    assert result.stage == "template"
    assert result.detail == (
        "the two engines render the template differently (rendered texts differ from "
        "character 3): baseline '<s>ab' vs test '<s>User: ab'; ids differ from position 1: "
        "baseline id 5 'a', test id 10 ?"
    )


def test_template_of_a_side_without_ids_loses_the_other_sides_bos_spelling() -> None:
    # A server that renders its own template: no ids, its text "<s>User: ab". The baseline's
    # <s> is special: "<s>" is removed from both texts, "ab" vs "User: ab" differ at 0,
    # character 0 + 3 of the baseline's text; the ids stages are unobserved, but after it.
    result = origin(
        base_prompt=PromptSide("<s>ab", [BOS, 5, 6], special=frozenset({BOS})),
        test_prompt=PromptSide("<s>User: ab", None),
    )
    assert (result.stage, result.unobserved) == ("template", ())
    assert result.detail == (
        "the two engines render the template differently (rendered texts differ from "
        "character 3): baseline '<s>ab' vs test '<s>User: ab'"
    )


def test_nfc_equal_texts_are_no_template_difference() -> None:
    # "e" + U+0301 (combining acute) is "é" after NFC: a tokenizer property, not a template;
    # the ids decide: [.., 233] vs [.., 104, 769] differ at position 3
    base = PromptSide("caf\u00e9", [1, 2, 3, 233])
    test = PromptSide("cafe\u0301", [1, 2, 3, 104, 769])
    result = origin(base_prompt=base, test_prompt=test)
    assert result.stage == "prompt-ids"
    assert result.detail == (
        "ids differ from position 3: baseline id 233 ?, test id 104 ?; the rendered texts "
        "differ only by NFC"
    )
    # the NFC probe: both texts normalised; the test side's ids of "café" are the baseline's
    assert nfc_probe_texts(base, test) == ("caf\u00e9", "caf\u00e9")
    probed = origin(
        base_prompt=base, test_prompt=PromptSide(test.rendered, test.ids, nfc_ids=[1, 2, 3, 233])
    )
    assert probed.stage == "prompt-ids"
    assert "baseline normalizes it to NFC, test does not" in probed.detail
    assert nfc_probe_texts(base, PromptSide("caf\u00e9", [1, 2, 3, 104, 769])) is None


def test_one_extra_bos_is_special_tokens() -> None:
    # [1, 1, 5, 6][0:3] = [1, 1, 5] != [1, 5, 6]; at 1 it fits: the head [1] was added at
    # the start; 2 leading <s> against 1
    result = origin(test_prompt=PromptSide("<s>ab", [BOS, BOS, 5, 6]))
    assert result.stage == "special-tokens"
    assert result.detail == (
        "BOS / leading special tokens differ: test has the ids of baseline with [1 '<s>'] "
        "added at the start (2 leading 1 '<s>' on test's side, 1 on baseline's: a BOS or "
        "special token added twice); ids differ from position 1: baseline id 5 'a', test id "
        "1 '<s>'"
    )
    # where the engines name their special tokens, the leading ones are compared
    special = frozenset({BOS})
    named = origin(
        base_prompt=PromptSide("<s>ab", [BOS, 5, 6], special),
        test_prompt=PromptSide("<s>ab", [BOS, BOS, 5, 6], special),
    )
    assert named.stage == "special-tokens"
    assert "test with 2 special tokens (1 '<s>', 1 '<s>') (the rest identical)" in named.detail


def test_a_bos_spelled_in_one_text_only_is_not_a_template_difference() -> None:
    # mlx-lm's render shows its BOS as "<s>", llama-server's text has none and its tokenizer
    # adds a second <s>: the texts without their leading special tokens' spellings are both
    # "ab", so the doubled BOS is the start, not the template
    special = frozenset({BOS})
    result = origin(
        base_prompt=PromptSide("<s>ab", [BOS, 5, 6], special),
        test_prompt=PromptSide("ab", [BOS, BOS, 5, 6], special),
    )
    assert result.stage == "special-tokens"
    assert result.detail.startswith(
        "BOS / leading special tokens differ: baseline starts with 1 special token (1 '<s>'), "
        "test with 2 special tokens (1 '<s>', 1 '<s>') (the rest identical)"
    )


def test_a_missing_bos_and_an_added_eos_are_special_tokens() -> None:
    missing = origin(test_prompt=PromptSide("<s>ab", [5, 6]))
    assert missing.stage == "special-tokens"
    assert missing.detail.startswith(
        "BOS / leading special tokens differ: baseline has the ids of test with [1 '<s>'] "
        "added at the start; ids differ from position 0"
    )
    eos = origin(test_prompt=PromptSide("<s>ab", [BOS, 5, 6, 2]))
    assert eos.stage == "special-tokens"
    assert eos.detail == (
        "special tokens differ: test has the ids of baseline with [2 '</s>'] added at the end; "
        "ids differ from position 3: baseline nothing (end of prompt), test id 2 '</s>'"
    )


def test_a_difference_inside_is_prompt_ids() -> None:
    for test_ids in ([BOS, 5, 7], [BOS, 7, 5, 8]):
        result = origin(test_prompt=PromptSide("<s>ab", test_ids))
        assert result.stage == "prompt-ids", test_ids
    # ordinary tokens added at the end of a prompt whose texts are not known: not a special
    # token, a longer prompt
    longer = origin(base_prompt=PromptSide(None, [5, 6]), test_prompt=PromptSide(None, [5, 6, 7]))
    assert (longer.stage, longer.unobserved) == ("prompt-ids", ("template",))


def test_prompt_ids_differ_at_position_k() -> None:
    # [1, 5, 6, 8] vs [1, 5, 7, 8]: first difference at k = 2
    result = origin(
        base_prompt=PromptSide("<s>abd", [BOS, 5, 6, 8]),
        test_prompt=PromptSide("<s>abd", [BOS, 5, 7, 8]),
    )
    assert result.stage == "prompt-ids"
    assert result.detail == "ids differ from position 2: baseline id 6 'b', test id 7 'c'"


def test_same_prompt_ids_generated_tokens_differ_at_step_t() -> None:
    # generated [7, 8, 2] vs [7, 5, 2]: step 1
    result = origin(test_ids=[7, 5, 2], test_text="ca")
    assert result.stage == "generated-tokens"
    assert result.detail == "generated tokens differ from step 1: baseline 8 'd' vs test 5 'a'"
    # one stops where the other goes on: step 2, the EOS against "(stopped)"... the test
    # side's third token 6 against the baseline's EOS 2
    longer = origin(test_ids=[7, 8, 6], test_text="cdb")
    assert "from step 2: baseline 2 '</s>' vs test 6 'b'" in longer.detail


def test_shared_prompt_skips_the_prompt_stages() -> None:
    result = origin(
        shared_prompt=True,
        test_prompt=PromptSide("<s>User: ab", [BOS, 10, 5, 6]),
        test_ids=[7, 5, 2],
        test_text="ca",
    )
    assert result.stage == "generated-tokens"


def test_same_tokens_different_text_is_detokenization() -> None:
    result = origin(base_text=" cd", test_text="cd")
    assert result.stage == "detokenization"
    assert result.detail == (
        "the generated token ids agree; texts differ from character 0 (detokenization)"
    )


def test_same_outputs_have_no_origin_even_when_the_prompts_differ() -> None:
    same = origin(outputs_same=True)
    assert same.stage is None and same.detail == "the outputs are the same"
    differ = origin(outputs_same=True, test_prompt=PromptSide("<s>ab", [BOS, BOS, 5, 6]))
    assert differ.stage is None
    assert "but the prompts differ (special-tokens:" in differ.detail


def test_unobserved_stages_are_named() -> None:
    # a server that renders its own template and returns no prompt ids: nothing to compare
    # before the generated tokens
    result = origin(test_prompt=PromptSide(None, None), base_text=" cd", test_text="cd")
    assert result.stage == "detokenization"
    assert result.unobserved == ("template", "special-tokens", "prompt-ids")
    assert result.detail.endswith("(template, special-tokens, prompt-ids not observable)")


def test_text_only_side_without_a_tokenizer_is_undetermined() -> None:
    result = origin(test_ids=None, base_text=" cd", test_text="cd")
    assert result.stage == "undetermined"
    assert "texts differ from character 0" in result.detail


# --- a side that returns only text: rules a-d --------------------------------------------
# baseline ids [9, 7, 8] = " x", "c", "d": decoded " xcd"; prefixes " x", " xc", " xcd"
IDS = [9, 7, 8]
PREFIXES = [" x", " xc", " xcd"]


def judge(text: str, retokenized: list[int] | None = None, decoded: str = " xcd") -> TextSideTokens:
    return text_side_tokens(IDS, decoded, decoded, PREFIXES, text, retokenized, " xcd")


def test_text_side_equal_text_and_exact_retokenization_agree() -> None:
    assert judge(" xcd").tokens_agree is True
    # the baseline's own text differs from the decode, but the text re-tokenizes to its ids
    by_retokenization = text_side_tokens(IDS, " xcd", " xcd", PREFIXES, "X", [9, 7, 8], " xcd!")
    assert by_retokenization.tokens_agree is True
    assert by_retokenization.how == "the text re-tokenizes to the baseline's tokens"


def test_text_side_missing_leading_space_agrees_by_detokenization() -> None:
    # "xcd" re-tokenizes to [x, c, d] (not " x"): re-tokenization alone would say differ
    verdict = judge("xcd", retokenized=[120, 7, 8])
    assert verdict.tokens_agree is True
    assert verdict.how == (
        "the text is the baseline's tokens decoded, the first token's leading space dropped"
    )
    result = origin(
        test_ids=None, base_text=" xcd", test_text="xcd", text_side=verdict, base_ids=None
    )
    assert result.stage == "detokenization"
    assert result.detail.startswith("the tokens agree (the text is the baseline's tokens")


def test_text_side_special_tokens_skipped_agrees() -> None:
    # baseline ids decode to " x<s>cd" with the special token, " xcd" without it
    verdict = text_side_tokens(
        [9, 1, 7, 8], " x<s>cd", " xcd", [" x", " x<s>", " x<s>c", " x<s>cd"], " xcd", None, ""
    )
    assert verdict.tokens_agree is True
    assert verdict.how == "the text is the baseline's tokens decoded without special tokens"


def test_text_side_differs_from_step_t() -> None:
    # " xcZ": " x" (step 0) and " xc" (step 1) are prefixes, " xcd" is not: step 2
    verdict = judge(" xcZ", retokenized=[9, 7, 99])
    assert (verdict.tokens_agree, verdict.step) == (False, 2)
    # without its leading space: "xcZ" agrees with " x", " xc" once the space is dropped
    dropped = judge("xcZ")
    assert (dropped.tokens_agree, dropped.step) == (False, 2)
    # nothing in common: step 0
    assert judge("Q").step == 0
    result = origin(
        test_ids=None, base_ids=None, base_text=" xcd", test_text=" xcZ", text_side=verdict
    )
    assert result.stage == "generated-tokens" and "from step 2" in result.detail
