"""vLLM's answers, parsed (pure): ``return_tokens_as_token_ids`` generations and
``prompt_logprobs`` rows, on hand-made answers in the shapes vLLM 0.32 returns."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.backends.base import BackendError, TopKRow
from pytest_infercheck.backends.vllm import id_generation, prompt_logprob_rows, token_id


def test_prompt_logprob_rows_read_the_continuations_positions_by_rank() -> None:
    """Entries 0..n_prompt-1 are the prompt's (the first null); entry n_prompt + i holds the
    top k by rank and the given token whatever its rank: a rank above k is the chosen
    logprob only, not part of the top k."""
    entries = [
        None,
        {"11": {"logprob": -4.0, "rank": 3}},
        {"5": {"logprob": -0.1, "rank": 1}, "9": {"logprob": -2.5, "rank": 2}},
        {
            "7": {"logprob": -3.0, "rank": 4},
            "8": {"logprob": -0.2, "rank": 1},
            "6": {"logprob": -1.9, "rank": 2},
        },
    ]
    rows = prompt_logprob_rows(entries, 2, [5, 7], k=2)
    assert rows == [
        TopKRow(-0.1, {5: -0.1, 9: -2.5}),
        TopKRow(-3.0, {8: -0.2, 6: -1.9}),
    ]


def test_prompt_logprob_rows_refuse_a_short_or_misaligned_answer() -> None:
    entries = [None, {"5": {"logprob": -0.1, "rank": 1}}]
    with pytest.raises(BackendError, match=r"2 prompt_logprobs entries for a prompt of 1 \+ 2"):
        prompt_logprob_rows(entries, 1, [5, 6], k=1)
    with pytest.raises(BackendError, match="position 0 lack the given token 6"):
        prompt_logprob_rows(entries, 1, [6], k=1)


def test_a_completion_with_token_ids_gives_the_servers_ids_and_id_keyed_top_k() -> None:
    answer = {
        "choices": [
            {
                "text": "ab",
                "finish_reason": "stop",
                "logprobs": {
                    "tokens": ["token_id:5", "token_id:151645"],
                    "token_logprobs": [-0.1, None],
                    "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -2.0}, None],
                },
            }
        ],
        "usage": {"completion_tokens": 2},
    }
    generation = id_generation(answer, chat=False)
    assert generation.token_ids == [5, 151645]  # the EOS id the server stopped on
    assert generation.text == "ab" and generation.finish_reason == "stop"
    assert generation.chosen_logprobs is not None
    assert generation.chosen_logprobs[0] == -0.1 and math.isnan(generation.chosen_logprobs[1])
    assert generation.top_logprobs == [{5: -0.1, 9: -2.0}, {}]
    assert generation.completion_tokens == 2


def test_a_token_that_is_not_an_id_names_the_request_option() -> None:
    assert token_id("token_id:42") == 42
    with pytest.raises(BackendError, match="return_tokens_as_token_ids"):
        token_id("hello", "srv")
