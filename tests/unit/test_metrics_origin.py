"""Where a divergence starts: every stage on hand-made inputs, with the expected position
worked out by hand in each case."""

from __future__ import annotations

from pytest_infercheck.metrics.origin import (
    Origin,
    PromptSide,
    TextSideTokens,
    locate_origin,
    prompt_ids_difference,
    special_tokens_difference,
    template_difference,
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


def test_template_differs_at_character_n() -> None:
    # "<s>User: ab" vs "<s>ab": equal for "<s>" (3 characters), differ at 3
    detail = template_difference("<s>ab", "<s>User: ab")
    assert detail is not None and "from character 3" in detail
    assert "render the template differently" in detail
    result = origin(test_prompt=PromptSide("<s>User: ab", [BOS, 10, 5, 6]))
    assert result.stage == "template" and "from character 3" in result.detail


def test_equal_or_nfc_equal_texts_are_no_template_difference() -> None:
    assert template_difference("<s>ab", "<s>ab") is None
    # "e" + U+0301 (combining acute) is "é" after NFC: a tokenizer property, not a template
    assert template_difference("caf\u00e9", "cafe\u0301") is None
    # and then the ids decide: [.., 233] vs [.., 104, 769] differ at position 3
    result = origin(
        base_prompt=PromptSide("caf\u00e9", [1, 2, 3, 233]),
        test_prompt=PromptSide("cafe\u0301", [1, 2, 3, 104, 769]),
    )
    assert result.stage == "prompt-ids"
    assert "position 3" in result.detail and "differ only by NFC" in result.detail


def test_one_extra_bos_is_special_tokens() -> None:
    detail = special_tokens_difference([BOS, 5, 6], [BOS, BOS, 5, 6], PIECES)
    assert detail is not None
    # the baseline's [1, 5, 6] fits the test's ids at position 0 first: the extra <s> is
    # then at the end? No: [1, 1, 5, 6][0:3] = [1, 1, 5] != [1, 5, 6]; at 1 it fits, so
    # the head [1] was added at the start.
    assert "[1 '<s>'] added at the start" in detail
    assert "2 leading [1 '<s>'] on the test side, 1 on the baseline's" in detail
    result = origin(test_prompt=PromptSide("<s>ab", [BOS, BOS, 5, 6]))
    assert result.stage == "special-tokens"


def test_a_missing_bos_and_an_added_eos_are_special_tokens() -> None:
    missing = special_tokens_difference([BOS, 5, 6], [5, 6], PIECES)
    assert missing == "the baseline prompt has the test's ids with [1 '<s>'] added at the start"
    eos = special_tokens_difference([5, 6], [5, 6, 2], PIECES)
    assert eos == "the test prompt has the baseline's ids with [2 '</s>'] added at the end"


def test_a_difference_inside_is_not_special_tokens() -> None:
    assert special_tokens_difference([BOS, 5, 6], [BOS, 5, 7], PIECES) is None  # same length
    assert special_tokens_difference([BOS, 5, 6], [BOS, 7, 5, 8], PIECES) is None
    assert special_tokens_difference([BOS, 5], [BOS, 5], PIECES) is None


def test_prompt_ids_differ_at_position_k() -> None:
    # [1, 5, 6, 8] vs [1, 5, 7, 8]: first difference at k = 2
    detail = prompt_ids_difference([BOS, 5, 6, 8], [BOS, 5, 7, 8], PIECES)
    assert detail == (
        "prompt ids differ at position 2: baseline 6 'b' vs test 7 'c' (4 vs 4 prompt tokens)"
    )
    result = origin(
        base_prompt=PromptSide("<s>abd", [BOS, 5, 6, 8]),
        test_prompt=PromptSide("<s>abd", [BOS, 5, 7, 8]),
    )
    assert result.stage == "prompt-ids" and result.detail == detail


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
