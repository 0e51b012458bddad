"""What a server's logprobs must be (:func:`~pytest_infercheck.metrics.consistency.
shape_faults`, through :func:`generation_faults`): one per token, top-k most likely first,
none above 0. Hand-made answers; the mlx_lm.server one is its real answer for "<s>12+34="
(mlx-lm 0.32.2, the tiny adder in bf16, ``logprobs: true, top_logprobs: 5``)."""

from __future__ import annotations

import copy
import math

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.backends.openai_compat import parse_choice
from pytest_infercheck.metrics.consistency import (
    ABOVE_ZERO_TOL,
    generation_faults,
    shape_faults,
    unsorted_positions,
)

# mlx_lm.server generated "46" then </s> (ids 55, 57, 2, each logprob 0.0); it reports as the
# chosen entries the first of its unsorted top-5: "5", "7", "3".
MLX_SERVER_ANSWER = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "text": "46",
            "logprobs": {
                "content": [
                    {
                        "id": 56,
                        "token": "5",
                        "logprob": -9.9375,
                        "top_logprobs": [
                            {"id": 56, "token": "5", "logprob": -9.9375},
                            {"id": 54, "token": "3", "logprob": -9.125},
                            {"id": 55, "token": "4", "logprob": 0.0},
                            {"id": 2, "token": "</s>", "logprob": -21.0},
                            {"id": 39, "token": "$", "logprob": -22.25},
                        ],
                    },
                    {
                        "id": 58,
                        "token": "7",
                        "logprob": -10.75,
                        "top_logprobs": [
                            {"id": 58, "token": "7", "logprob": -10.75},
                            {"id": 57, "token": "6", "logprob": 0.0},
                            {"id": 56, "token": "5", "logprob": -11.0},
                            {"id": 51, "token": "0", "logprob": -18.5},
                            {"id": 1, "token": "<s>", "logprob": -22.5},
                        ],
                    },
                    {
                        "id": 54,
                        "token": "3",
                        "logprob": -13.6875,
                        "top_logprobs": [
                            {"id": 54, "token": "3", "logprob": -13.6875},
                            {"id": 2, "token": "</s>", "logprob": 0.0},
                            {"id": 53, "token": "2", "logprob": -15.4375},
                            {"id": 51, "token": "0", "logprob": -15.625},
                            {"id": 55, "token": "4", "logprob": -15.6875},
                        ],
                    },
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}


def _faithful(answer: dict) -> dict:  # type: ignore[type-arg]
    """``answer`` as a faithful server sends it: each top-k sorted, the chosen entry the
    most likely (the greedy token); a copy."""
    answer = copy.deepcopy(answer)
    for entry in answer["choices"][0]["logprobs"]["content"]:
        entry["top_logprobs"].sort(key=lambda t: -t["logprob"])
        entry.update({k: entry["top_logprobs"][0][k] for k in ("id", "token", "logprob")})
    return answer


def test_server_ids_become_the_token_ids_and_the_top_k_keys() -> None:
    gen = parse_choice(_faithful(MLX_SERVER_ANSWER), chat=False)
    assert gen.token_ids == [55, 57, 2] and gen.top_keys == "id"
    assert gen.chosen_logprobs == [0.0, 0.0, 0.0] and gen.completion_tokens == 3
    assert gen.top_logprobs is not None and gen.top_logprobs[0] == {
        55: 0.0,
        54: -9.125,
        56: -9.9375,
        2: -21.0,
        39: -22.25,
    }
    assert generation_faults("the test output", gen) == []


def test_mlx_lm_servers_unsorted_top_k_and_copied_chosen_entry_are_named() -> None:
    gen = parse_choice(copy.deepcopy(MLX_SERVER_ANSWER), chat=False)
    # The server claims ids 56, 58, 54 ("5", "7", "3") for the text "46": not trusted, the
    # text is compared (openai_compat.text_generation), the unsorted lists are the fault.
    assert gen.token_ids is None and gen.top_keys == "text"
    assert [f.text for f in generation_faults("the test output", gen)] == [
        "top-k logprobs not sorted in the test output at positions 0, 1, 2 (position 0: entry "
        "1 -9.125 after -9.9375; position 1: entry 1 0 after -10.75; position 2: entry 1 0 "
        "after -13.6875)"
    ]


def test_one_logprob_per_generated_token() -> None:
    gen = Generation("46", None, "stop", [-0.1, -0.2], [{"4": -0.1}, {"6": -0.2}], "text")
    gen.token_texts = ["4", "6"]
    assert generation_faults("x", gen) == []
    gen.completion_tokens = 3  # usage says 3 tokens (e.g. the EOS), 2 entries came
    assert [f.text for f in generation_faults("x", gen)] == [
        "logprob count does not match the tokens in x: 2 logprobs for 3 generated tokens "
        "(usage.completion_tokens)"
    ]
    faults = shape_faults("y", [-0.1, -0.2], [{"4": -0.1}], keyed_by="text")
    assert [f.text for f in faults] == [
        "logprob count does not match the tokens in y: 2 chosen logprobs, 1 top-k lists"
    ]


def test_ties_and_unusable_text_keys_do_not_break_the_order() -> None:
    assert unsorted_positions([{1: -0.5, 2: -0.5, 3: -1.0}]) == []
    # a partial UTF-8 character shares its text with others: left out of the order
    row = {"a": -0.1, "\ufffd": -0.05, "bytes:\\xe4": 0.0, "b": -0.2}
    assert unsorted_positions([row], keyed_by="text") == []
    assert unsorted_positions([row], keyed_by="id") == [(0, 1, -0.05, -0.1)]
    assert unsorted_positions([{1: math.nan, 2: -0.1, 3: -0.2}]) == []


def test_a_logprob_above_zero_beyond_the_tolerance_is_a_fault() -> None:
    assert ABOVE_ZERO_TOL == 1e-6
    assert shape_faults("x", [5e-7, -0.1], [{1: 5e-7}, {2: -0.1}]) == []
    faults = shape_faults("x", [-0.1, 2e-6], [{1: 0.01, 2: -0.1}, {3: -0.5}])
    assert [f.text for f in faults] == [
        "logprob above 0 in x at positions 0, 1 (position 0: 0.01; position 1: 2e-06)"
    ]
    assert faults[0].positions == (0, 1)
    # -inf (probability 0) and NaN (a non-finite fault of its own) are not above 0
    assert shape_faults("x", [-math.inf, math.nan], [{1: -math.inf}, {}]) == []
