"""llama-server's probabilities are aligned on token ids across the UTF-8 gap."""

from __future__ import annotations

import math

from pytest_infercheck.backends.llama_server import align_probabilities


def entry(token: int, logprob: float) -> dict[str, object]:
    return {"id": token, "logprob": logprob, "top_logprobs": [{"id": token, "logprob": logprob}]}


def test_entries_match_tokens_one_to_one() -> None:
    chosen, top = align_probabilities([5, 6, 2], [entry(5, -0.1), entry(6, -0.2), entry(2, -0.3)])
    assert chosen == [-0.1, -0.2, -0.3] and top[1] == {6: -0.2}


def test_a_token_ending_inside_a_utf8_character_has_no_entry() -> None:
    # Token 200 is the first byte of a two-byte character: llama-server leaves its entry out.
    chosen, top = align_probabilities([200, 201, 7], [entry(201, -0.5), entry(7, -0.25)])
    assert math.isnan(chosen[0]) and top[0] == {}
    assert chosen[1:] == [-0.5, -0.25] and top[2] == {7: -0.25}
